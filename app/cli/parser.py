"""The command line's grammar put together: the global flags here, each
command family's subparsers from the family's own module, beside its bodies
(``conversation_commands``, ``tool_commands``, ``library_commands``,
``chat_command``, ``serve_command``, ``worker``, ``bench_command``). Each
command's parser names its body (``handler``), which ``commands.run`` calls.

Every argument is checked here, before a database is opened or a model
loads, so that a bad one fails fast with a usage error.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from app.backend.settings import (
    ALL_GPU_LAYERS,
    AUTO_GPU_LAYERS,
    KV_CACHE_TYPES,
    BackendSettings,
)
from app.cli import (
    bench_command,
    chat_command,
    conversation_commands,
    library_commands,
    serve_command,
    tool_commands,
    worker,
)
from app.cli.arguments import CliParser, path_type, worker_type


class _VersionAction(argparse.Action):
    """``--version``, reading the version only when asked.

    The distribution's metadata takes ~30 ms to read: more than the rest of
    ``arbor list`` needs.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        from app.platform.version import __version__

        print(f"{parser.prog} {__version__}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for ``arbor``."""
    # No abbreviations at the top: "regenerate --n 3" would otherwise be taken
    # as an ambiguous "--n-ctx"/"--n-gpu-layers" before the subcommand sees it.
    parser = CliParser(
        prog="arbor",
        description="Branching chat with local GGUF models.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version", action=_VersionAction, help="show the version and exit"
    )
    parser.add_argument(
        "--data-dir",
        type=path_type("data folder"),
        help="folder of the database (default: the user data folder)",
    )
    parser.add_argument(
        "--model",
        type=path_type("model"),
        help="GGUF model file (default: the starter model)",
    )
    parser.add_argument(
        "--n-ctx",
        type=int,
        help=f"context size in tokens (default: the size raised for the "
        f"conversation in the window, else {BackendSettings.n_ctx})",
    )
    parser.add_argument(
        "--n-gpu-layers",
        type=_gpu_layers,
        default=AUTO_GPU_LAYERS,
        metavar="N|all|auto",
        help="layers to offload to the GPU (default auto: as many as fit; 0: none)",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="CPU threads (0: automatic)"
    )
    parser.add_argument("--batch-size", type=int, default=BackendSettings.n_batch)
    parser.add_argument(
        "--flash-attn",
        action="store_true",
        help="use flash attention (always on with --worker)",
    )
    parser.add_argument(
        "--kv-type",
        choices=list(KV_CACHE_TYPES),
        default="f16",
        help="KV cache element type",
    )
    parser.add_argument(
        "--worker",
        dest="workers",
        type=worker_type,
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="an `arbor worker` whose devices hold the model's layers (repeatable; "
        "every layer by default, split by the workers' free memory; flash "
        "attention is then always on)",
    )
    parser.add_argument(
        "--worker-layers",
        type=_layer_counts,
        default=(),
        metavar="N,N,...",
        help="split the layers by hand: how many each --worker holds, in their "
        "order (the output layer counts as the last; this computer keeps the "
        "first layers left over; `arbor info` says how many a model has)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", parser_class=CliParser)

    conversation_commands.add_parser(sub)
    tool_commands.add_parser(sub)
    library_commands.add_parser(sub)
    chat_command.add_parser(sub)
    serve_command.add_parser(sub)
    worker.add_parser(sub)
    bench_command.add_parser(sub)
    return parser


def _layer_counts(value: str) -> tuple[int, ...]:
    """``--worker-layers``: whole layer counts, separated by commas."""
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected layer counts separated by commas (20,12), not {value!r}"
        ) from None


def _gpu_layers(text: str) -> int:
    """``--n-gpu-layers``: a count, "all" or "auto"."""
    named = {"all": ALL_GPU_LAYERS, "auto": AUTO_GPU_LAYERS}
    if text.lower() in named:
        return named[text.lower()]
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no layer count (a number, all or auto)"
        ) from None


def backend_settings(args: argparse.Namespace) -> BackendSettings:
    """The backend settings the flags ask for."""
    return BackendSettings(
        n_ctx=BackendSettings.n_ctx if args.n_ctx is None else args.n_ctx,
        n_gpu_layers=args.n_gpu_layers,
        n_threads=args.threads,
        n_batch=args.batch_size,
        flash_attn=args.flash_attn,
        kv_cache_type=args.kv_type,
        workers=tuple(args.workers),
        worker_layers=args.worker_layers,
    )
