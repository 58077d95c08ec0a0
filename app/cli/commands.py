"""The headless command line: every service operation, printing JSON.

For scripting, tests and benchmarks. Bad input, and a failure a person can
act on (a locked or full database, an operation SQLite refused), exits
non-zero with a one-line message on stderr, never a traceback. The commands
that write checkpoints keep them within the budget the window's Storage
dialog sets.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.backend.errors import ContextFullError, Interrupted, InvalidSetting
from app.backend.values import SamplingParams
from app.cli.guarded import bound_worker_waits, needs_guard, run_guarded
from app.cli.interrupt import StopRequest
from app.cli.output import emit, reply_json
from app.cli.parser import (
    UsageError,
    backend_settings,
    build_parser,
    resolve_model,
    sampling_given,
)
from app.conversation.errors import USER_ERRORS
from app.conversation.presets import conversation_sampling
from app.conversation.streams import AlternativeStreams, Streams
from app.library.errors import LIBRARY_ERRORS
from app.platform import paths
from storage import catalog
from storage.values import Role

if TYPE_CHECKING:
    from app.conversation.results import Reply
    from app.conversation.service import ConversationService
    from app.conversation.tool_loop import Decide, TurnResult
    from app.mcp.client import McpClients
    from app.mcp.config import ServerConfig
    from app.mcp.toolbox import McpToolRunner, Toolbox
    from storage.db import Database


log = logging.getLogger(__name__)


def _sampling(args: argparse.Namespace, service: ConversationService) -> SamplingParams:
    """The sampling of a reply to ``args.node``: its conversation's (the
    defaults where it has none), with the flags given on top."""
    stored = service.stored_sampling(args.node)
    base, _preset = conversation_sampling(stored, SamplingParams())
    return replace(base, **args.sampling)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    try:
        args = _parse(argv)
        if needs_guard(args.workers):
            # A lost worker aborts the process that uses it: not this one.
            return run_guarded(sys.argv[1:] if argv is None else argv, args.workers)
        if args.workers:
            # The child: a worker that stops answering ends it within a bound.
            bound_worker_waits(args.workers)
        _init_logging(args.verbose)
        # The databases a command opens are closed when it ends, so that
        # what their writers hold back (a restore's bookkeeping) is written.
        with contextlib.ExitStack() as args.closing:
            return _COMMANDS[args.command](args)
    except UsageError as exc:
        print(f"arbor: usage error: {exc} (see arbor --help)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (e.g. `arbor tree 1 | head`): not an error.
        sys.stderr.close()
        return 0
    except ContextFullError as exc:
        print(f"arbor: error: {_context_full_line(exc)}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        # Ctrl+C while a prompt was read: as Stop in the window, what was
        # sent stays stored, unanswered (``send`` then answers it).
        print(f"arbor: stopped: {exc} Nothing was answered.", file=sys.stderr)
        return 130
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


def _context_full_line(exc: ContextFullError) -> str:
    """What a full context says here: the service's words (a larger context
    named only where one holds the message and the model reads it), and the
    option that gives it, since the CLI's context size is ``--n-ctx``."""
    size = exc.raise_to
    return f"{exc}" if size is None else f"{exc} Here: --n-ctx {size}."


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
        args.settings = backend_settings(args)
        # Only the commands that generate have sampling flags.
        args.sampling = sampling_given(args) if hasattr(args, "temperature") else None
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
    from storage import node_rows
    from storage.db import open_database

    db = open_database(paths.database_path(args.data_dir))
    args.closing.callback(db.close)
    node_rows.mark_interrupted_generations(db)
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


