"""Export a conversation as Markdown or JSON, and import that JSON.

Markdown is for reading: the path from the conversation start to one node
(by default where the user left it), as the transcript shows it. JSON is for
moving a conversation between databases: the whole tree with each message's
role, text, reasoning, status, time and generation settings (sampling
parameters and model name), but no tokens and no checkpoints. Those belong to
one model and one llama.cpp build; an imported node gets its span rendered
and its checkpoint made the first time a model visits it, like a
conversation created before any model was loaded.

An import is checked whole before anything is written and then written in one
transaction, so a file that is refused leaves the database as it was. A file
is first read and its envelope checked (``read_json_file``: is it JSON, is it
ours, which version), with messages that name it and say what to do; the
nodes are checked by ``import_json``. An imported conversation's title ends
in " (imported)", once, so that the copy and the original can be told apart.

It lives in storage because it is a format of the stored data and needs
nothing else: the window and the CLI both call it directly, as they call the
storage row modules (views may not import the conversation service).

The JSON format, version 1::

    {"format": "arbor-conversation", "version": 1,
     "title": str, "system_prompt": str | null, "reasoning": str | null,
     "created_at": ISO 8601, "active": node id, "origin": "local server" | null,
     "client": str | null, "context_size": int | null,
     "nodes": [{"id": int, "parent": int | null,
                "role": "root"|"user"|"assistant"|"tool",
                "text": str, "thinking": str, "status": str,
                "created_at": ISO 8601, "generation": {...} | null,
                "tool_use": {...} | null}, ...]}

Node ids are the exporting database's; they only link nodes within the file.
``origin`` (where the conversation was made, null for the window or the
CLI) came after the first files of version 1: a file without it imports as
made in the window. So did ``client`` (the program that made it) and
``tool_use`` (a start's tools, a reply's calls, a tool result's call) and
``context_size`` (a context raised for this conversation): a file without
them has none.
"""

from __future__ import annotations

import json
import os
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from storage import conversation_rows, tool_use
from storage.conversation_listing import ConversationRecord
from storage.conversation_rows import NewNode
from storage.db import Database
from storage.errors import ExchangeError
from storage.records import NodeRecord
from storage.tables import DEFAULT_TITLE
from storage.values import Origin, Role, Status

FORMAT = "arbor-conversation"
VERSION = 1

# Larger files are refused before they are read: JSON of a conversation is
# about its text, and no conversation holds 200 MB of it.
MAX_IMPORT_BYTES = 200 * 1024 * 1024

ROLES = tuple(Role)
# The statuses a node can be imported with. A reply cut short ("interrupted",
# "generating") comes in as "stopped": its span is rendered afresh as a
# closed turn, which is what "stopped" means.
_IMPORTED_STATUS: dict[str, Status] = {
    Status.COMPLETE: Status.COMPLETE,
    Status.STOPPED: Status.STOPPED,
    Status.TRUNCATED: Status.TRUNCATED,
    Status.INTERRUPTED: Status.STOPPED,
    Status.GENERATING: Status.STOPPED,
}
# Who may follow whom: the tree alternates as the service builds it.
_PARENT_ROLES = {
    Role.USER: (Role.ROOT, Role.ASSISTANT, Role.TOOL),
    Role.ASSISTANT: (Role.USER, Role.TOOL),
    # A reply's calls are answered one result after another.
    Role.TOOL: (Role.ASSISTANT, Role.TOOL),
}
_MAX_CLIENT = 100
# No model reads more than this many positions (llama.cpp's largest are ~10M).
_MAX_CONTEXT_SIZE = 1 << 24
_MAX_TITLE = 200
# Appended to an imported conversation's title (not again to a copy's copy).
IMPORTED_MARK = " (imported)"
# What a refusal of a file that is not ours says to do instead.
_IMPORT_HINT = "Arbor imports the .json files it exports."
# How far into a file that is not JSON to look for our format's name, to tell
# a damaged export from some other file.
_SNIFF_CHARS = 4096
_MAX_REASONING = 16

SPEAKERS = {
    Role.ROOT: "System",
    Role.USER: "You",
    Role.ASSISTANT: "Assistant",
    Role.TOOL: "Tool",
}


