"""Nodes: added, updated (one or many), read alone, as a path or as children,
and deleted with their subtree at any depth."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    Integer,
    bindparam,
    case,
    delete,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from storage import conversation_listing
from storage.db import Database
from storage.errors import NotFound, StorageUnavailable
from storage.lookup import (
    IDS_PER_QUERY,
    get_row,
    id_batches,
    not_found_message,
    require_valid_id,
    valid_id,
    valid_ids,
)
from storage.records import (
    NODE_COLUMNS,
    DeletedBranch,
    NodeRecord,
    node_from_stored,
    node_record,
    pack_tokens,
)
from storage.space import release_space, releases_space
from storage.tables import (
    DEFAULT_TITLE,
    Checkpoint,
    CheckpointBlob,
    Conversation,
    Node,
    utcnow,
)
from storage.values import Role, Status

log = logging.getLogger(__name__)


class StoredText(NamedTuple):
    """A node as matching a message list reads it: its message, no span."""

    id: int
    role: Role
    text: str
    tool_use: dict[str, Any] | None


def add_node(
    db: Database,
    parent_id: int,
    role: Role,
    text: str,
    *,
    tokens: list[int] | tuple[int, ...] = (),
    start_pos: int = 0,
    chunks: list[int] | tuple[int, ...] = (),
    vocab_id: str | None = None,
    status: Status = Status.COMPLETE,
    generation: dict[str, Any] | None = None,
    span_text: str | None = None,
    thinking: str = "",
    tool_use: dict[str, Any] | None = None,
    title_if_unnamed: str | None = None,
) -> NodeRecord:
    """Add a child of ``parent_id`` and make it its conversation's active node
    (and give the conversation ``title_if_unnamed`` while it has the default
    title).

    In statements built once rather than through the ORM: a new message and
    its reply are added before the reply's first token, where the ORM's unit
    of work cost about 1.4 ms each and these 0.6 (``tools/serve_bench.py``).
    """
    require_valid_id(Node, parent_id)
    with db.write() as s:
        connection = s.connection()
        conversation_id = connection.execute(
            _CONVERSATION_OF, {"parent": parent_id}
        ).scalar()
        if conversation_id is None:
            raise NotFound(not_found_message(Node, parent_id))
        node = insert_node(
            connection,
            conversation_id,
            parent_id,
            role,
            text,
            tokens=tokens,
            start_pos=start_pos,
            chunks=chunks,
            vocab_id=vocab_id,
            status=status,
            generation=generation,
            span_text=span_text,
            thinking=thinking,
            tool_use=tool_use,
        )
        activate = {
            "conversation": conversation_id,
            "node": node.id,
            "now": node.created_at,
        }
        if title_if_unnamed is None:
            connection.execute(_ACTIVATE, activate)
        else:
            connection.execute(
                _ACTIVATE_TITLED, {**activate, "title": title_if_unnamed}
            )
        return node


def insert_node(
    connection: Connection,
    conversation_id: int,
    parent_id: int | None,
    role: Role,
    text: str,
    *,
    tokens: Sequence[int] = (),
    start_pos: int = 0,
    chunks: Sequence[int] = (),
    vocab_id: str | None = None,
    status: Status = Status.COMPLETE,
    generation: dict[str, Any] | None = None,
    span_text: str | None = None,
    thinking: str = "",
    tool_use: dict[str, Any] | None = None,
) -> NodeRecord:
    """Insert a node row in the transaction of ``connection`` (one statement,
    built once) and return its record; its conversation is the caller's to
    update."""
    values = {
        "conversation_id": conversation_id,
        "parent_id": parent_id,
        "role": Role(role),
        "text": text,
        "tokens": pack_tokens(tokens),
        "start_pos": start_pos,
        "chunks": list(chunks),
        "vocab_id": vocab_id,
        "status": Status(status),
        "generation": generation,
        "created_at": utcnow(),
        "thinking": thinking,
        "span_text": span_text,
        "tool_use": tool_use,
    }
    node_id = connection.execute(
        _INSERT_NODE, {**values, "n_tokens": len(tokens)}
    ).scalar_one()
    return node_from_stored(
        [node_id if name == "id" else values[name] for name in NODE_COLUMNS]
    )


_CONVERSATION_OF = select(Node.conversation_id).where(Node.id == bindparam("parent"))
_INSERT_NODE = insert(Node).returning(Node.id)
_ACTIVATE = (
    update(Conversation)
    .where(Conversation.id == bindparam("conversation"))
    .values(active_node_id=bindparam("node"), updated_at=bindparam("now"))
)
_ACTIVATE_TITLED = _ACTIVATE.values(
    title=case(
        (Conversation.title == DEFAULT_TITLE, bindparam("title")),
        else_=Conversation.title,
    )
)


# "Leave as it is" for update_node: None is a value some fields take.
_KEEP: Any = object()


def update_node(
    db: Database,
    node_id: int,
    *,
    text: str = _KEEP,
    thinking: str = _KEEP,
    tokens: Sequence[int] = _KEEP,
    chunks: Sequence[int] = _KEEP,
    start_pos: int = _KEEP,
    span_text: str | None = _KEEP,
    status: Status = _KEEP,
    vocab_id: str | None = _KEEP,
    generation: dict[str, Any] | None = _KEEP,
    tool_use: dict[str, Any] | None = _KEEP,
) -> NodeRecord:
    """Change the given fields of a node (the others stay); return the node."""
    with db.write() as s:
        node = get_row(s, Node, node_id)
        if tokens is not _KEEP:
            node.tokens = pack_tokens(tokens)
            node.n_tokens = len(tokens)
        if chunks is not _KEEP:
            node.chunks = list(chunks)
        if text is not _KEEP:
            node.text = text
        if thinking is not _KEEP:
            node.thinking = thinking
        if start_pos is not _KEEP:
            node.start_pos = start_pos
        if span_text is not _KEEP:
            node.span_text = span_text
        if status is not _KEEP:
            node.status = status
        if vocab_id is not _KEEP:
            node.vocab_id = vocab_id
        if generation is not _KEEP:
            node.generation = generation
        if tool_use is not _KEEP:
            node.tool_use = tool_use
        return node_record(node)


# The fields ``update_nodes`` may change (those of ``update_node``).
_NODE_FIELDS = frozenset(
    {
        "text",
        "thinking",
        "tokens",
        "chunks",
        "start_pos",
        "span_text",
        "status",
        "vocab_id",
        "generation",
    }
)


def update_nodes(
    db: Database,
    changes: Mapping[int, Mapping[str, Any]],
    drop_checkpoints: Sequence[int] = (),
) -> dict[int, NodeRecord]:
    """Change fields of many nodes, and drop some nodes' checkpoints, at once.

    ``changes`` maps a node id to the fields to set, named as
    ``update_node``'s keywords. One transaction for all of them: the first
    visit of an imported path renders every span, and a transaction per
    node (with the WAL's commit each time) was most of its storage time.
    Returns the changed nodes by id. Raises ``NotFound`` if any node is
    gone (then nothing is changed) and ``ValueError`` for a field that is
    not one of a node's. The space freed by the checkpoints is given back
    afterwards, as ``delete_checkpoints`` does.
    """
    unknown = {name for fields in changes.values() for name in fields} - _NODE_FIELDS
    if unknown:
        raise ValueError(f"not fields of a node: {sorted(unknown)}")
    ids = list(changes)
    for ident in ids:
        require_valid_id(Node, ident)
    freed = 0
    with db.write() as s:
        nodes: dict[int, Node] = {}
        for part in id_batches(ids):
            rows = s.execute(select(Node).where(Node.id.in_(part))).scalars()
            nodes.update((node.id, node) for node in rows)
        missing = [ident for ident in ids if ident not in nodes]
        if missing:
            raise NotFound(not_found_message(Node, missing[0]))
        for ident, fields in changes.items():
            node = nodes[ident]
            for name, value in fields.items():
                if name == "tokens":
                    node.tokens = pack_tokens(value)
                    node.n_tokens = len(value)
                elif name == "chunks":
                    node.chunks = list(value)
                else:
                    setattr(node, name, value)
        for part in id_batches(valid_ids(list(drop_checkpoints))):
            found = s.execute(
                select(Checkpoint.id, Checkpoint.byte_size).where(
                    Checkpoint.node_id.in_(part)
                )
            ).all()
            if found:
                s.execute(
                    delete(Checkpoint).where(Checkpoint.id.in_([r.id for r in found]))
                )
                freed += sum(r.byte_size for r in found)
        s.flush()
        result = {ident: node_record(nodes[ident]) for ident in ids}
    if freed:
        try:
            release_space(db)
        except StorageUnavailable as exc:
            # As after delete_checkpoints: the change is committed.
            log.warning("Could not shrink the database: %s", exc)
    return result


def get_node(db: Database, node_id: int) -> NodeRecord:
    """Return one node; raises ``NotFound``."""
    with db.read() as s:
        return node_record(get_row(s, Node, node_id))


def get_path(db: Database, node_id: int) -> list[NodeRecord]:
    """Return the nodes from the root down to ``node_id``; raises ``NotFound``."""
    require_valid_id(Node, node_id)
    with db.read() as s:
        ancestors = (
            select(Node.id, Node.parent_id, literal(0, Integer).label("depth"))
            .where(Node.id == node_id)
            .cte("ancestors", recursive=True)
        )
        ancestors = ancestors.union_all(
            select(Node.id, Node.parent_id, (ancestors.c.depth + 1)).join(
                ancestors, Node.id == ancestors.c.parent_id
            )
        )
        rows = s.execute(
            select(Node)
            .join(ancestors, Node.id == ancestors.c.id)
            .order_by(ancestors.c.depth.desc())
        ).scalars()
        path = [node_record(n) for n in rows]
        if not path:
            raise NotFound(f"No node with id {node_id}.")
        return path


def get_children(db: Database, node_id: int) -> list[NodeRecord]:
    """Children of a node, oldest first (none for an unknown id)."""
    if not valid_id(node_id):
        return []
    with db.read() as s:
        rows = s.execute(
            select(Node).where(Node.parent_id == node_id).order_by(Node.id)
        ).scalars()
        return [node_record(n) for n in rows]


def child_texts(db: Database, node_id: int) -> list[StoredText]:
    """Each child of a node, oldest first: what matching a message list
    against the tree reads (no tokens, no blobs)."""
    if not valid_id(node_id):
        return []
    with db.read() as s:
        rows = s.execute(
            select(Node.id, Node.role, Node.text, Node.tool_use)
            .where(Node.parent_id == node_id)
            .order_by(Node.id)
        )
        return [StoredText(row[0], Role(row[1]), row[2], row[3]) for row in rows]


def root_texts(db: Database, conversation_id: int) -> list[StoredText]:
    """Each start of a conversation (its text is the system prompt), oldest
    first."""
    if not valid_id(conversation_id):
        return []
    with db.read() as s:
        rows = s.execute(
            select(Node.id, Node.text, Node.tool_use)
            .where(Node.conversation_id == conversation_id, Node.parent_id.is_(None))
            .order_by(Node.id)
        )
        return [StoredText(row[0], Role.ROOT, row[1], row[2]) for row in rows]


@releases_space
def delete_subtree(db: Database, node_id: int) -> DeletedBranch:
    """Delete a node, its descendants and their checkpoints; say where that
    left the conversation.

    A root (a system prompt's start) can be deleted only where the
    conversation has another: its first other root is then the parent
    reported. The only root cannot (delete the conversation instead). If the
    active node was inside the subtree, the parent becomes active.
    """
    with db.write(frees_space=True) as s:
        node = get_row(s, Node, node_id)
        parent_id: int | None = node.parent_id
        a_start = parent_id is None
        if parent_id is None:
            parent_id = s.scalar(
                select(Node.id)
                .where(
                    Node.conversation_id == node.conversation_id,
                    Node.parent_id.is_(None),
                    Node.id != node.id,
                )
                .order_by(Node.id)
                .limit(1)
            )
            if parent_id is None:
                raise ValueError("The only start of a conversation cannot be deleted.")
        conv = get_row(s, Conversation, node.conversation_id)
        deleted = _subtree_ids(s, node.id)
        delete_nodes(
            s,
            [
                Node.id.in_(deleted[at : at + IDS_PER_QUERY])
                for at in range(0, len(deleted), IDS_PER_QUERY)
            ],
        )
        active = conv.active_node_id
        # The session still holds ``node`` as it was read: ask the ids first.
        if active is not None and (active in deleted or s.get(Node, active) is None):
            conv.active_node_id = parent_id
        if a_start:  # the conversation's prompt: its newest start's
            newest = s.scalar(
                select(Node.text)
                .where(Node.conversation_id == conv.id, Node.parent_id.is_(None))
                .order_by(Node.id.desc())
                .limit(1)
            )
            conv.system_prompt = newest or None
        conv.updated_at = utcnow()
        return DeletedBranch(conv.id, parent_id, conv.active_node_id)


def _subtree_ids(session: Session, node_id: int) -> list[int]:
    """The ids of ``node_id`` and of all its descendants."""
    below = select(Node.id).where(Node.id == node_id).cte("below", recursive=True)
    # UNION, not UNION ALL: a node seen twice is not followed again, so
    # parents that make a cycle (damage done by hand) cannot loop forever.
    below = below.union(select(Node.id).join(below, Node.parent_id == below.c.id))
    return list(session.execute(select(below.c.id)).scalars())


def delete_nodes(session: Session, parts: list[ColumnElement[bool]]) -> None:
    """Delete the nodes each of ``parts`` selects, with their checkpoints.

    Each part is one statement's choice of nodes (a conversation, or ids
    few enough to bind).

    Together the parts must select every descendant of each node they
    select (a whole subtree or conversation), or a cascade would delete the
    rest one level at a time.
    """
    connection = session.connection()
    for chosen in parts:
        nodes = select(Node.id).where(chosen)
        checkpoints = select(Checkpoint.id).where(Checkpoint.node_id.in_(nodes))
        connection.execute(
            delete(CheckpointBlob).where(CheckpointBlob.checkpoint_id.in_(checkpoints))
        )
        connection.execute(delete(Checkpoint).where(Checkpoint.node_id.in_(nodes)))
        connection.execute(update(Node).where(chosen).values(parent_id=None))
    # Only once every part is unlinked: a node deleted earlier would
    # cascade to its children in a later part.
    for chosen in parts:
        connection.execute(delete(Node).where(chosen))


def mark_interrupted_generations(db: Database) -> int:
    """Mark replies left 'generating' by a killed process as 'interrupted'.

    Returns how many; does nothing on a read-only database or while disk space
    is low (they are shown as they were left).
    """
    if db.read_only or db.space_low:
        return 0
    # Looked for first: after a clean exit there is none, and a write
    # transaction at every start would wait for another writer's lock (up to
    # the busy timeout) and tell every cache the data changed.
    with db.read_raw() as raw:
        if not conversation_listing.has_unfinished_replies(raw):
            return 0
    with db.write() as s:
        result = s.execute(
            update(Node)
            .where(Node.status == Status.GENERATING)
            .values(status=Status.INTERRUPTED)
        )
        assert isinstance(result, CursorResult)  # an UPDATE's result counts rows
        return result.rowcount or 0
