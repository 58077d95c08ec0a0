"""``arbor serve``: its grammar and its body (the server is ``app.server``,
imported when it runs)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.cli.arguments import int_type, text_type
from app.cli.session import resolve_model
from app.platform import paths
from app.platform.ports import DEFAULT_PORT


def add_parser(sub: Any) -> None:
    """Add ``serve`` to the CLI's subparsers ``sub``."""
    serve = sub.add_parser(
        "serve",
        help="an OpenAI-compatible API whose prompt cache is the conversation tree",
    )
    serve.set_defaults(handler=_cmd_serve)
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument(
        "--port",
        type=int_type(0, 65535, "--port must be 0 to 65535"),
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0: any free one)",
    )
    serve.add_argument(
        "--api-key",
        type=text_type("API key"),
        help="key clients must send (required off loopback; or ARBOR_API_KEY)",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin allowed to call the API (repeatable; '*' for any)",
    )
    serve.add_argument(
        "--queue",
        type=int_type(0, 1000, "--queue must be 0 to 1000"),
        default=8,
        help="requests that may wait behind the running one (default 8)",
    )


def _cmd_serve(args: argparse.Namespace) -> int:
    from app.server.serve import Listen, ServeError, ServeOptions, serve

    options = ServeOptions(
        model=resolve_model(args.model),
        database=paths.database_path(args.data_dir),
        settings=args.settings,
        listen=Listen(
            args.host,
            args.port,
            args.api_key,
            tuple(args.cors_origin),
            args.queue,
        ),
    )
    try:
        serve(options, lambda line: print(line, flush=True))
    except ServeError as exc:
        print(f"arbor: error: {exc}", file=sys.stderr)
        return 1
    return 0
