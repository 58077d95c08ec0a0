"""Conversations: made, listed, renamed, deleted, their settings and active
node; and a whole conversation read or inserted at once (export, import)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    bindparam,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from storage import conversation_listing
from storage.conversation_listing import (
    CONVERSATION_COLUMNS,
    ConversationRecord,
    conversation_from_stored,
)
from storage.db import Database
from storage.lookup import get_row
from storage.node_rows import delete_nodes, insert_node
from storage.records import (
    NodeRecord,
    StartSpan,
    conversation_record,
    node_record,
    recounted,
)
from storage.space import releases_space
from storage.tables import (
    DEFAULT_TITLE,
    Conversation,
    Node,
    utcnow,
)
from storage.values import Origin, Role, Status

log = logging.getLogger(__name__)


def create_conversation(
    db: Database,
    title: str | None,
    system_prompt: str | None,
    sampling: dict[str, Any] | None = None,
    origin: Origin | None = None,
    span: StartSpan | None = None,
    client: str | None = None,
    tool_use: dict[str, Any] | None = None,
) -> tuple[ConversationRecord, NodeRecord]:
    """Create a conversation and its root node.

    ``sampling``: what its replies use, None for the Settings' own.
    ``origin``: where it is made, None for the window and the CLI; ``client``
    the program that made it, where known. ``span``: the root's span,
    rendered for the loaded model (None: it is rendered later, once a model
    is loaded). ``tool_use``: the root's (the tools offered), if any.
    """
    with db.write() as s:
        # Statements built once rather than the ORM's unit of work: a client
        # of the local server starts a conversation before its first reply.
        connection = s.connection()
        conversation_id = connection.execute(
            _INSERT_CONVERSATION,
            {
                "title": title or DEFAULT_TITLE,
                "system_prompt": system_prompt,
                "sampling": sampling,
                "origin": origin,
                "client": client,
            },
        ).scalar_one()
        root = _insert_root(
            connection, conversation_id, system_prompt or "", span, tool_use
        )
        connection.execute(
            _SET_ACTIVE, {"conversation": conversation_id, "node": root.id}
        )
        # Read back: the counts are the triggers'.
        row = connection.execute(
            _CONVERSATION_ROW, {"conversation": conversation_id}
        ).one()
        return conversation_from_stored(row), root


def _insert_root(
    connection: Connection,
    conversation_id: int,
    text: str,
    span: StartSpan | None,
    tool_use: dict[str, Any] | None = None,
) -> NodeRecord:
    """A conversation's new start, with its span where it is rendered."""
    return insert_node(
        connection,
        conversation_id,
        None,
        Role.ROOT,
        text,
        tokens=span.tokens if span else (),
        vocab_id=span.vocab_id if span else None,
        span_text=span.text if span else None,
        tool_use=tool_use,
    )


_INSERT_CONVERSATION = insert(Conversation).returning(Conversation.id)
_SET_ACTIVE = (
    update(Conversation)
    .where(Conversation.id == bindparam("conversation"))
    .values(active_node_id=bindparam("node"))
)
_CONVERSATION_ROW = select(
    *(getattr(Conversation, name) for name in CONVERSATION_COLUMNS)
).where(Conversation.id == bindparam("conversation"))


def add_root(
    db: Database,
    conversation_id: int,
    system_prompt: str,
    span: StartSpan | None = None,
    tool_use: dict[str, Any] | None = None,
) -> NodeRecord:
    """Start a new branch of a conversation from a new root holding
    ``system_prompt`` (and ``span`` and ``tool_use``, as for
    ``create_conversation``): the earlier roots and everything below them
    stay.

    The new root becomes the active node and its prompt the conversation's
    (what a new branch, an export's header and the list show).
    """
    with db.write() as s:
        conv = get_row(s, Conversation, conversation_id)
        root = _insert_root(s.connection(), conv.id, system_prompt, span, tool_use)
        conv.system_prompt = system_prompt or None
        conv.active_node_id = root.id
        conv.updated_at = utcnow()
        return root


def set_conversation_sampling(
    db: Database, conversation_id: int, sampling: dict[str, Any] | None
) -> None:
    """Store the sampling a conversation's replies use (None: the Settings')."""
    with db.write() as s:
        get_row(s, Conversation, conversation_id).sampling = sampling


def list_conversations(
    db: Database, text_filter: str | None = None
) -> list[ConversationRecord]:
    """Conversations, most recently updated first, optionally filtered by text.

    The filter matches the title or any message text, case-insensitively.
    The query is ``storage.conversation_listing``'s, which start-up also runs without
    SQLAlchemy; here it runs in a read transaction of this database.
    """
    with db.read() as s:
        connection = s.connection().connection.driver_connection
        assert isinstance(connection, sqlite3.Connection)
        return conversation_listing.list_conversations(connection, text_filter)


def get_conversation(db: Database, conversation_id: int) -> ConversationRecord:
    """Return one conversation; raises ``NotFound``."""
    with db.read() as s:
        return conversation_record(get_row(s, Conversation, conversation_id))


def rename_conversation(db: Database, conversation_id: int, title: str) -> None:
    """Change a conversation's title."""
    with db.write() as s:
        get_row(s, Conversation, conversation_id).title = title