@dataclass(frozen=True)
class ImportResult:
    """The conversation an import created."""

    conversation_id: int
    node_count: int
    active_node_id: int | None
    title: str


# --- export -------------------------------------------------------------------------


def export_json(db: Database, conversation_id: int) -> dict[str, Any]:
    """The whole tree of a conversation as a JSON-ready dict (format version 1)."""
    conversation, nodes = conversation_rows.read_conversation(db, conversation_id)
    return {
        "format": FORMAT,
        "version": VERSION,
        "title": conversation.title,
        "system_prompt": conversation.system_prompt,
        "reasoning": conversation.reasoning,
        "created_at": _iso(conversation.created_at),
        "active": conversation.active_node_id,
        "origin": conversation.origin,
        "client": conversation.client,
        "context_size": conversation.context_size,
        "nodes": [
            {
                "id": node.id,
                "parent": node.parent_id,
                "role": node.role,
                "text": node.text,
                "thinking": node.thinking,
                "status": node.status,
                "created_at": _iso(node.created_at),
                "generation": node.generation,
                "tool_use": node.tool_use,
            }
            for node in nodes
        ],
    }


def dumps_json(data: dict[str, Any]) -> str:
    """Exported JSON as text: UTF-8 friendly, indented, ends with a newline."""
    return json.dumps(data, ensure_ascii=False, indent=2) + "\n"


def export_markdown(
    db: Database, conversation_id: int, node_id: int | None = None
) -> str:
    """The path from the start to ``node_id`` (default: the active node) as Markdown.

    The title is a heading; the system prompt, then each message under a
    heading naming who wrote it. A reply's reasoning is folded in a
    ``<details>`` block (collapsed where Markdown renders HTML, plain text
    elsewhere). Raises ``ExchangeError`` if ``node_id`` is in another
    conversation.
    """
    conversation, nodes = conversation_rows.read_conversation(db, conversation_id)
    by_id = {node.id: node for node in nodes}
    target = node_id if node_id is not None else conversation.active_node_id
    if target is None or target not in by_id:
        if node_id is not None:
            raise ExchangeError(
                f"Node {node_id} is not part of conversation {conversation_id}."
            )
        target = nodes[0].id  # no remembered place: the start
    return _markdown(conversation, _path(by_id, target))


def _path(by_id: dict[int, NodeRecord], node_id: int) -> list[NodeRecord]:
    path: list[NodeRecord] = []
    current: int | None = node_id
    while current is not None:
        node = by_id[current]
        path.append(node)
        current = node.parent_id
    return path[::-1]


def _markdown(conversation: ConversationRecord, path: list[NodeRecord]) -> str:
    parts = [f"# {_one_line(conversation.title)}"]
    for node in path:
        if node.role == Role.ROOT:
            if node.text:
                parts.append(f"## {SPEAKERS[Role.ROOT]}\n\n{node.text.strip()}")
            continue
        heading = f"## {SPEAKERS[node.role]}"
        if node.role == Role.TOOL:
            heading += f" ({_one_line(tool_use.answered_call(node.tool_use)[1])})"
        model = (node.generation or {}).get("model")
        if node.role == Role.ASSISTANT and isinstance(model, str) and model:
            heading += f" ({_one_line(model)})"
        body = [heading]
        if node.thinking.strip():
            body.append(
                "<details>\n<summary>Thinking</summary>\n\n"
                f"{node.thinking.strip()}\n\n</details>"
            )
        if node.text.strip():
            body.append(node.text.strip())
        for call in tool_use.calls_of(node.tool_use):
            body.append(f"Calls `{call['name']}` with `{call['arguments']}`")
        parts.append("\n\n".join(body))
    return "\n\n".join(parts) + "\n"


def write_text_file(path: Path, text: str) -> None:
    """Write an export as UTF-8, replacing ``path`` only once it is complete.

    The text goes to a temporary file beside it first, so a full disk or a
    crash never leaves half an export under the chosen name. A file system
    refusal (no permission, disk full) is an ``ExchangeError`` naming it.
    """
    temporary = path.with_name(f".{path.name}.arbor-tmp")
    try:
        temporary.write_bytes(text.encode("utf-8"))
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise ExchangeError(f"Could not write {path}: {_reason(exc)}.") from exc
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _reason(exc: OSError) -> str:
    """The operating system's words for a failed file operation."""
    return exc.strerror or type(exc).__name__


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _iso(moment: datetime) -> str:
    # SQLite gives back naive datetimes; Arbor writes them in UTC.
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


