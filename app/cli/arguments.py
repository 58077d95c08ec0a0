"""The command line's shared grammar: the parser class, the argument types
and the flags several command families take.

Every argument is checked by its type, before a database is opened or a model
loads, so that a bad one fails fast with a usage error. Each command family
(``conversation_commands``, ``tool_commands``, ...) builds its own
subparsers from these, beside its bodies; ``parser.build_parser`` puts them
together.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from app.backend.errors import InvalidSetting
from app.backend.settings import worker_address
from app.backend.values import MAX_FORKS, SamplingParams


class UsageError(Exception):
    """A mistake in the command line."""


class CliParser(argparse.ArgumentParser):
    """An argument parser whose mistakes raise ``UsageError`` (exit 2, one
    line on stderr) instead of exiting."""

    def error(self, message: str) -> NoReturn:
        """Raise ``UsageError`` with ``message``, which the CLI prints."""
        raise UsageError(message)


# SQLite stores ids as signed 64-bit integers: anything larger cannot name a
# row, and would overflow in the driver instead of being "not found".
_MAX_ID = 2**63 - 1


def int_type(low: int, high: int, rule: str) -> Callable[[str], int]:
    """An argparse type for a whole number in ``[low, high]``; ``rule`` says so."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = low - 1
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{rule}, not {value!r}")
        return number

    return parse


node_id_type = int_type(1, _MAX_ID, "node id must be a positive integer below 2^63")
alternatives_count = int_type(1, MAX_FORKS, f"--n must be 1 to {MAX_FORKS}")
conversation_id_type = int_type(
    1, _MAX_ID, "conversation id must be a positive integer below 2^63"
)
positive_int = int_type(1, _MAX_ID, "expected a positive integer")


def worker_type(value: str) -> str:
    """``--worker``: a worker's ``HOST:PORT`` (IPv4 or a host name)."""
    try:
        return worker_address(value)
    except InvalidSetting as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def text_type(what: str) -> Callable[[str], str]:
    """An argparse type for text that goes to the database and the tokenizer.

    Python hands over argument bytes that are not UTF-8 as lone surrogates
    (surrogateescape); they would fail deep inside SQLite or llama.cpp.
    """

    def parse(value: str) -> str:
        if not is_utf8(value):
            raise argparse.ArgumentTypeError(f"the {what} is not valid UTF-8")
        return value

    return parse


def path_type(what: str) -> Callable[[str], Path]:
    """An argparse type for a path: absolute, so it means the same everywhere."""

    def parse(value: str) -> Path:
        if not is_utf8(value):
            raise argparse.ArgumentTypeError(f"the {what} path is not valid UTF-8")
        return Path(value).expanduser().resolve()

    return parse


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Sampling flag -> SamplingParams field. A flag left out leaves the field to
# the conversation's own sampling (a preset picked in the window), else to
# the defaults.
SAMPLING_FLAGS = {
    "max_tokens": int,
    "temperature": float,
    "top_k": int,
    "top_p": float,
    "min_p": float,
    "repeat_penalty": float,
    "seed": int,
}


def sampling_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that samples a reply, and ``--stream``."""
    for field, kind in SAMPLING_FLAGS.items():
        parser.add_argument("--" + field.replace("_", "-"), type=kind)
    parser.add_argument(
        "--stream", action="store_true", help="echo tokens to stderr as they come"
    )


def sampling_given(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling fields given as flags; checked now, so that a bad value
    fails before any model loads."""
    given = {
        field: getattr(args, field)
        for field in SAMPLING_FLAGS
        if getattr(args, field) is not None
    }
    SamplingParams(**given)  # raises InvalidSetting
    return given


# What a tool choice or a tool may be called (OpenAI's rule, as the local
# server checks it).
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def tool_choice(value: str) -> str:
    """``--tools``: auto, required, none or a tool's name."""
    if value in ("auto", "required", "none") or _TOOL_NAME.match(value):
        return value
    raise argparse.ArgumentTypeError(
        f"expected auto, required, none or a tool's name, not {value!r}"
    )


def _positive_seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 3600:
        raise argparse.ArgumentTypeError(
            f"expected seconds above 0, at most 3600, not {value!r}"
        )
    return seconds


def tool_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that runs the model's tool calls."""
    parser.add_argument(
        "--approve-tools",
        action="store_true",
        help="run the calls of tools that ask first (without it such a call is "
        "stored, not run, and the command says so)",
    )
    parser.add_argument(
        "--tool-timeout",
        type=_positive_seconds,
        metavar="SECONDS",
        help="how long one tool call may take (default 60)",
    )
    parser.add_argument(
        "--max-steps",
        type=int_type(1, 100, "--max-steps must be 1 to 100"),
        metavar="N",
        help="rounds of tool calls one message may lead to (default 8)",
    )