def _cmd_new(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    conversation, root = service.new_conversation(args.system, args.title)
    return emit({"conversation": conversation, "node": root})


def _cmd_system(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    root = service.new_system_prompt(args.conversation, args.text)
    return emit({"conversation": args.conversation, "node": root})


def _generating(
    args: argparse.Namespace,
    service: ConversationService,
    action: Callable[[SamplingParams, Streams], Reply],
    extra: dict[str, Any] | None = None,
) -> int:
    stop = _stop_on_ctrl_c(args, service)
    on_token = (
        (lambda piece: print(piece, end="", file=sys.stderr, flush=True))
        if args.stream
        else None
    )
    with service:
        reply = action(
            _sampling(args, service), Streams(on_token=on_token, should_stop=stop)
        )
        evicted = _keep_within_budget(service)
    _note_model_used(service)
    if args.stream:
        print(file=sys.stderr)
    return emit(reply_json(reply, {**(extra or {}), **evicted}))


def _stop_on_ctrl_c(
    args: argparse.Namespace, service: ConversationService
) -> StopRequest:
    """Ctrl+C from now on stops the reply between its tokens, or the prompt
    being read between its batches (``--stream`` tells how far it is)."""
    stop = StopRequest(sys.stderr if getattr(args, "stream", False) else None)
    signal.signal(signal.SIGINT, stop.request)
    if service.engine is not None:
        service.engine.decode_watch = stop.watch_decode
    return stop


def _keep_within_budget(service: ConversationService) -> dict[str, int]:
    # Imported here: the reading commands start without the preferences.
    from app.preferences import keep_checkpoints_within_budget

    return keep_checkpoints_within_budget(service)


def _note_model_used(service: ConversationService) -> None:
    # "Last used" in the model library means chatted with: commands that
    # only read (info, restore, show) leave the data folder as it was.
    from app.library.catalog import shipped_catalog
    from app.library.installed import note_model_used

    assert service.engine is not None
    note_model_used(service.db.path.parent, service.engine.path, shipped_catalog())


def _cmd_send(args: argparse.Namespace) -> int:
    if args.tool_choice is not None:
        return _send_with_tools(args)
    service = _open(args, with_model=True)
    # Said, not asked: a script that passes --model means it.
    previous = service.other_model(service.path(args.node)[0].conversation_id)
    return _generating(
        args,
        service,
        lambda p, streams: service.send(args.node, args.text, p, streams),
        {"previous_model": previous} if previous else None,
    )


def _cmd_regenerate(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    if args.n == 1:
        return _generating(
            args, service, lambda p, streams: service.regenerate(args.node, p, streams)
        )
    stop = _stop_on_ctrl_c(args, service)
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
            AlternativeStreams(on_token=on_token, should_stop=stop),
        )
        evicted = _keep_within_budget(service)
    _note_model_used(service)
    return emit({"replies": [reply_json(reply) for reply in replies], **evicted})


def _cmd_edit(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    return _generating(
        args,
        service,
        lambda p, streams: service.edit(args.node, args.text, p, streams),
    )


def _cmd_show(args: argparse.Namespace) -> int:
    from storage import node_rows

    path = node_rows.get_path(_open_database(args), args.node)
    return emit(
        {
            "conversation": path[0].conversation_id,
            "messages": [
                {
                    "id": n.id,
                    "role": "system" if n.role == Role.ROOT else n.role,
                    "text": n.text,
                    **({"thinking": n.thinking} if n.thinking else {}),
                    "tokens": len(n.tokens),
                    "start": n.start_pos,
                    "status": n.status,
                    **({"generation": n.generation} if n.generation else {}),
                    **({"tool_use": n.tool_use} if n.tool_use else {}),
                }
                for n in path
            ],
        }
    )


def _cmd_tree(args: argparse.Namespace) -> int:
    from storage import tree_reads

    nodes = tree_reads.tree(_open_database(args), args.conversation)
    return emit(
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
                    **({"tool_use": n.tool_use} if n.tool_use else {}),
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
        from storage import conversation_rows

        records = conversation_rows.list_conversations(_open_database(args))
    return emit(
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
                    # "local server" for one an API client began; null: made
                    # in the window or the CLI.
                    "origin": c.origin,
                    "client": c.client,
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
    return emit({"node": args.node, "stats": vars(stats), **evicted})


def _cmd_delete(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    deleted = service.delete_branch(args.node)
    active = deleted.active_node_id or deleted.parent_id
    return emit({"deleted": args.node, "active_node": active})


def _cmd_delete_conversation(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    service.delete_conversation(args.conversation)
    return emit({"deleted_conversation": args.conversation})


def _cmd_clear_checkpoints(args: argparse.Namespace) -> int:
    service = _open(args, with_model=False)
    freed = service.clear_checkpoints(args.conversation)
    return emit({"conversation": args.conversation, "bytes_freed": freed})


def _cmd_reasoning(args: argparse.Namespace) -> int:
    service = _open(args, with_model=True)
    choice = None if args.choice == "default" else args.choice
    service.set_reasoning(args.conversation, choice)
    return emit({"conversation": args.conversation, "reasoning": choice})


def _cmd_search(args: argparse.Namespace) -> int:
    from storage import text_search

    hits = text_search.search(_open_database(args), args.text, args.limit)
    return emit(
        {
            "hits": [
                {
                    "conversation": hit.conversation_id,
                    "title": hit.conversation_title,
                    "node": hit.node_id,
                    "role": hit.role,
                    # Plain text for a terminal: the matches between [ and ].
                    "snippet": hit.snippet.replace(
                        text_search.MATCH_START, "["
                    ).replace(text_search.MATCH_END, "]"),
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
    return emit(
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
    return emit(
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
    # Which device (a worker's included) holds which layers, and its bytes.
    model["layer_holders"] = [holder.as_dict() for holder in info.layer_holders]
    if info.offload_cost is not None:
        model["offload_cost"] = {
            **asdict(info.offload_cost),
            # The estimate for the layers offloaded now, beside gpu_bytes.
            "estimated_bytes": info.offload_cost.device_bytes(
                info.offloaded_layers, info.n_ctx
            ),
        }
    return emit(
        {
            "model": model,
            "profile": service.engine.profile_details,
            "database": str(service.db.path),
            "devices": [device.as_dict() for device in devices.list_devices()],
            "backends": devices.load_backends().files,
        }
    )


def _cmd_models(args: argparse.Namespace) -> int:
    from app.cli import library_commands

    if args.models_command is None:
        raise UsageError("name a models command: list, catalog, search, pull, add, rm")
    data_dir = args.data_dir or paths.default_data_dir()
    return emit(library_commands.run(args, data_dir))


def _cmd_chat(args: argparse.Namespace) -> int:
    from app.cli.chat_repl import chat_loop

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
        # Once, at the end of the session: the loop (app/cli/chat_repl.py) has no
        # place between replies for it yet.
        _keep_within_budget(service)
        return status


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


def _cmd_worker(args: argparse.Namespace) -> int:
    from app.cli.worker import run_worker

    host, port = args.listen
    return run_worker(host, port, args.worker_threads)


def _cmd_workers(args: argparse.Namespace) -> int:
    from app.backend import rpc_client, worker_survey

    def report(finding: dict[str, object]) -> None:
        # At once: the window reads each line as it comes, and a worker that
        # aborts this process must not take the lines before it along.
        print(json.dumps(finding), flush=True)

    timeout = args.hello_timeout or rpc_client.HELLO_TIMEOUT_S
    return 0 if worker_survey.survey(args.addresses, timeout, report) else 1


def _cmd_bench(args: argparse.Namespace) -> int:
    from app.bench.command import run_bench

    model = resolve_model(args.bench_model or args.model)
    return run_bench(model, args.settings, args.repeats, args.quick, args.json)


# --- tools: MCP servers and the tool loop ----------------------------------------


def _cmd_tools(args: argparse.Namespace) -> int:
    from app.mcp import config

    command = args.tools_command
    if command is None:
        raise UsageError(
            "name a tools command: add, list, rm, allow, enable, disable, run"
        )
    if command == "run":
        return _run_waiting_calls(args)
    adding = _server_to_add(args) if command == "add" else None
    db = _open_database(args)
    if adding is not None:
        config.add_server(db, adding)
        server = config.find_server(config.load_servers(db), args.name)
        return emit({"added": _server_json(server)})
    if command == "list":
        return emit({"servers": _servers_json(config.load_servers(db), args.no_start)})
    if command == "rm":
        return emit({"removed": config.remove_server(db, args.name).name})
    if command in ("enable", "disable"):
        config.set_enabled(db, args.name, command == "enable")
        return emit({"server": args.name, "enabled": command == "enable"})
    server, tool = args.tool
    config.set_permission(db, server, tool, config.Permission(args.permission))
    return emit({"server": server, "tool": tool, "permission": args.permission})


def _server_to_add(args: argparse.Namespace) -> ServerConfig:
    from app.cli.parser import server_args
    from app.mcp import config

    given = server_args(args.rest)
    if given.url is not None:
        return config.http_server(args.name, given.url, given.headers)
    return config.stdio_server(args.name, given.command, given.env)


def _server_json(server: ServerConfig) -> dict[str, Any]:
    """A server as the tools commands print it: header values and
    variables' values are not printed (they may be keys)."""
    where = (
        {"url": server.url, "headers": sorted(server.headers)}
        if server.url
        else {"command": list(server.command), "env": sorted(server.env)}
    )
    return {
        "name": server.name,
        "transport": server.transport,
        **where,
        "enabled": server.enabled,
        "permissions": {tool: str(p) for tool, p in server.permissions.items()},
    }


def _servers_json(servers: list[ServerConfig], no_start: bool) -> list[dict[str, Any]]:
    """Each server, with its tools when it is started to list them."""
    if no_start or not servers:
        return [_server_json(server) for server in servers]
    from app.mcp.client import McpClients
    from app.mcp.toolbox import build_toolbox, offered_as

    with McpClients(servers) as clients:
        listed = clients.list_all()
    toolbox = build_toolbox(servers, listed)
    found = []
    for server in servers:
        tools = listed[server.name]
        data = _server_json(server)
        if isinstance(tools, list):
            data["status"] = "ok"
            data["tools"] = [
                {
                    "name": tool.name,
                    # The name the model calls it by (null: its server is
                    # disabled).
                    "offered_as": offered_as(toolbox, server.name, tool.name),
                    "description": tool.description,
                    "input_schema": tool.input_schema,
                    "permission": str(server.permission(tool.name)),
                }
                for tool in tools
            ]
        else:
            data["status"] = "unavailable"
            data["error"] = str(tools)
        found.append(data)
    return found


def _send_with_tools(args: argparse.Namespace) -> int:
    """``send --tools``: the message, and the tool loop after it, with the
    enabled servers' tools offered by the conversation's start."""
    from app.conversation import tool_loop
    from app.conversation.errors import ServiceError

    service = _open(args, with_model=True)
    if service.path(args.node)[-1].role == Role.USER:
        # Checked before a new start with the tools is made for it.
        raise ServiceError(
            f"Node {args.node} is a user message; send continues from an "
            "assistant reply or the conversation start."
        )
    clients, toolbox = _toolbox(args, service)
    offered = toolbox.openai_tools()
    if args.tool_choice not in ("auto", "none") and not offered:
        raise UsageError(
            f"--tools {args.tool_choice} needs tools: no enabled MCP server "
            "offers any (see `arbor tools list`)"
        )
    previous = service.other_model(service.path(args.node)[0].conversation_id)
    stop = _stop_on_ctrl_c(args, service)
    with service:
        offering = tool_loop.offering_start(
            service,
            args.node,
            offered,
            {tool.name: tool.server for tool in toolbox.tools},
        )
        turn = tool_loop.send(
            service,
            offering.node,
            args.text,
            _sampling(args, service),
            _tool_streams(args, stop),
            _runner(args, service, clients, toolbox),
            choice=args.tool_choice,
            decide=_decide(args),
            step_limit=_step_limit(args),
        )
        evicted = _keep_within_budget(service)
    _note_model_used(service)
    if args.stream:
        print(file=sys.stderr)
    extra = {
        "start": offering.start,
        "new_start": offering.made,
        "copied_nodes": list(offering.copied),
        **({"previous_model": previous} if previous else {}),
        **evicted,
    }
    return emit(_turn_json(service, turn, toolbox, args, extra))


def _run_waiting_calls(args: argparse.Namespace) -> int:
    """``tools run NODE``: the calls of reply NODE that have no result yet,
    decided now, then the loop as ``send --tools`` goes on."""
    from app.conversation import tool_loop

    service = _open(args, with_model=True)
    clients, toolbox = _toolbox(args, service)
    stop = _stop_on_ctrl_c(args, service)
    with service:
        turn = tool_loop.answer_calls(
            service,
            args.node,
            _sampling(args, service),
            _tool_streams(args, stop),
            _runner(args, service, clients, toolbox),
            decide=_decide(args),
            step_limit=_step_limit(args),
        )
        evicted = _keep_within_budget(service)
    _note_model_used(service)
    if args.stream:
        print(file=sys.stderr)
    return emit(_turn_json(service, turn, toolbox, args, dict(evicted)))


def _toolbox(
    args: argparse.Namespace, service: ConversationService
) -> tuple[McpClients, Toolbox]:
    """The sessions with the enabled servers (closed when the command
    ends: the servers stop), and the tools they offer."""
    from app.mcp import config
    from app.mcp.client import McpClients
    from app.mcp.toolbox import build_toolbox

    servers = [s for s in config.load_servers(service.db) if s.enabled]
    clients = McpClients(servers)
    args.closing.callback(clients.close)
    return clients, build_toolbox(servers, clients.list_all() if servers else {})


def _runner(
    args: argparse.Namespace,
    service: ConversationService,
    clients: McpClients,
    toolbox: Toolbox,
) -> McpToolRunner:
    from app.mcp import config
    from app.mcp.toolbox import McpToolRunner

    return McpToolRunner(
        clients,
        toolbox,
        args.tool_timeout or config.CALL_TIMEOUT_S,
        config.RESULT_TOKENS,
        lambda text: len(service.count_tokens(text)),
    )


def _tool_streams(args: argparse.Namespace, stop: StopRequest) -> Streams:
    on_token = (
        (lambda piece: print(piece, end="", file=sys.stderr, flush=True))
        if args.stream
        else None
    )
    return Streams(on_token=on_token, should_stop=stop)


def _decide(args: argparse.Namespace) -> Decide:
    from app.conversation import tool_loop

    if getattr(args, "deny", False):
        return tool_loop.deny_all
    return tool_loop.approve_all if args.approve_tools else tool_loop.wait_for_approval


def _step_limit(args: argparse.Namespace) -> int:
    from app.mcp import config

    return int(args.max_steps or config.STEP_LIMIT)


def _turn_json(
    service: ConversationService,
    turn: TurnResult,
    toolbox: Toolbox,
    args: argparse.Namespace,
    extra: dict[str, Any],
) -> dict[str, Any]:
    """A tool turn as ``send --tools`` and ``tools run`` print it: the last
    reply as ``send`` prints one, every node the turn made in order, each
    call and what became of it, and why the turn ended."""
    from storage import node_rows

    last = turn.last_reply
    data = reply_json(last) if last is not None else {}
    data["user_node"] = turn.user_node
    nodes = []
    for node_id in turn.nodes:
        node = node_rows.get_node(service.db, node_id)
        entry: dict[str, Any] = {"id": node.id, "role": str(node.role)}
        entry["text"] = node.text
        if node.tool_use:
            entry["tool_use"] = node.tool_use
        nodes.append(entry)
    calls = []
    for call in turn.calls:
        tool = toolbox.find(call.name)
        calls.append(
            {
                **call.as_dict(),
                "server": tool.server if tool else None,
                "tool": tool.tool if tool else None,
            }
        )
    pending = [c.call_id for c in turn.pending]
    ended = str(turn.ending)
    data.update(
        {
            "nodes": nodes,
            "calls": calls,
            "needs_approval": pending,
            "ended": ended,
            "rounds": turn.rounds,
            "step_limit": _step_limit(args),
            "tools": [tool.name for tool in toolbox.tools],
            **(
                {"unavailable_servers": dict(toolbox.unavailable)}
                if toolbox.unavailable
                else {}
            ),
        }
    )
    if pending:
        reply = turn.pending[0].reply_node
        data["note"] = (
            f"{len(pending)} call(s) wait for approval and were not run: run them "
            f"with `arbor tools run {reply} --approve-tools` (or deny them with "
            "--deny)."
        )
    elif ended == "step_limit":
        data["note"] = (
            f"The step limit ({_step_limit(args)} rounds of calls) was reached: the "
            f"last reply's calls were not run (`arbor tools run "
            f"{turn.nodes[-1]}` runs them)."
        )
    data.update(extra)
    return data


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
    "worker": _cmd_worker,
    "workers": _cmd_workers,
    "serve": _cmd_serve,
    "tools": _cmd_tools,
}
