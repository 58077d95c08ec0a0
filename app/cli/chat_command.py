"""``arbor chat``: its grammar and its body (the loop is
``app.cli.chat_repl``, imported when it runs: it loads the service)."""

from __future__ import annotations

import argparse
import io
import sys
from dataclasses import replace
from typing import Any

from app.backend.values import SamplingParams
from app.cli.arguments import sampling_flags, text_type
from app.cli.session import command_service, keep_within_budget, mark_model_used


def add_parser(sub: Any) -> None:
    """Add ``chat`` to the CLI's subparsers ``sub``."""
    chat = sub.add_parser("chat", help="chat interactively in the terminal")
    chat.set_defaults(handler=_cmd_chat)
    chat.add_argument("--system", type=text_type("system prompt"), help="system prompt")
    sampling_flags(chat)


def _cmd_chat(args: argparse.Namespace) -> int:
    from app.cli.chat_repl import chat_loop

    service = command_service(args, with_model=True)
    if isinstance(sys.stdin, io.TextIOWrapper):
        # Read undecodable bytes as lone surrogates, which the loop reports
        # per line, instead of failing the whole session on them.
        sys.stdin.reconfigure(errors="surrogateescape")
    with service:
        mark_model_used(service)
        status = chat_loop(
            service, replace(SamplingParams(), **args.sampling), args.system
        )
        # Once, at the end of the session: the loop (app/cli/chat_repl.py) has no
        # place between replies for it yet.
        keep_within_budget(service)
        return status
