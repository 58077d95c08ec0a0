"""What the storage functions return: plain frozen records of nodes, tree
rows and checkpoints, never live ORM objects (so callers on any thread can
hold them), and the mapping of ORM rows to them."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from storage.conversation_listing import (
    CONVERSATION_COLUMNS,
    ConversationRecord,
    conversation_from_stored,
    stored_json,
    timestamp,
)
from storage.tables import (
    Conversation,
    Node,
    checkpoint_checksum,
)
from storage.values import Role, Status


@dataclass(frozen=True)
class NodeRecord:
    """A node with its token span."""

    id: int
    conversation_id: int
    parent_id: int | None
    role: Role
    text: str
    tokens: tuple[int, ...]
    start_pos: int
    chunks: tuple[int, ...]
    vocab_id: str | None
    status: Status
    generation: dict[str, Any] | None
    created_at: datetime
    thinking: str = ""
    span_text: str | None = None
    # Its part in tool use (see ``storage.tool_use``), None where it has none.
    tool_use: dict[str, Any] | None = None

    @property
    def end_pos(self) -> int:
        """Position just past this node's span."""
        return self.start_pos + len(self.tokens)


@dataclass(frozen=True)
class StartSpan:
    """The rendered span of a conversation start: at position 0, its
    ``tokens`` under the vocabulary ``vocab_id``, standing for ``text``."""

    tokens: tuple[int, ...]
    text: str
    vocab_id: str


@dataclass(frozen=True)
class NodeSummary:
    """A node as a tree view lists it: no tokens, no blob."""

    id: int
    parent_id: int | None
    role: Role
    text: str
    n_tokens: int
    status: Status
    checkpoint_bytes: int
    created_at: datetime
    generation: dict[str, Any] | None = field(default=None, compare=False)
    thinking: str = ""
    # A start with no checkpoint of its own restores from that of a start
    # with the same tokens (``twin_root``): its size, else 0.
    shared_checkpoint_bytes: int = 0
    # Its part in tool use (``storage.tool_use``), None where it has none.
    tool_use: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def is_saved(self) -> bool:
        """Whether going back to it restores a checkpoint (its own or a
        twin start's) rather than decoding its text."""
        return self.checkpoint_bytes > 0 or self.shared_checkpoint_bytes > 0


@dataclass(frozen=True)
class DeletedBranch:
    """Where deleting a branch left its conversation: ``parent_id`` is the
    deleted node's parent (for a start, the first other start), and
    ``active_node_id`` the conversation's active node now (the parent's, if
    the active node was deleted)."""

    conversation_id: int
    parent_id: int
    active_node_id: int | None


@dataclass(frozen=True)
class StoredCheckpoint:
    """A checkpoint read back for restoring, with its checksum unverified.

    ``profile`` (the backend profile's fingerprint) and ``node_tokens`` (the
    node's stored token ids) are what the checksum binds besides the bytes.
    Values of the wrong SQL type (a damaged file) are kept as read, so that
    ``is_intact`` can refuse them.
    """

    node_id: int
    kind: str
    start_pos: int
    end_pos: int
    checksum: str
    data: bytes = field(repr=False)
    profile: str = ""
    node_tokens: bytes = field(default=b"", repr=False)

    def is_intact(self) -> bool:
        """Whether the bytes still match the checksum written with them.

        False too when the checkpoint was moved to another node, span or
        profile, or its node's tokens changed, or a value has the wrong type.
        """
        if not isinstance(self.data, bytes) or not isinstance(self.node_tokens, bytes):
            return False
        return self.checksum == checkpoint_checksum(
            self.node_id,
            self.profile,
            self.kind,
            self.start_pos,
            self.end_pos,
            self.node_tokens,
            self.data,
        )


def pack_tokens(tokens: Sequence[int]) -> bytes:
    """Serialize token ids as little-endian int32."""
    packed = array("i", tokens)
    if packed.itemsize != 4:  # pragma: no cover - every supported platform has 4
        raise RuntimeError("int32 arrays are required")
    return packed.tobytes()


def unpack_tokens(data: bytes) -> tuple[int, ...]:
    """Inverse of ``pack_tokens``."""
    return tuple(array("i", data))


# A node's stored columns, in the order ``node_from_stored`` reads them: the
# raw reads (``tree_reads``) select them, the ORM path reads these attributes.
NODE_COLUMNS = (
    "id",
    "conversation_id",
    "parent_id",
    "role",
    "text",
    "tokens",
    "start_pos",
    "chunks",
    "vocab_id",
    "status",
    "generation",
    "created_at",
    "thinking",
    "span_text",
    "tool_use",
)


def node_from_stored(values: Sequence[Any]) -> NodeRecord:
    """The record of a node's stored values in ``NODE_COLUMNS`` order: the one
    mapping, for rows sqlite3 reads (JSON and dates as text) and for the ORM's
    attributes (already converted) alike."""
    (
        node_id,
        conversation_id,
        parent_id,
        role,
        text,
        tokens,
        start_pos,
        chunks,
        vocab_id,
        status,
        generation,
        created_at,
        thinking,
        span_text,
        tool_use,
    ) = values
    return NodeRecord(
        id=node_id,
        conversation_id=conversation_id,
        parent_id=parent_id,
        role=Role(role),
        text=text,
        tokens=unpack_tokens(tokens or b""),
        start_pos=start_pos,
        chunks=tuple(stored_json(chunks) or ()),
        vocab_id=vocab_id,
        status=Status(status),
        generation=stored_json(generation),
        created_at=timestamp(created_at),
        thinking=thinking or "",
        span_text=span_text,
        tool_use=stored_json(tool_use),
    )


def node_record(node: Node) -> NodeRecord:
    """The record of an ORM node row."""
    return node_from_stored([getattr(node, name) for name in NODE_COLUMNS])


def conversation_record(conv: Conversation) -> ConversationRecord:
    """The record of an ORM conversation row."""
    # The counts are the triggers' (storage/counters.py): a session that added
    # nodes since it read ``conv`` must refresh them first (``recounted``).
    return conversation_from_stored(
        [getattr(conv, name) for name in CONVERSATION_COLUMNS]
    )


def recounted(session: Session, conv: Conversation) -> ConversationRecord:
    """``conv``'s record after this session's writes, with the counts the
    triggers have kept meanwhile (the session's copy does not see them)."""
    session.flush()
    session.refresh(conv, ["node_count", "checkpoint_bytes"])
    return conversation_record(conv)
