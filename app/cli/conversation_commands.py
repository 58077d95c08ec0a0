"""The conversation commands: ``new``, ``system``, ``send``, ``regenerate``,
``edit``, ``show``, ``tree``, ``list``, ``restore``, ``delete``,
``delete-conversation``, ``clear-checkpoints``, ``reasoning``, ``search``,
``export``, ``import`` and ``info``; their grammar and their bodies.

The reading commands (list, show, tree, search, export) open the database
alone, without the model; ``list`` reads the file without SQLAlchemy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.backend.values import MAX_FORKS, SamplingParams
from app.cli.arguments import (
    UsageError,
    alternatives_count,
    conversation_id_type,
    node_id_type,
    path_type,
    positive_int,
    sampling_flags,
    text_type,
    tool_choice,
    tool_flags,
)
from app.cli.output import emit, reply_json
from app.cli.session import (
    command_database,
    command_service,
    keep_within_budget,
    mark_model_used,
    reply_sampling,
    stop_on_ctrl_c,
)
from app.cli.tool_commands import send_with_tools
from app.conversation.streams import AlternativeStreams, Streams
from app.platform import paths
from storage import conversation_listing
from storage.values import Role

if TYPE_CHECKING:
    from app.conversation.results import Reply
    from app.conversation.service import ConversationService


def add_parser(sub: Any) -> None:
    """Add the conversation commands to the CLI's subparsers ``sub``."""
    new = sub.add_parser("new", help="start a conversation")
    new.add_argument("--system", type=text_type("system prompt"), help="system prompt")
    new.add_argument("--title", type=text_type("title"))

    system = sub.add_parser(
        "system",
        help="a new start of CONVERSATION with system prompt TEXT (a branch of "
        "its own; the branches so far stay)",
    )
    system.add_argument("conversation", type=conversation_id_type)
    system.add_argument("text", type=text_type("system prompt"))

    send = sub.add_parser("send", help="send a message after NODE_ID (root or reply)")
    send.add_argument("node", type=node_id_type)
    send.add_argument("text", type=text_type("message"))
    sampling_flags(send)
    tool_flags(send)
    send.add_argument(
        "--tools",
        dest="tool_choice",
        type=tool_choice,
        metavar="auto|required|none|TOOL",
        help="offer the enabled MCP servers' tools (`arbor tools`) and run the "
        "calls the model makes until it answers: auto (it may call), required "
        "(its first reply is a call), none, or the one TOOL its first reply "
        "calls; the replies after results are auto",
    )

    regen = sub.add_parser("regenerate", help="a new reply beside assistant NODE_ID")
    regen.add_argument("node", type=node_id_type)
    regen.add_argument(
        "--n",
        type=alternatives_count,
        default=1,
        help=f"generate N replies together (1 to {MAX_FORKS}), seeds SEED..SEED+N-1",
    )
    sampling_flags(regen)

    edit = sub.add_parser(
        "edit", help="an edited sibling of user NODE_ID, and its reply"
    )
    edit.add_argument("node", type=node_id_type)
    edit.add_argument("text", type=text_type("message"))
    sampling_flags(edit)

    show = sub.add_parser("show", help="the messages from the root to NODE_ID")
    show.add_argument("node", type=node_id_type)

    tree = sub.add_parser("tree", help="every node of a conversation")
    tree.add_argument("conversation", type=conversation_id_type)

    sub.add_parser("list", help="conversations, most recent first")

    restore = sub.add_parser(
        "restore", help="load NODE_ID into the model and report the cost"
    )
    restore.add_argument("node", type=node_id_type)

    delete = sub.add_parser("delete", help="delete NODE_ID and its branch")
    delete.add_argument("node", type=node_id_type)

    delete_conv = sub.add_parser(
        "delete-conversation", help="delete a conversation and all its messages"
    )
    delete_conv.add_argument("conversation", type=conversation_id_type)

    clear = sub.add_parser(
        "clear-checkpoints",
        help="delete the checkpoints of one conversation or all (messages stay)",
    )
    clear.add_argument("conversation", type=conversation_id_type, nargs="?")

    reasoning = sub.add_parser(
        "reasoning",
        help="set a conversation's reasoning (the model's choices, or 'default')",
    )
    reasoning.add_argument("conversation", type=conversation_id_type)
    reasoning.add_argument("choice", type=text_type("reasoning choice"))

    search = sub.add_parser("search", help="messages of every conversation with TEXT")
    search.add_argument("text", type=text_type("search"))
    search.add_argument("--limit", type=positive_int, default=20)

    export = sub.add_parser(
        "export", help="a conversation as JSON (the whole tree) or Markdown (a path)"
    )
    export.add_argument("conversation", type=conversation_id_type)
    export.add_argument(
        "--format",
        choices=["json", "markdown"],
        help="default: from the --out file's extension (.md: markdown), else json",
    )
    export.add_argument(
        "--out", type=path_type("output"), help="file to write (default: stdout)"
    )
    export.add_argument(
        "--node",
        type=node_id_type,
        help="markdown: the path to this node (default: the active node)",
    )

    import_ = sub.add_parser(
        "import", help="a conversation exported as JSON, as a new conversation"
    )
    import_.add_argument("file", type=path_type("input"))

    sub.add_parser(
        "info",
        help="the model, where its layers run, the devices found, the data folder",
    )
    for name, handler in _HANDLERS.items():
        sub.choices[name].set_defaults(handler=handler)