# --- import -------------------------------------------------------------------------


def read_json_file(path: Path) -> Any:
    """The exported conversation in ``path``, its envelope checked (``check_envelope``).

    ``ExchangeError`` names the file and says what is wrong and what to do:
    it is empty, binary, not JSON, not ours, damaged, or from a newer Arbor.
    Files over ``MAX_IMPORT_BYTES`` are refused before they are read; a
    missing or unreadable file is refused with the system's reason. The
    nodes are checked when imported (``import_json``).
    """
    try:
        size = path.stat().st_size
        if size > MAX_IMPORT_BYTES:
            raise ExchangeError(
                f"{path.name} is {size / 2**20:.0f} MB; Arbor imports conversation "
                f"files of at most {MAX_IMPORT_BYTES // 2**20} MB."
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ExchangeError(f"Could not read {path}: {_reason(exc)}.") from exc
    value = loads_json(data, path.name)
    check_envelope(value, path.name)
    return value


def loads_json(data: bytes, name: str = "The file") -> Any:
    """Parse exported JSON bytes; ``ExchangeError`` says, in words, why not.

    Never Python's own message ("Expecting value: line 1 column 1 (char
    0)"): that describes the parser, and the reader wants to know about the
    file.
    """
    if not data.strip():
        raise ExchangeError(_not_ours(name, "it is empty"))
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        # Windows editors call this "Unicode"; an export saved again in one.
        raise ExchangeError(_not_ours(name, "it is UTF-16 text, not UTF-8"))
    if b"\0" in data:
        # No text file holds NUL bytes, and UTF-8 JSON never does: a picture,
        # a model, an archive.
        raise ExchangeError(_not_ours(name, "it is not a text file"))
    try:
        text = data.decode("utf-8-sig")  # a BOM from a Windows editor is fine
    except UnicodeDecodeError:
        raise ExchangeError(_not_ours(name, "it is not UTF-8 text")) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if f'"{FORMAT}"' not in text[:_SNIFF_CHARS]:
            raise ExchangeError(_not_ours(name, "it is not JSON")) from None
        if exc.pos >= len(text.rstrip()):
            what = "it ends too early, as if it was cut short"
        else:
            what = f"its JSON is broken at line {exc.lineno}, column {exc.colno}"
        raise ExchangeError(_damaged(name, what)) from None
    except RecursionError:
        raise ExchangeError(_not_ours(name, "it is nested too deeply")) from None


def check_envelope(data: Any, name: str = "The file") -> None:
    """Refuse ``data`` unless it is our format, a version this Arbor reads,
    with a list of nodes; ``ExchangeError`` names ``name`` and what to do.

    Cheap (the nodes are not looked at), so the window checks a file as it
    reads it, before handing it to the engine worker.
    """
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ExchangeError(_not_ours(name, "it is JSON, but not in Arbor's format"))
    version = data.get("version")
    # bool is an int to Python, but true is no version.
    number = (
        version if isinstance(version, int) and not isinstance(version, bool) else None
    )
    if number is not None and number > VERSION:
        raise ExchangeError(
            f"{name} was exported by a newer Arbor (conversation format version "
            f"{number}; this Arbor reads version {VERSION}). Update Arbor to "
            "import it."
        )
    if number != VERSION:
        raise ExchangeError(_not_ours(name, f"its format version is {_shown(version)}"))
    nodes = data.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ExchangeError(_damaged(name, 'it has no messages (no "nodes" list)'))


def _not_ours(name: str, why: str) -> str:
    return f"{name} is not a conversation exported by Arbor ({why}). {_IMPORT_HINT}"


def _damaged(name: str, what: str) -> str:
    return (
        f"{name} is an Arbor conversation, but damaged: {what}. Export the "
        "conversation again, or import another copy."
    )


def import_json(db: Database, data: Any) -> ImportResult:
    """Create a new conversation from exported JSON; return it.

    Everything is checked first, then written in one transaction: on
    ``ExchangeError`` (or a storage failure) nothing was written.
    """
    header, nodes, active = _checked(data)
    conversation, ids = conversation_rows.insert_conversation(
        db, **header, nodes=nodes, active_key=active
    )
    return ImportResult(
        conversation.id, len(ids), conversation.active_node_id, conversation.title
    )


def _checked(data: Any) -> tuple[dict[str, Any], list[NewNode], Hashable | None]:
    """The conversation fields, its nodes parents first, and the active key."""
    check_envelope(data)
    nodes = [_node(raw, i) for i, raw in enumerate(data["nodes"])]
    ordered = _parents_first(nodes)
    # The newest start's prompt, as the conversation it came from has it.
    system_prompt = [n for n in ordered if n.parent_key is None][-1].text or None
    title = _optional_text(data, "title", "the conversation")
    reasoning = _optional_text(data, "reasoning", "the conversation")
    if reasoning is not None and len(reasoning) > _MAX_REASONING:
        raise ExchangeError(f'The "reasoning" choice {reasoning[:20]!r}… is too long.')
    active = data.get("active")
    known = {node.key for node in nodes}
    if not _is_key(active) or active not in known:
        active = None  # a missing or stale place: reopen at the start
    header = {
        "title": _imported_title(title),
        # The root's text is the system prompt; the copy in the header is for
        # readers of the file and is not trusted over it.
        "system_prompt": system_prompt,
        "reasoning": reasoning,
        "created_at": _moment(data.get("created_at"), "the conversation"),
        "origin": _origin(data.get("origin")),
        "client": _client(data),
        "context_size": _context_size(data.get("context_size")),
    }
    return header, ordered, active


def _client(data: dict[str, Any]) -> str | None:
    """The program that made the exported conversation (absent in older files)."""
    client = _optional_text(data, "client", "the conversation")
    if client is not None and len(client) > _MAX_CLIENT:
        raise ExchangeError(f'The "client" {client[:20]!r}… is too long.')
    return client


def _context_size(value: Any) -> int | None:
    """A context size raised for the conversation (absent in older files)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ExchangeError('The "context_size" must be a whole number of tokens.')
    if not 0 < value <= _MAX_CONTEXT_SIZE:
        raise ExchangeError(f'The "context_size" {value:,} is not a context size.')
    return value


def _origin(value: Any) -> Origin | None:
    """Where the exported conversation was made (absent in older files)."""
    if value is None:
        return None
    if value not in tuple(Origin):
        raise ExchangeError(
            f"The origin of the conversation is {_shown(value)}; it must be one "
            "of " + ", ".join(Origin) + ", or null."
        )
    return Origin(value)


def _imported_title(title: str | None) -> str:
    """``title`` marked as an imported copy's, once, within the longest title."""
    # A copy of a copy needs one mark, not "(imported) (imported)": a round
    # trip through export and import keeps the title it had.
    base = (title or "").strip().removesuffix(IMPORTED_MARK).rstrip()
    base = base or DEFAULT_TITLE
    return base[: _MAX_TITLE - len(IMPORTED_MARK)].rstrip() + IMPORTED_MARK


def _node(raw: Any, index: int) -> NewNode:
    where = f"node #{index + 1}"
    if not isinstance(raw, dict):
        raise ExchangeError(f"The {where} of the file is not a JSON object.")
    key = raw.get("id")
    if not _is_key(key):
        raise ExchangeError(f'The {where} has no "id" (a number or a string).')
    where = f"node {key!r}"
    parent = raw.get("parent")
    if parent is not None and not _is_key(parent):
        raise ExchangeError(f'The "parent" of {where} is not a node id.')
    role = raw.get("role")
    if role not in ROLES:
        raise ExchangeError(
            f"The role of {where} is {_shown(role)}; it must be one of "
            + ", ".join(ROLES)
            + "."
        )
    status = raw.get("status", Status.COMPLETE)
    if not isinstance(status, str) or status not in _IMPORTED_STATUS:
        raise ExchangeError(f"The status of {where} is {_shown(status)}, unknown.")
    generation = raw.get("generation")
    if generation is not None and not isinstance(generation, dict):
        raise ExchangeError(f'The "generation" of {where} is not a JSON object.')
    if generation is not None:
        _check_utf8(
            json.dumps(generation, ensure_ascii=False), f'the "generation" of {where}'
        )
    use = raw.get("tool_use")
    if use is not None and not isinstance(use, dict):
        raise ExchangeError(f'The "tool_use" of {where} is not a JSON object.')
    if use is not None:
        _check_utf8(json.dumps(use, ensure_ascii=False), f'the "tool_use" of {where}')
    return NewNode(
        key=key,
        parent_key=parent,
        role=Role(role),
        text=_required_text(raw, "text", where),
        thinking=_optional_text(raw, "thinking", where) or "",
        status=_IMPORTED_STATUS[status],
        generation=generation,
        created_at=_moment(raw.get("created_at"), where),
        tool_use=use,
    )


def _parents_first(nodes: list[NewNode]) -> list[NewNode]:
    """The nodes from the root down, each after its parent; checks the tree.

    At least one root (one per system prompt the conversation was given),
    no duplicate ids, every parent present, roles that alternate as Arbor
    makes them, and no cycles: a node that cannot be reached from a root is
    part of one (every node has one parent).
    """
    by_key: dict[Hashable, NewNode] = {}
    for node in nodes:
        if node.key in by_key:
            raise ExchangeError(f"Two nodes have the id {node.key!r}.")
        by_key[node.key] = node
    roots = [node for node in nodes if node.parent_key is None]
    if not roots:
        raise ExchangeError(
            "A conversation starts with a node without a parent; this file has none."
        )
    for node in nodes:
        if node.parent_key is None:
            if node.role != Role.ROOT:
                raise ExchangeError(
                    f"The node without a parent ({node.key!r}) must have the role "
                    f'"root", not {_shown(node.role)}.'
                )
            continue
        parent = by_key.get(node.parent_key)
        if parent is None:
            raise ExchangeError(
                f"The parent {node.parent_key!r} of node {node.key!r} is not in "
                "the file."
            )
        if parent.role not in _PARENT_ROLES.get(node.role, ()):
            raise ExchangeError(
                f"Node {node.key!r} ({node.role}) cannot follow node "
                f"{parent.key!r} ({parent.role}): messages alternate between "
                "you and the assistant."
            )
    # Each node after its parent, otherwise in the file's order (an export
    # already lists parents first, so its order is kept and ids ascend as
    # they did). A walk up that meets itself is a cycle.
    ordered: list[NewNode] = []
    placed: set[Hashable] = set()
    for node in nodes:
        chain: list[NewNode] = []
        seen: set[Hashable] = set()
        current: NewNode | None = node
        while current is not None and current.key not in placed:
            if current.key in seen:
                raise ExchangeError(
                    f"Node {current.key!r} is not below the root: the parents "
                    "form a cycle."
                )
            seen.add(current.key)
            chain.append(current)
            parent_key = current.parent_key
            current = None if parent_key is None else by_key[parent_key]
        for above in reversed(chain):
            ordered.append(above)
            placed.add(above.key)
    return ordered


def _is_key(value: Any) -> bool:
    # bool is an int to Python but never an id.
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and bool(value)
    )


def _required_text(raw: dict[str, Any], name: str, where: str) -> str:
    value = raw.get(name)
    if not isinstance(value, str):
        raise ExchangeError(f'The "{name}" of {where} is not text.')
    _check_utf8(value, f'the "{name}" of {where}')
    return value


def _optional_text(raw: dict[str, Any], name: str, where: str) -> str | None:
    if raw.get(name) is None:
        return None
    return _required_text(raw, name, where)


def _check_utf8(value: str, where: str) -> None:
    # JSON escapes can spell lone surrogates ("\ud800"), which have no UTF-8
    # form: SQLite and the tokenizer would fail on them later.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ExchangeError(
            f"{where[0].upper()}{where[1:]} is not valid text (it holds a lone "
            "surrogate escape)."
        ) from None


def _moment(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ExchangeError(f'The "created_at" of {where} is not a date.')
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ExchangeError(
            f'The "created_at" of {where} ({value[:40]!r}) is not an ISO 8601 date.'
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def _shown(value: Any) -> str:
    """A value from the file, short enough for a one-line message."""
    # ASCII escapes: the value may hold characters no terminal can print.
    text = json.dumps(value) if value is not None else "missing"
    return text if len(text) <= 40 else text[:39] + "…"