@releases_space
def delete_conversation(db: Database, conversation_id: int) -> None:
    """Delete a conversation with all its nodes and checkpoints.

    Any depth, at a cost that follows the conversation's size, not the
    file's (see the note above ``_subtree_ids``).
    """
    with db.write(frees_space=True) as s:
        conv = get_row(s, Conversation, conversation_id)
        delete_nodes(s, [Node.conversation_id == conv.id])
        s.delete(conv)


def set_reasoning(db: Database, conversation_id: int, choice: str | None) -> None:
    """Store a conversation's reasoning choice (None: the template's default)."""
    with db.write() as s:
        get_row(s, Conversation, conversation_id).reasoning = choice


def set_context_size(db: Database, conversation_id: int, size: int | None) -> None:
    """Store the context size a conversation's model loads with (None: the
    Settings' own)."""
    with db.write() as s:
        get_row(s, Conversation, conversation_id).context_size = size


def set_conversation_model(
    db: Database, conversation_id: int, path: str, identity: str
) -> None:
    """Record the model a conversation is being continued with."""
    with db.write() as s:
        conv = get_row(s, Conversation, conversation_id)
        conv.model_path = path
        conv.model_identity = identity


def set_active_node(db: Database, node_id: int) -> int:
    """Remember ``node_id`` as where its conversation continues; return the
    conversation's id."""
    with db.write() as s:
        node = get_row(s, Node, node_id)
        conv = get_row(s, Conversation, node.conversation_id)
        conv.active_node_id = node.id
        conv.updated_at = utcnow()
        conversation_id: int = conv.id
        return conversation_id


def defer_active_node(db: Database, conversation_id: int, node_id: int) -> None:
    """Record, without writing now, ``node_id`` as where its conversation continues.

    ``set_active_node`` later: the write runs with the next write
    transaction or at the next idle moment (``Database.defer``), so that a
    restore does not wait for it. A node deleted meanwhile is skipped.
    """
    when = utcnow()
    db.defer(("active node", conversation_id), lambda _old: _ActiveNode(node_id, when))


@dataclass(frozen=True)
class _ActiveNode:
    """A deferred ``set_active_node``, run by ``Database.defer``'s machinery."""

    node_id: int
    when: datetime

    def __call__(self, session: Session) -> None:
        conversation_id = session.execute(
            select(Node.conversation_id).where(Node.id == self.node_id)
        ).scalar_one_or_none()
        if conversation_id is not None:
            session.execute(
                update(Conversation)
                .where(Conversation.id == conversation_id)
                .values(active_node_id=self.node_id, updated_at=self.when)
            )


@dataclass(frozen=True)
class NewNode:
    """A node to insert with ``insert_conversation``, named by the caller's key.

    Imported nodes have no span yet: it is rendered, and the node
    checkpointed, the first time a model visits it.
    """

    key: Hashable
    parent_key: Hashable | None
    role: Role
    text: str
    thinking: str = ""
    status: Status = Status.COMPLETE
    generation: dict[str, Any] | None = None
    created_at: datetime | None = None
    tool_use: dict[str, Any] | None = None


def read_conversation(
    db: Database, conversation_id: int
) -> tuple[ConversationRecord, list[NodeRecord]]:
    """A conversation and all its nodes, parents first, from one snapshot."""
    with db.read() as s:
        conv = get_row(s, Conversation, conversation_id)
        nodes = s.execute(
            select(Node)
            .where(Node.conversation_id == conversation_id)
            .order_by(Node.id)
        ).scalars()
        return conversation_record(conv), [node_record(n) for n in nodes]


def insert_conversation(
    db: Database,
    *,
    title: str | None,
    system_prompt: str | None,
    reasoning: str | None,
    created_at: datetime | None,
    nodes: Sequence[NewNode],
    active_key: Hashable | None = None,
    origin: Origin | None = None,
    client: str | None = None,
    context_size: int | None = None,
) -> tuple[ConversationRecord, dict[Hashable, int]]:
    """Insert a whole conversation in one transaction: all of it or nothing.

    ``nodes`` come parents first, the root (no ``parent_key``) first of all;
    the caller has checked the shape (``ValueError`` here is a bug). Returns
    the new conversation and the new id of every key. ``active_key`` names
    where it reopens (the root when None); ``origin`` where it was first made
    (None: the window or the CLI); ``context_size`` the context raised for it.
    """
    if not nodes:
        raise ValueError("A conversation needs its root.")
    with db.write() as s:
        conv = Conversation(
            title=title or DEFAULT_TITLE,
            system_prompt=system_prompt,
            reasoning=reasoning,
            created_at=created_at or utcnow(),
            updated_at=utcnow(),
            origin=origin,
            client=client,
            context_size=context_size,
        )
        s.add(conv)
        s.flush()
        ids: dict[Hashable, int] = {}
        for new in nodes:
            if new.key in ids:
                raise ValueError(f"Node key {new.key!r} appears twice.")
            if not ids and new.parent_key is not None:
                raise ValueError("The first node must be a root.")
            parent_id = None if new.parent_key is None else ids[new.parent_key]
            node = Node(
                conversation_id=conv.id,
                parent_id=parent_id,
                role=new.role,
                text=new.text,
                thinking=new.thinking,
                tokens=b"",
                n_tokens=0,
                start_pos=0,
                chunks=[],
                status=new.status,
                generation=new.generation,
                created_at=new.created_at or utcnow(),
                tool_use=new.tool_use,
            )
            s.add(node)
            s.flush()
            ids[new.key] = node.id
        conv.active_node_id = ids.get(active_key, ids[nodes[0].key])
        return recounted(s, conv), ids