def _cmd_new(args: argparse.Namespace) -> int:
    service = command_service(args, with_model=False)
    conversation, root = service.new_conversation(args.system, args.title)
    return emit({"conversation": conversation, "node": root})


def _cmd_system(args: argparse.Namespace) -> int:
    service = command_service(args, with_model=False)
    root = service.new_system_prompt(args.conversation, args.text)
    return emit({"conversation": args.conversation, "node": root})


def _generating(
    args: argparse.Namespace,
    service: ConversationService,
    action: Callable[[SamplingParams, Streams], Reply],
    extra: dict[str, Any] | None = None,
) -> int:
    stop = stop_on_ctrl_c(args, service)
    on_token = (
        (lambda piece: print(piece, end="", file=sys.stderr, flush=True))
        if args.stream
        else None
    )
    with service:
        reply = action(
            reply_sampling(args, service), Streams(on_token=on_token, should_stop=stop)
        )
        evicted = keep_within_budget(service)
    mark_model_used(service)
    if args.stream:
        print(file=sys.stderr)
    return emit(reply_json(reply, {**(extra or {}), **evicted}))


def _cmd_send(args: argparse.Namespace) -> int:
    if args.tool_choice is not None:
        return send_with_tools(args)
    service = command_service(args, with_model=True)
    # Said, not asked: a script that passes --model means it.
    previous = service.other_model(service.path(args.node)[0].conversation_id)
    return _generating(
        args,
        service,
        lambda p, streams: service.send(args.node, args.text, p, streams),
        {"previous_model": previous} if previous else None,
    )


def _cmd_regenerate(args: argparse.Namespace) -> int:
    service = command_service(args, with_model=True)
    if args.n == 1:
        return _generating(
            args, service, lambda p, streams: service.regenerate(args.node, p, streams)
        )
    stop = stop_on_ctrl_c(args, service)
    on_token = (
        (lambda index, piece: print(f"[{index}]{piece}", file=sys.stderr, flush=True))
        if args.stream
        else None
    )
    with service:
        replies = service.regenerate_parallel(
            args.node,
            reply_sampling(args, service),
            args.n,
            AlternativeStreams(on_token=on_token, should_stop=stop),
        )
        evicted = keep_within_budget(service)
    mark_model_used(service)
    return emit({"replies": [reply_json(reply) for reply in replies], **evicted})


def _cmd_edit(args: argparse.Namespace) -> int:
    service = command_service(args, with_model=True)
    return _generating(
        args,
        service,
        lambda p, streams: service.edit(args.node, args.text, p, streams),
    )


def _cmd_show(args: argparse.Namespace) -> int:
    from storage import node_rows

    path = node_rows.get_path(command_database(args), args.node)
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

    nodes = tree_reads.tree(command_database(args), args.conversation)
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
    # The common case reads the file without SQLAlchemy
    # (storage.conversation_listing): the list is what a script or a shell
    # prompt asks for most, and should be quick.
    records = conversation_listing.read_listing(paths.database_path(args.data_dir))
    if records is None:
        from storage import conversation_rows

        records = conversation_rows.list_conversations(command_database(args))
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
    service = command_service(args, with_model=True)
    with service:
        stats = service.restore(args.node)
        # A first visit checkpoints every node of the path it rebuilds.
        evicted = keep_within_budget(service)
    return emit({"node": args.node, "stats": vars(stats), **evicted})


def _cmd_delete(args: argparse.Namespace) -> int:
    service = command_service(args, with_model=False)
    deleted = service.delete_branch(args.node)
    active = deleted.active_node_id or deleted.parent_id
    return emit({"deleted": args.node, "active_node": active})


def _cmd_delete_conversation(args: argparse.Namespace) -> int:
    service = command_service(args, with_model=False)
    service.delete_conversation(args.conversation)
    return emit({"deleted_conversation": args.conversation})


def _cmd_clear_checkpoints(args: argparse.Namespace) -> int:
    service = command_service(args, with_model=False)
    freed = service.clear_checkpoints(args.conversation)
    return emit({"conversation": args.conversation, "bytes_freed": freed})


def _cmd_reasoning(args: argparse.Namespace) -> int:
    service = command_service(args, with_model=True)
    choice = None if args.choice == "default" else args.choice
    service.set_reasoning(args.conversation, choice)
    return emit({"conversation": args.conversation, "reasoning": choice})


def _cmd_search(args: argparse.Namespace) -> int:
    from storage import text_search

    hits = text_search.search(command_database(args), args.text, args.limit)
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

    db = command_database(args)
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

    service = command_service(args, with_model=False)
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
    service = command_service(args, with_model=True)
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


# Each command's body, by its name above.
_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
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
    "reasoning": _cmd_reasoning,
    "search": _cmd_search,
    "export": _cmd_export,
    "import": _cmd_import,
    "info": _cmd_info,
}
