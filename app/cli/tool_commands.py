"""``arbor tools …`` (the MCP servers whose tools the model may call) and
``send --tools`` (a message and the tool loop after it): their grammar and
their bodies."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.cli.arguments import (
    CliParser,
    UsageError,
    is_utf8,
    node_id_type,
    sampling_flags,
    text_type,
    tool_flags,
)
from app.cli.interrupt import StopRequest
from app.cli.output import emit, reply_json
from app.cli.session import (
    command_database,
    command_service,
    keep_within_budget,
    mark_model_used,
    reply_sampling,
    stop_on_ctrl_c,
)
from app.conversation.streams import Streams
from storage.values import Role

if TYPE_CHECKING:
    from app.conversation.service import ConversationService
    from app.conversation.tool_loop import Decide, TurnResult
    from app.mcp.client import McpClients
    from app.mcp.config import ServerConfig
    from app.mcp.toolbox import McpToolRunner, Toolbox

# A server's name as app.mcp.config checks it.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
TOOL_PERMISSIONS = ("ask", "always", "never")


def _server_name(value: str) -> str:
    if not _SERVER_NAME.match(value):
        raise argparse.ArgumentTypeError(
            f"a server's name is 1 to 32 letters, digits, '_' or '-', not {value!r}"
        )
    return value


def _server_tool(value: str) -> tuple[str, str]:
    """``SERVER.TOOL``: a server's name, a dot, its tool's name."""
    server, dot, tool = value.partition(".")
    if not dot or not _SERVER_NAME.match(server) or not tool or not is_utf8(tool):
        raise argparse.ArgumentTypeError(
            f"expected SERVER.TOOL (the server's name, a dot, its tool), not {value!r}"
        )
    return server, tool


def _pair_type(separator: str, what: str) -> Callable[[str], tuple[str, str]]:
    """An argparse type for ``KEY<separator>VALUE`` (a header, a variable)."""

    def parse(value: str) -> tuple[str, str]:
        key, found, text = value.partition(separator)
        if not found or not key.strip() or not is_utf8(value):
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
    parser = CliParser(prog="arbor tools add NAME", allow_abbrev=False)
    parser.add_argument("--url", type=text_type("URL"))
    parser.add_argument(
        "--header", dest="headers", type=_pair_type(":", "a header"), action="append"
    )
    parser.add_argument("--env", type=_pair_type("=", "a variable"), action="append")
    try:
        parsed = parser.parse_args(options)
    except UsageError as exc:
        raise UsageError(f"{exc} (the command goes after --)") from None
    if not all(is_utf8(word) for word in command):
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


def add_parser(sub: Any) -> None:
    """Add ``tools`` and its commands to the CLI's subparsers ``sub``."""
    tools = sub.add_parser(
        "tools", help="MCP servers whose tools the model may call (add, list, ...)"
    )
    tools.set_defaults(handler=_cmd_tools)
    commands = tools.add_subparsers(dest="tools_command", parser_class=CliParser)
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
    run.add_argument("node", type=node_id_type)
    run.add_argument(
        "--deny",
        action="store_true",
        help="deny the calls that ask first instead (the model reads so)",
    )
    sampling_flags(run)
    tool_flags(run)


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
    db = command_database(args)
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


def send_with_tools(args: argparse.Namespace) -> int:
    """``send --tools``: the message, and the tool loop after it, with the
    enabled servers' tools offered by the conversation's start."""
    from app.conversation import tool_loop
    from app.conversation.errors import ServiceError

    service = command_service(args, with_model=True)
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
    stop = stop_on_ctrl_c(args, service)
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
            reply_sampling(args, service),
            _tool_streams(args, stop),
            _runner(args, service, clients, toolbox),
            choice=args.tool_choice,
            decide=_decide(args),
            step_limit=_step_limit(args),
        )
        evicted = keep_within_budget(service)
    mark_model_used(service)
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

    service = command_service(args, with_model=True)
    clients, toolbox = _toolbox(args, service)
    stop = stop_on_ctrl_c(args, service)
    with service:
        turn = tool_loop.answer_calls(
            service,
            args.node,
            reply_sampling(args, service),
            _tool_streams(args, stop),
            _runner(args, service, clients, toolbox),
            decide=_decide(args),
            step_limit=_step_limit(args),
        )
        evicted = keep_within_budget(service)
    mark_model_used(service)
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
