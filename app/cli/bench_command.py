"""``arbor bench``: its grammar and its body (the benchmark is
``app.bench``, imported when it runs)."""

from __future__ import annotations

import argparse
from typing import Any

from app.cli.arguments import path_type, positive_int
from app.cli.session import resolve_model


def add_parser(sub: Any) -> None:
    """Add ``bench`` to the CLI's subparsers ``sub``."""
    bench = sub.add_parser(
        "bench", help="measure restoring vs. reprocessing on a scratch database"
    )
    bench.set_defaults(handler=_cmd_bench)
    bench.add_argument(
        "--model",
        dest="bench_model",
        type=path_type("model"),
        help="GGUF model file (default: the starter model)",
    )
    bench.add_argument(
        "--json",
        type=path_type("JSON"),
        help="also write the figures as JSON to this file",
    )
    bench.add_argument(
        "--repeats",
        type=positive_int,
        help="measurements per figure (default 3; medians are reported)",
    )
    bench.add_argument(
        "--quick", action="store_true", help="tiny sizes, one repeat: a smoke test"
    )


def _cmd_bench(args: argparse.Namespace) -> int:
    from app.bench.command import run_bench

    model = resolve_model(args.bench_model or args.model)
    return run_bench(model, args.settings, args.repeats, args.quick, args.json)
