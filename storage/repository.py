"""Repository functions: every read and write of Arbor's data, one transaction each.

They take a ``Database`` and return plain frozen dataclasses, never live ORM
objects, so callers on any thread can hold them safely.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import re
import sqlite3
import unicodedata
from array import array
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import (
    ColumnElement,
    CursorResult,
    DateTime,
    Integer,
    LargeBinary,
    case,
    cast,
    delete,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from storage import catalog, reserve
from storage.catalog import ConversationRecord
from storage.db import Database, translate_errors
from storage.errors import NotFound, StorageUnavailable
from storage.migrations import SEARCH_TABLE
from storage.models import (
    DEFAULT_TITLE,
    BackendProfile,
    Checkpoint,
    CheckpointBlob,
    Conversation,
    Node,
    Setting,
    checkpoint_checksum,
    utcnow,
)
from storage.values import Role, Status

log = logging.getLogger(__name__)

T = TypeVar("T")

# SQLite stores ids as signed 64-bit integers; nothing outside 1..2**63-1 can
# be a row id (and binding a larger Python int raises OverflowError).
_MAX_ID = 2**63 - 1


def _releases_space(function: Callable[..., T]) -> Callable[..., T]:
    """Run ``release_space`` after a function that deletes rows."""

    @functools.wraps(function)
    def wrapper(db: Database, *args: Any, **kwargs: Any) -> T:
        result = function(db, *args, **kwargs)
        try:
            release_space(db)
        except StorageUnavailable as exc:
            # The deletion itself is committed; failing to shrink the file now
            # (e.g. locked) only postpones that to the next deletion.
            log.warning("Could not shrink the database: %s", exc)
        return result

    return wrapper


# Giving freed pages back moves the pages at the end of the file into the
# free ones, then cuts the end off. SQLite writes every page it moves to the
# -wal file first, and the file only shrinks at the checkpoint after: done
# in one transaction, the -wal grew by all that was moved, up to the size of
# the data kept (issue 23). So it goes in steps of at most this much, each one
# transaction, with a TRUNCATE checkpoint after each: the -wal holds one
# step at most, and each step needs no more free disk than it frees.
_RELEASE_STEP_BYTES = 16 << 20
# On a nearly full disk a step takes at most this share of what is free
# (the -wal needs room for it before the file shrinks), and never less than
# this many pages.
_RELEASE_FREE_SHARE = 2
_RELEASE_MIN_PAGES = 16
# PRAGMA auto_vacuum's value for INCREMENTAL (what new files get, db.py).
_AUTO_VACUUM_INCREMENTAL = 2

Progress = Callable[[int, int], None]
"""A callback told ``(done, total)`` as long work goes on."""


def release_space(db: Database, progress: Progress | None = None) -> None:
    """Give the pages freed by deletions back to the file system, in steps.

    Checkpoints are most of the file; without this, deleting them would free
    room inside the file but never shrink it. Each step is one transaction
    (a kill leaves the file consistent, the rest free inside it for later)
    followed by a TRUNCATE checkpoint, which shrinks the file and empties the
    -wal (see ``_RELEASE_STEP_BYTES``). ``progress(done, total)`` is told the
    pages given back after each step has committed, while the -wal still
    holds it. Best effort: the deletion is already committed, so a failure
    here (a disk still too full to move pages, a reader that keeps the -wal
    from being emptied) is only logged, and the next deletion gives back the
    rest. Then the disk space reserve is made again if it was spent. Does
    nothing on a read-only database.
    """
    if db.read_only:
        return
    try:
        with translate_errors(db.path):
            pooled = db.engine.raw_connection()
            try:
                raw: sqlite3.Connection = pooled.driver_connection  # type: ignore[assignment]
                _release_in_steps(db, raw, progress)
            finally:
                pooled.close()
    except StorageUnavailable as exc:
        log.warning("could not give freed space back yet: %s", exc)
    reserve.keep(db.path)


def _release_in_steps(
    db: Database, raw: sqlite3.Connection, progress: Progress | None
) -> None:
    def pragma(statement: str) -> int:
        return int(raw.execute(f"PRAGMA {statement}").fetchone()[0])

    if pragma("auto_vacuum") != _AUTO_VACUUM_INCREMENTAL:
        # A file made without it (by hand, or an older SQLite tool) keeps
        # its free pages for reuse; the pragma would do nothing.
        return
    page_size = pragma("page_size")
    total = left = pragma("freelist_count")
    while left > 0:
        step = min(left, _release_step_pages(db, page_size))
        # The pragma gives back one page per step of its statement and
        # sqlite3's execute() steps only once; executescript() runs it to
        # the end, one transaction in autocommit mode.
        raw.executescript(f"PRAGMA incremental_vacuum({step});")
        now = pragma("freelist_count")
        if now >= left:
            return  # nothing given back (another writer freed more meanwhile)
        left = now
        if progress is not None:
            progress(total - min(left, total), total)
        busy, _frames, _copied = raw.execute(
            "PRAGMA wal_checkpoint(TRUNCATE)"
        ).fetchone()
        if busy:
            # A reader still needs what the -wal holds: another step would
            # only grow it. The pages stay free inside the file until then.
            log.info("giving freed space back paused: the database is in use")
            return


def _release_step_pages(db: Database, page_size: int) -> int:
    step = _RELEASE_STEP_BYTES
    free = reserve.free_bytes(db.path)
    if free is not None:
        step = min(step, free // _RELEASE_FREE_SHARE)
    return max(_RELEASE_MIN_PAGES, step // page_size)


# --- records -----------------------------------------------------------------


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

    @property
    def end_pos(self) -> int:
        """Position just past this node's span."""
        return self.start_pos + len(self.tokens)


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

    @property
    def is_saved(self) -> bool:
        """Whether going back to it restores a checkpoint (its own or a
        twin start's) rather than decoding its text."""
        return self.checkpoint_bytes > 0 or self.shared_checkpoint_bytes > 0


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


def _node_record(node: Node) -> NodeRecord:
    return NodeRecord(
        id=node.id,
        conversation_id=node.conversation_id,
        parent_id=node.parent_id,
        role=Role(node.role),
        text=node.text,
        tokens=unpack_tokens(node.tokens),
        start_pos=node.start_pos,
        chunks=tuple(node.chunks or ()),
        vocab_id=node.vocab_id,
        status=Status(node.status),
        generation=node.generation,
        created_at=node.created_at,
        thinking=node.thinking or "",
        span_text=node.span_text,
    )


def _conversation_record(conv: Conversation) -> ConversationRecord:
    # The counts are the triggers' (storage/counters.py): a session that added
    # nodes since it read ``conv`` must refresh them first (``_recounted``).
    return ConversationRecord(
        id=conv.id,
        title=conv.title,
        system_prompt=conv.system_prompt,
        active_node_id=conv.active_node_id,
        created_at=conv.created_at,
        updated_at=conv.updated_at,
        node_count=conv.node_count,
        checkpoint_bytes=conv.checkpoint_bytes,
        reasoning=conv.reasoning,
        model_path=conv.model_path,
        model_identity=conv.model_identity,
        sampling=conv.sampling,
    )


def _recounted(session: Session, conv: Conversation) -> ConversationRecord:
    """``conv``'s record after this session's writes, with the counts the
    triggers have kept meanwhile (the session's copy does not see them)."""
    session.flush()
    session.refresh(conv, ["node_count", "checkpoint_bytes"])
    return _conversation_record(conv)


# --- conversations --------------------------------------------------------------


def create_conversation(
    db: Database,
    title: str | None,
    system_prompt: str | None,
    sampling: dict[str, Any] | None = None,
) -> tuple[ConversationRecord, NodeRecord]:
    """Create a conversation and its root node (the root's span is rendered later).

    ``sampling``: what its replies use, None for the Settings' own.
    """
    with db.write() as s:
        conv = Conversation(
            title=title or DEFAULT_TITLE, system_prompt=system_prompt, sampling=sampling
        )
        s.add(conv)
        s.flush()
        root = Node(
            conversation_id=conv.id, role=Role.ROOT, text=system_prompt or "", chunks=[]
        )
        s.add(root)
        s.flush()
        conv.active_node_id = root.id
        return _recounted(s, conv), _node_record(root)


def add_root(db: Database, conversation_id: int, system_prompt: str) -> NodeRecord:
    """Start a new branch of a conversation from a new root holding
    ``system_prompt``: the earlier roots and everything below them stay.

    The new root becomes the active node and its prompt the conversation's
    (what a new branch, an export's header and the list show).
    """
    with db.write() as s:
        conv = _get(s, Conversation, conversation_id)
        root = Node(
            conversation_id=conv.id, role=Role.ROOT, text=system_prompt, chunks=[]
        )
        s.add(root)
        s.flush()
        conv.system_prompt = system_prompt or None
        conv.active_node_id = root.id
        conv.updated_at = utcnow()
        return _node_record(root)


def set_conversation_sampling(
    db: Database, conversation_id: int, sampling: dict[str, Any] | None
) -> None:
    """Store the sampling a conversation's replies use (None: the Settings')."""
    with db.write() as s:
        _get(s, Conversation, conversation_id).sampling = sampling


def list_conversations(
    db: Database, text_filter: str | None = None
) -> list[ConversationRecord]:
    """Conversations, most recently updated first, optionally filtered by text.

    The filter matches the title or any message text, case-insensitively.
    The query is ``storage.catalog``'s, which start-up also runs without
    SQLAlchemy; here it runs in a read transaction of this database.
    """
    with db.read() as s:
        connection = s.connection().connection.driver_connection
        assert isinstance(connection, sqlite3.Connection)
        return catalog.list_conversations(connection, text_filter)


def get_conversation(db: Database, conversation_id: int) -> ConversationRecord:
    """Return one conversation; raises ``NotFound``."""
    with db.read() as s:
        return _conversation_record(_get(s, Conversation, conversation_id))


def rename_conversation(db: Database, conversation_id: int, title: str) -> None:
    """Change a conversation's title."""
    with db.write() as s:
        _get(s, Conversation, conversation_id).title = title


def title_if_unnamed(db: Database, conversation_id: int, title: str) -> None:
    """Give a conversation that still has the default title this one."""
    with db.write() as s:
        conv = _get(s, Conversation, conversation_id)
        if conv.title == DEFAULT_TITLE:
            conv.title = title


@_releases_space
def delete_conversation(db: Database, conversation_id: int) -> None:
    """Delete a conversation with all its nodes and checkpoints.

    Any depth, at a cost that follows the conversation's size, not the
    file's (see the note above ``_subtree_ids``).
    """
    with db.write(frees_space=True) as s:
        conv = _get(s, Conversation, conversation_id)
        _delete_nodes(s, [Node.conversation_id == conv.id])
        s.delete(conv)


def set_reasoning(db: Database, conversation_id: int, choice: str | None) -> None:
    """Store a conversation's reasoning choice (None: the template's default)."""
    with db.write() as s:
        _get(s, Conversation, conversation_id).reasoning = choice


def set_conversation_model(
    db: Database, conversation_id: int, path: str, identity: str
) -> None:
    """Record the model a conversation is being continued with."""
    with db.write() as s:
        conv = _get(s, Conversation, conversation_id)
        conv.model_path = path
        conv.model_identity = identity


def set_active_node(db: Database, node_id: int) -> None:
    """Remember ``node_id`` as where its conversation continues."""
    with db.write() as s:
        node = _get(s, Node, node_id)
        conv = _get(s, Conversation, node.conversation_id)
        conv.active_node_id = node.id
        conv.updated_at = utcnow()


# --- nodes ------------------------------------------------------------------------


def add_node(
    db: Database,
    parent_id: int,
    role: str,
    text: str,
    *,
    tokens: list[int] | tuple[int, ...] = (),
    start_pos: int = 0,
    chunks: list[int] | tuple[int, ...] = (),
    vocab_id: str | None = None,
    status: str = Status.COMPLETE,
    generation: dict[str, Any] | None = None,
    span_text: str | None = None,
    thinking: str = "",
) -> NodeRecord:
    """Add a child of ``parent_id`` and make it its conversation's active node."""
    with db.write() as s:
        parent = _get(s, Node, parent_id)
        node = Node(
            conversation_id=parent.conversation_id,
            parent_id=parent.id,
            role=role,
            text=text,
            tokens=pack_tokens(tokens),
            n_tokens=len(tokens),
            start_pos=start_pos,
            chunks=list(chunks),
            vocab_id=vocab_id,
            status=status,
            generation=generation,
            span_text=span_text,
            thinking=thinking,
        )
        s.add(node)
        s.flush()
        conv = _get(s, Conversation, parent.conversation_id)
        conv.active_node_id = node.id
        conv.updated_at = utcnow()
        return _node_record(node)


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
    status: str = _KEEP,
    vocab_id: str | None = _KEEP,
    generation: dict[str, Any] | None = _KEEP,
) -> NodeRecord:
    """Change the given fields of a node (the others stay); return the node."""
    with db.write() as s:
        node = _get(s, Node, node_id)
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
        return _node_record(node)


def set_node_chunks(db: Database, chunks: dict[int, list[int]]) -> None:
    """Record new batch sizes for some nodes' spans (node id -> sizes), at once."""
    with db.write() as s:
        for node_id, sizes in chunks.items():
            _get(s, Node, node_id).chunks = list(sizes)


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
# Ids bound in one ``IN (...)`` list: well under SQLite's variable limit.
_IDS_PER_QUERY = 500


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
        _require_valid_id(Node, ident)
    freed = 0
    with db.write() as s:
        nodes: dict[int, Node] = {}
        for part in _id_batches(ids):
            rows = s.execute(select(Node).where(Node.id.in_(part))).scalars()
            nodes.update((node.id, node) for node in rows)
        missing = [ident for ident in ids if ident not in nodes]
        if missing:
            raise NotFound(_not_found_message(Node, missing[0]))
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
        for part in _id_batches(_valid_ids(list(drop_checkpoints))):
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
        result = {ident: _node_record(nodes[ident]) for ident in ids}
    if freed:
        try:
            release_space(db)
        except StorageUnavailable as exc:
            # As after delete_checkpoints: the change is committed.
            log.warning("Could not shrink the database: %s", exc)
    return result


def _id_batches(ids: Sequence[int]) -> list[Sequence[int]]:
    return [ids[i : i + _IDS_PER_QUERY] for i in range(0, len(ids), _IDS_PER_QUERY)]


def get_node(db: Database, node_id: int) -> NodeRecord:
    """Return one node; raises ``NotFound``."""
    with db.read() as s:
        return _node_record(_get(s, Node, node_id))


def get_path(db: Database, node_id: int) -> list[NodeRecord]:
    """Return the nodes from the root down to ``node_id``; raises ``NotFound``."""
    _require_valid_id(Node, node_id)
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
        path = [_node_record(n) for n in rows]
        if not path:
            raise NotFound(f"No node with id {node_id}.")
        return path


def get_children(db: Database, node_id: int) -> list[NodeRecord]:
    """Children of a node, oldest first (none for an unknown id)."""
    if not _valid_id(node_id):
        return []
    with db.read() as s:
        rows = s.execute(
            select(Node).where(Node.parent_id == node_id).order_by(Node.id)
        ).scalars()
        return [_node_record(n) for n in rows]


def child_texts(db: Database, node_id: int) -> list[tuple[int, Role, str]]:
    """(id, role, text) of each child of a node, oldest first: what matching
    a message list against the tree reads (no tokens, no blobs)."""
    if not _valid_id(node_id):
        return []
    with db.read() as s:
        rows = s.execute(
            select(Node.id, Node.role, Node.text)
            .where(Node.parent_id == node_id)
            .order_by(Node.id)
        )
        return [(row[0], Role(row[1]), row[2]) for row in rows]


def root_texts(db: Database, conversation_id: int) -> list[tuple[int, str]]:
    """(id, system prompt) of each start of a conversation, oldest first."""
    if not _valid_id(conversation_id):
        return []
    with db.read() as s:
        rows = s.execute(
            select(Node.id, Node.text)
            .where(Node.conversation_id == conversation_id, Node.parent_id.is_(None))
            .order_by(Node.id)
        )
        return [(row[0], row[1]) for row in rows]


@dataclass(frozen=True)
class CheckpointRef:
    """Where a node's checkpoint is, and what its checksum was made over.

    ``checkpoint_id`` is also the row id of its blob (``checkpoint_blob``).
    """

    node_id: int
    checkpoint_id: int
    kind: str
    start_pos: int
    end_pos: int
    byte_size: int
    checksum: str


@dataclass(frozen=True)
class TreeIndex:
    """A conversation's shape, and the nodes of one path in it.

    ``parents`` maps every node to its parent; ``checkpoints`` every node
    with a checkpoint of the profile asked for to where it is; ``profile``
    is that profile's fingerprint ("" when none was asked for); ``nodes``
    holds the records of the path to the node the index was asked for.
    """

    conversation: ConversationRecord
    parents: dict[int, int | None]
    checkpoints: dict[int, CheckpointRef]
    profile: str = ""
    nodes: dict[int, NodeRecord] = field(default_factory=dict)


# The statements of a move's reads (a restore, a switch), in plain SQL on
# sqlite3's own connection (``Database.read_raw``): a restore in a new process
# would otherwise spend more time in SQLAlchemy's first executions of them
# (some 15 ms, 4 to 6 ms of a cold resume unprofiled) than reading. Values
# are converted as the ORM's column types do (JSON text, DateTime text).
_NODE_COLUMNS = (
    "id, conversation_id, parent_id, role, text, tokens, start_pos, chunks, "
    "vocab_id, status, generation, created_at, thinking, span_text"
)
_CONVERSATION_OF = "SELECT conversation_id FROM node WHERE id = ?"
_PARENTS = "SELECT id, parent_id FROM node WHERE conversation_id = ?"
_CHECKPOINTS = (
    "SELECT c.node_id, c.id, c.kind, c.start_pos, c.end_pos, c.byte_size, "
    "c.checksum, p.fingerprint FROM checkpoint c "
    "JOIN node n ON n.id = c.node_id JOIN backend_profile p ON p.id = c.profile_id "
    "WHERE n.conversation_id = ? AND c.profile_id = ?"
)
_NODES = "SELECT " + _NODE_COLUMNS + " FROM node WHERE id IN ({marks})"
# Ids bound per statement: SQLite before 3.32 allows 999 variables.
_IDS_PER_READ = 500


def _node_from_row(row: tuple[Any, ...]) -> NodeRecord:
    (
        node_id,
        conversation_id,
        parent_id,
        role,
        text_,
        tokens,
        start_pos,
        chunks,
        vocab_id,
        status,
        generation,
        created_at,
        thinking,
        span_text,
    ) = row
    return NodeRecord(
        id=node_id,
        conversation_id=conversation_id,
        parent_id=parent_id,
        role=Role(role),
        text=text_,
        tokens=unpack_tokens(tokens or b""),
        start_pos=start_pos,
        chunks=tuple(_from_json(chunks) or ()),
        vocab_id=vocab_id,
        status=Status(status),
        generation=_from_json(generation),
        created_at=catalog.timestamp(created_at),
        thinking=thinking or "",
        span_text=span_text,
    )


def _from_json(value: str | None) -> Any:
    # SQLAlchemy's JSON type stores None as the text "null": most nodes (a
    # question, a root) have no generation figures, and a tree reads them all.
    return None if value is None or value == "null" else json.loads(value)


def _read_nodes(raw: sqlite3.Connection, ids: list[int]) -> dict[int, NodeRecord]:
    records: dict[int, NodeRecord] = {}
    for at in range(0, len(ids), _IDS_PER_READ):
        batch = ids[at : at + _IDS_PER_READ]
        statement = _NODES.format(marks=",".join("?" * len(batch)))
        for row in raw.execute(statement, batch):
            records[row[0]] = _node_from_row(row)
    return records


def tree_index(db: Database, node_id: int, profile_id: int | None) -> TreeIndex:
    """The index of the conversation holding ``node_id``, with the nodes of
    its path, from one snapshot; raises ``NotFound``."""
    _require_valid_id(Node, node_id)
    with db.read_raw() as raw:
        found = raw.execute(_CONVERSATION_OF, (node_id,)).fetchone()
        if found is None:
            raise NotFound(f"No node with id {node_id}.")
        conversation_id = found[0]
        conversation = raw.execute(
            catalog.CONVERSATION_BY_ID, (conversation_id,)
        ).fetchone()
        parents: dict[int, int | None] = dict(
            raw.execute(_PARENTS, (conversation_id,)).fetchall()
        )
        checkpoints: dict[int, CheckpointRef] = {}
        profile = ""
        if profile_id is not None and _valid_id(profile_id):
            for row in raw.execute(_CHECKPOINTS, (conversation_id, profile_id)):
                checkpoints[row[0]] = CheckpointRef(*row[:7])
                profile = row[7]
        path = [node_id]
        while (parent := parents.get(path[-1])) is not None and len(path) <= len(
            parents
        ):
            path.append(parent)
        nodes = _read_nodes(raw, path)
    return TreeIndex(
        catalog.conversation_record(conversation),
        parents,
        checkpoints,
        profile,
        nodes,
    )


def get_nodes(db: Database, node_ids: Sequence[int]) -> dict[int, NodeRecord]:
    """The nodes of ``node_ids`` that exist, by id, read in one snapshot."""
    ids = _valid_ids(list(node_ids))
    if not ids:
        return {}
    with db.read_raw() as raw:
        return _read_nodes(raw, ids)


# Every node of a conversation with its checkpoints' bytes, on the raw
# connection: the tree panel asks for it each time a conversation opens, and
# through the ORM a 10,000-node tree took 0.41 s, most of it making rows.
_TREE = """
SELECT n.id, n.parent_id, n.role, n.text, n.n_tokens, n.status, n.created_at,
       n.generation, n.thinking,
       (SELECT sum(c.byte_size) FROM checkpoint AS c
        WHERE c.node_id = n.id AND (:profile IS NULL OR c.profile_id = :profile)),
       CASE WHEN n.parent_id IS NULL AND n.n_tokens > 0 THEN (
        -- A start's twin, as twin_root finds one: asked of starts only.
        SELECT c.byte_size FROM node AS m JOIN checkpoint AS c ON c.node_id = m.id
        WHERE m.parent_id IS NULL AND m.id != n.id AND m.n_tokens = n.n_tokens
          AND m.start_pos = 0 AND m.tokens = n.tokens
          AND (:profile IS NULL OR c.profile_id = :profile)
          AND c.start_pos = 0 AND c.end_pos = n.n_tokens
        LIMIT 1) END
FROM node AS n WHERE n.conversation_id = :conversation ORDER BY n.id
"""
_CONVERSATION_EXISTS = "SELECT 1 FROM conversation WHERE id = ?"


def tree(
    db: Database, conversation_id: int, profile_id: int | None = None
) -> list[NodeSummary]:
    """Every node of a conversation, parents before children, without token data.

    ``checkpoint_bytes`` counts the checkpoints of ``profile_id`` (all profiles
    when None). Raises ``NotFound`` for a conversation that is not there.
    """
    _require_valid_id(Conversation, conversation_id)
    with db.read_raw() as raw:
        if raw.execute(_CONVERSATION_EXISTS, (conversation_id,)).fetchone() is None:
            raise NotFound(_not_found_message(Conversation, conversation_id))
        rows = raw.execute(
            _TREE, {"conversation": conversation_id, "profile": profile_id}
        ).fetchall()
    roles = {role.value: role for role in Role}
    statuses = {status.value: status for status in Status}
    return [
        NodeSummary(
            id=node_id,
            parent_id=parent_id,
            role=roles[role],
            text=text_,
            n_tokens=n_tokens,
            status=statuses[status],
            checkpoint_bytes=size or 0,
            created_at=catalog.timestamp(created_at),
            generation=_from_json(generation),
            thinking=thinking or "",
            shared_checkpoint_bytes=0 if size else twin_size or 0,
        )
        for (
            node_id,
            parent_id,
            role,
            text_,
            n_tokens,
            status,
            created_at,
            generation,
            thinking,
            size,
            twin_size,
        ) in rows
    ]


@_releases_space
def delete_subtree(db: Database, node_id: int) -> int:
    """Delete a node, its descendants and their checkpoints; return the parent id.

    A root (a system prompt's start) can be deleted only where the
    conversation has another: its first other root is then returned in the
    parent's place. The only root cannot (delete the conversation instead).
    If the active node was inside the subtree, the returned node becomes
    active.
    """
    with db.write(frees_space=True) as s:
        node = _get(s, Node, node_id)
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
        conv = _get(s, Conversation, node.conversation_id)
        deleted = _subtree_ids(s, node.id)
        _delete_nodes(
            s,
            [
                Node.id.in_(deleted[at : at + _IDS_PER_READ])
                for at in range(0, len(deleted), _IDS_PER_READ)
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
        return parent_id


# Deleting many nodes. node.parent_id cascades to the children, and SQLite
# runs each cascade as a trigger: one level of trigger recursion per level of
# the tree, and at 1,000 it stops ("too many levels of trigger recursion"),
# so a path of 1,000 messages could not be deleted. Here the nodes to delete
# are first unlinked from their parents (a parent_id set to NULL cascades to
# nothing and checks nothing), then deleted: none of them is then anyone's
# parent, so nothing cascades and nothing recurses, at any depth. Their
# checkpoints and blobs go first, one statement each, a little quicker than
# a cascade per node (0.33 s against 0.40 s for a 10,000-node path here).
# Deleting one node per statement, leaves first, would avoid the recursion
# too, but the search index's delete trigger costs some 25 us more per
# statement than per row: 1.3 s for that path. The trigger runs for every
# node deleted, as for any deletion, so the index stays in step. Every
# statement finds its rows through the primary key or an index
# (ix_node_parent, ix_node_conversation_parent, ix_checkpoint_node_profile),
# so the work follows what is deleted, not the size of the file.


def _subtree_ids(session: Session, node_id: int) -> list[int]:
    """The ids of ``node_id`` and of all its descendants."""
    below = select(Node.id).where(Node.id == node_id).cte("below", recursive=True)
    # UNION, not UNION ALL: a node seen twice is not followed again, so
    # parents that make a cycle (damage done by hand) cannot loop forever.
    below = below.union(select(Node.id).join(below, Node.parent_id == below.c.id))
    return list(session.execute(select(below.c.id)).scalars())


def _delete_nodes(session: Session, parts: list[ColumnElement[bool]]) -> None:
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
        if not catalog.has_unfinished_replies(raw):
            return 0
    with db.write() as s:
        result = s.execute(
            update(Node)
            .where(Node.status == Status.GENERATING)
            .values(status=Status.INTERRUPTED)
        )
        assert isinstance(result, CursorResult)  # an UPDATE's result counts rows
        return result.rowcount or 0


# --- profiles and checkpoints -----------------------------------------------------


def ensure_profile(db: Database, fingerprint: str, details: dict[str, Any]) -> int:
    """Return the id of the backend profile ``fingerprint``, creating it if new.

    On a read-only database a known profile is still found (its checkpoints
    can be restored); a new one raises ``StorageUnavailable``.
    """
    # A known profile (the usual case) is only read: a write transaction
    # would tell every cache of the database that something changed.
    with db.read() as s:
        existing = _profile_id(s, fingerprint)
    if existing is not None:
        return existing
    # The write lock is taken before looking again, so two processes meeting
    # a new profile at once cannot both insert it.
    with db.write() as s:
        existing = _profile_id(s, fingerprint)
        if existing is not None:
            return existing
        profile = BackendProfile(fingerprint=fingerprint, details=details)
        s.add(profile)
        s.flush()
        return profile.id


def _profile_id(session: Session, fingerprint: str) -> int | None:
    return session.execute(
        select(BackendProfile.id).where(BackendProfile.fingerprint == fingerprint)
    ).scalar_one_or_none()


def save_checkpoint(
    db: Database,
    node_id: int,
    profile_id: int,
    kind: str,
    start_pos: int,
    end_pos: int,
    data: bytes,
    captured_tokens: Sequence[int] | None = None,
) -> int:
    """Store (or replace) the checkpoint of ``node_id`` for ``profile_id``.

    Returns the number of bytes stored. Raises ``NotFound`` if the node (or the
    profile) no longer exists, e.g. its branch was deleted meanwhile, and,
    given ``captured_tokens`` (the span's tokens when ``data`` was captured),
    if the node's span has changed since: the bytes are no longer its KV.
    """
    with db.write() as s:
        # Read in the same transaction as the write: the node cannot vanish
        # or change in between, and the checksum binds the tokens it has now.
        node = _get(s, Node, node_id)
        if captured_tokens is not None and (node.start_pos, node.tokens) != (
            start_pos,
            pack_tokens(captured_tokens),
        ):
            raise NotFound(f"Node {node_id} changed after its checkpoint was captured.")
        profile = _get(s, BackendProfile, profile_id)
        checksum = checkpoint_checksum(
            node_id, profile.fingerprint, kind, start_pos, end_pos, node.tokens, data
        )
        s.execute(
            delete(Checkpoint).where(
                Checkpoint.node_id == node_id, Checkpoint.profile_id == profile_id
            )
        )
        checkpoint = Checkpoint(
            node_id=node_id,
            profile_id=profile_id,
            kind=kind,
            start_pos=start_pos,
            end_pos=end_pos,
            byte_size=len(data),
            checksum=checksum,
        )
        s.add(checkpoint)
        s.flush()
        s.add(CheckpointBlob(checkpoint_id=checkpoint.id, data=data))
        return len(data)


@dataclass(frozen=True)
class CapturedCheckpoint:
    """A checkpoint to store with ``save_checkpoints``.

    ``captured_tokens``: the node's tokens when ``data`` was captured, to
    skip a node whose span changed since (None: not compared).
    """

    node_id: int
    kind: str
    start_pos: int
    end_pos: int
    data: bytes = field(repr=False)
    captured_tokens: tuple[int, ...] | None = None


def save_checkpoints(
    db: Database, profile_id: int, checkpoints: Sequence[CapturedCheckpoint]
) -> list[int]:
    """Store (or replace) several checkpoints for ``profile_id`` in one transaction.

    What ``save_checkpoint`` does for each, for the checkpoints of a whole
    reprocess: one commit instead of one per node, and one statement per
    table. Returns the bytes stored for each; 0 for one whose node is gone
    or whose span changed since its capture (skipped, as a queued write for
    it would be). Raises ``NotFound`` if the profile is gone.
    """
    if not checkpoints:
        return []
    with db.write() as s:
        profile = _get(s, BackendProfile, profile_id)
        wanted = sorted(set(_valid_ids([c.node_id for c in checkpoints])))
        spans: dict[int, tuple[int, bytes]] = {}
        for part in _id_batches(wanted):
            rows = s.execute(
                select(Node.id, Node.start_pos, Node.tokens).where(Node.id.in_(part))
            )
            spans.update((r.id, (r.start_pos, r.tokens)) for r in rows)
        sizes: list[int] = []
        # A node captured twice keeps its last checkpoint, as two saves would.
        latest: dict[int, tuple[dict[str, Any], bytes]] = {}
        now = utcnow()
        for captured in checkpoints:
            span = spans.get(captured.node_id)
            if span is None or (
                captured.captured_tokens is not None
                and span != (captured.start_pos, pack_tokens(captured.captured_tokens))
            ):
                log.info(
                    "checkpoint of node %s not written: the node changed or is gone",
                    captured.node_id,
                )
                sizes.append(0)
                continue
            row = {
                "node_id": captured.node_id,
                "profile_id": profile_id,
                "kind": captured.kind,
                "start_pos": captured.start_pos,
                "end_pos": captured.end_pos,
                "byte_size": len(captured.data),
                "checksum": checkpoint_checksum(
                    captured.node_id,
                    profile.fingerprint,
                    captured.kind,
                    captured.start_pos,
                    captured.end_pos,
                    span[1],
                    captured.data,
                ),
                "created_at": now,
                "last_used_at": now,
            }
            latest[captured.node_id] = (row, captured.data)
            sizes.append(len(captured.data))
        if not latest:
            return sizes
        for part in _id_batches(sorted(latest)):
            s.execute(
                delete(Checkpoint).where(
                    Checkpoint.node_id.in_(part), Checkpoint.profile_id == profile_id
                )
            )
        kept = list(latest.values())
        ids = s.scalars(
            insert(Checkpoint).returning(Checkpoint.id, sort_by_parameter_order=True),
            [row for row, _data in kept],
        ).all()
        s.execute(
            insert(CheckpointBlob),
            [
                {"checkpoint_id": ident, "data": data}
                for ident, (_row, data) in zip(ids, kept, strict=True)
            ],
        )
        return sizes


def checkpointed_nodes(
    db: Database, node_ids: list[int], profile_id: int
) -> dict[int, int]:
    """Map each of ``node_ids`` that has a checkpoint for the profile to its size."""
    node_ids = _valid_ids(node_ids)
    if not node_ids or not _valid_id(profile_id):
        return {}
    with db.read() as s:
        rows = s.execute(
            select(Checkpoint.node_id, Checkpoint.byte_size).where(
                Checkpoint.node_id.in_(node_ids), Checkpoint.profile_id == profile_id
            )
        )
        return {r.node_id: r.byte_size for r in rows}


def other_checkpoint_profiles(
    db: Database, node_id: int, profile_id: int
) -> list[dict[str, Any]]:
    """The details of every other profile that holds a checkpoint of ``node_id``
    (why a node without one for ``profile_id`` was checkpointed all the same)."""
    if not _valid_id(node_id):
        return []
    with db.read() as s:
        rows = s.execute(
            select(BackendProfile.details)
            .join(Checkpoint, Checkpoint.profile_id == BackendProfile.id)
            .where(Checkpoint.node_id == node_id, Checkpoint.profile_id != profile_id)
            .order_by(BackendProfile.id)
        )
        return [dict(row.details) for row in rows]


def load_checkpoints(
    db: Database, node_ids: list[int], profile_id: int
) -> dict[int, StoredCheckpoint]:
    """Read the checkpoints of ``node_ids`` for the profile in one query.

    Read-only: a move reads every checkpoint below the fork at once, then
    marks the ones it used with ``touch_checkpoints`` (one write, not one
    per node).
    """
    node_ids = _valid_ids(node_ids)
    if not node_ids or not _valid_id(profile_id):
        return {}
    with db.read() as s:
        rows = s.execute(
            select(
                Checkpoint.node_id,
                Checkpoint.kind,
                Checkpoint.start_pos,
                Checkpoint.end_pos,
                Checkpoint.checksum,
                # A blob of another SQL type is damage, read as NULL (TEXT that
                # is not UTF-8 could not even be read): is_intact() refuses it.
                case(
                    (func.typeof(CheckpointBlob.data) == "blob", CheckpointBlob.data),
                    else_=null(),
                ).label("data"),
                BackendProfile.fingerprint,
                cast(Node.tokens, LargeBinary).label("tokens"),
            )
            .join(CheckpointBlob, CheckpointBlob.checkpoint_id == Checkpoint.id)
            .join(BackendProfile, BackendProfile.id == Checkpoint.profile_id)
            .join(Node, Node.id == Checkpoint.node_id)
            .where(
                Checkpoint.node_id.in_(node_ids), Checkpoint.profile_id == profile_id
            )
        )
        return {row.node_id: StoredCheckpoint(*row) for row in rows}


def twin_root(db: Database, root_id: int, profile_id: int) -> int | None:
    """Another start, of any conversation, whose span is the same tokens as
    ``root_id``'s and which has a checkpoint for the profile; None if none.

    A start's span begins the context, so its KV depends on its tokens
    alone: a new conversation with a system prompt decoded before can take
    that checkpoint instead of decoding the prompt again. The most recently
    used twin is preferred (the least likely to be evicted next).
    """
    if not _valid_id(root_id) or not _valid_id(profile_id):
        return None
    with db.read() as s:
        root = s.get(Node, root_id)
        if root is None or root.parent_id is not None or not root.n_tokens:
            return None
        twin: int | None = s.scalar(
            select(Node.id)
            .join(Checkpoint, Checkpoint.node_id == Node.id)
            .where(
                Node.parent_id.is_(None),
                Node.id != root_id,
                Node.n_tokens == root.n_tokens,
                Node.start_pos == 0,
                Node.tokens == root.tokens,
                Checkpoint.profile_id == profile_id,
                Checkpoint.start_pos == 0,
                Checkpoint.end_pos == root.n_tokens,
            )
            .order_by(Checkpoint.last_used_at.desc())
            .limit(1)
        )
        return twin


def touch_checkpoints(db: Database, node_ids: list[int], profile_id: int) -> None:
    """Mark checkpoints as just used (eviction drops the least recently used).

    Does nothing on a read-only database or while disk space is low: this is
    bookkeeping, and restoring a checkpoint must still work there.
    """
    node_ids = _valid_ids(node_ids)
    if not node_ids or not _valid_id(profile_id) or db.read_only or db.space_low:
        return
    with db.write() as s:
        s.execute(
            update(Checkpoint)
            .where(
                Checkpoint.node_id.in_(node_ids), Checkpoint.profile_id == profile_id
            )
            .values(last_used_at=utcnow())
        )


def defer_active_node(db: Database, conversation_id: int, node_id: int) -> None:
    """Record, without writing now, ``node_id`` as where its conversation continues.

    ``set_active_node`` later: the write runs with the next write
    transaction or at the next idle moment (``Database.defer``), so that a
    restore does not wait for it. A node deleted meanwhile is skipped.
    """
    when = utcnow()
    db.defer(("active node", conversation_id), lambda _old: _ActiveNode(node_id, when))


def defer_touch(db: Database, node_ids: Sequence[int], profile_id: int) -> None:
    """``touch_checkpoints`` later (see ``defer_active_node``), merged with
    the touches still pending."""
    ids = frozenset(_valid_ids(list(node_ids)))
    if not ids or not _valid_id(profile_id):
        return
    when = utcnow()

    def merge(old: Callable[[Session], None] | None) -> _Touch:
        earlier = old.node_ids if isinstance(old, _Touch) else frozenset()
        return _Touch(profile_id, earlier | ids, when)

    db.defer(("checkpoints used", profile_id), merge)


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
class _Touch:
    """A deferred ``touch_checkpoints``."""

    profile_id: int
    node_ids: frozenset[int]
    when: datetime

    def __call__(self, session: Session) -> None:
        session.execute(
            update(Checkpoint)
            .where(
                Checkpoint.node_id.in_(sorted(self.node_ids)),
                Checkpoint.profile_id == self.profile_id,
            )
            .values(last_used_at=self.when)
        )


def load_checkpoint(
    db: Database, node_id: int, profile_id: int
) -> StoredCheckpoint | None:
    """Read one node's checkpoint for the profile and mark it recently used."""
    stored = load_checkpoints(db, [node_id], profile_id).get(node_id)
    if stored is not None:
        touch_checkpoints(db, [node_id], profile_id)
    return stored


@_releases_space
def delete_checkpoints(
    db: Database, node_ids: list[int] | None = None, conversation_id: int | None = None
) -> int:
    """Delete checkpoints of some nodes, one conversation, or all; return bytes freed.

    Messages are never touched: a node without a checkpoint is rebuilt from its
    tokens when needed.
    """
    with db.write(frees_space=True) as s:
        query = select(Checkpoint.id, Checkpoint.byte_size)
        if node_ids is not None:
            query = query.where(Checkpoint.node_id.in_(_valid_ids(node_ids)))
        if conversation_id is not None:
            if not _valid_id(conversation_id):
                return 0
            query = query.join(Node, Node.id == Checkpoint.node_id).where(
                Node.conversation_id == conversation_id
            )
        rows = s.execute(query).all()
        ids = [r.id for r in rows]
        if ids:
            s.execute(delete(Checkpoint).where(Checkpoint.id.in_(ids)))
        return sum(r.byte_size for r in rows)


def total_checkpoint_bytes(db: Database) -> int:
    """Bytes of all stored checkpoints."""
    with db.read() as s:
        return _checkpoint_bytes(s)


# Checkpoint bytes that evict_checkpoints deletes per transaction (at least
# one checkpoint): the file shrinks as it goes, a kill stops it between two
# steps, and a deletion never needs more -wal than this even where SQLite
# zeroes what it deletes (db.py turns that off).
_EVICT_BATCH_BYTES = 32 << 20


def evict_checkpoints(
    db: Database, budget_bytes: int, progress: Progress | None = None
) -> int:
    """Delete least-recently-used checkpoints until the total fits the budget.

    Returns the bytes freed. Runs in batches of ``_EVICT_BATCH_BYTES``, each
    one transaction that deletes the least recently used checkpoints then
    (``release_space``) gives their pages back, so that the -wal file stays
    small and the file shrinks as it goes: evicting 1 GB of a 2 GB file is
    measured by ``tools/scale_space.py``. ``progress(done, total)`` is told
    the checkpoint bytes freed as each step commits; ``total`` is how far
    the checkpoints were over the budget (it grows if more are saved
    meanwhile).
    """
    freed = 0
    while True:
        with db.write(frees_space=True) as s:
            excess = _checkpoint_bytes(s) - budget_bytes
            victims, batch = _least_recently_used(s, min(excess, _EVICT_BATCH_BYTES))
            if victims:
                s.execute(delete(Checkpoint).where(Checkpoint.id.in_(victims)))
        if not victims:
            return freed
        goal = freed + excess
        release_space(
            db, None if progress is None else _scaled(progress, freed, batch, goal)
        )
        freed += batch
        if progress is not None:
            progress(freed, goal)


def _scaled(progress: Progress, done: int, batch: int, total: int) -> Progress:
    """``progress`` told a batch's pages given back as bytes of ``total``."""

    def told(pages: int, of: int) -> None:
        progress(done + batch * pages // max(of, 1), total)

    return told


def _checkpoint_bytes(session: Session) -> int:
    # The conversations' kept sums (storage/counters.py): every checkpoint
    # belongs to one, and there are far fewer of them than checkpoints.
    return int(
        session.execute(
            select(func.coalesce(func.sum(Conversation.checkpoint_bytes), 0))
        ).scalar_one()
    )


def _least_recently_used(session: Session, size: int) -> tuple[list[int], int]:
    """The ids of the least recently used checkpoints that make up ``size``
    bytes (the last one may go past it), and their bytes."""
    victims: list[int] = []
    total = 0
    if size <= 0:
        return victims, total
    for cid, byte_size in session.execute(
        select(Checkpoint.id, Checkpoint.byte_size).order_by(
            Checkpoint.last_used_at, Checkpoint.id
        )
    ):
        victims.append(cid)
        total += byte_size
        if total >= size:
            break
    return victims, total


# --- search -----------------------------------------------------------------------

# Snippets mark each matched word with these two characters (STX, ETX), which
# no message contains: a view escapes the text, then turns them into markup.
MATCH_START = "\x02"
MATCH_END = "\x03"

SEARCH_LIMIT = 50

# Terms after the first few add nothing a person would notice, and bound the
# work a pasted paragraph can cause.
_MAX_TERMS = 16
_MAX_TERM_CHARS = 64
# The shortest last term that is also searched as a prefix (see fts_query).
_MIN_PREFIX = 2
# Words in a snippet of an indexed search, and how many come before the first
# match; characters either side of the first match in a scanned one.
_SNIPPET_WORDS = 24
_SNIPPET_WORDS_BEFORE = 4
_SNIPPET_CHARS = 60
# The answer counts more than the reasoning when ranking (bm25 column weights).
_BM25 = f"bm25({SEARCH_TABLE}, 1.0, 0.5)"


@dataclass(frozen=True)
class SearchHit:
    """A message that matches a search.

    ``snippet`` is a short excerpt with each match between ``MATCH_START`` and
    ``MATCH_END``; ``rank`` orders hits, lower first (bm25; 0 when the
    database has no search index and the messages were scanned).
    """

    conversation_id: int
    conversation_title: str
    node_id: int
    role: str
    snippet: str
    rank: float
    created_at: datetime


def search_terms(query: str) -> list[str]:
    """The words of a search as typed: split on spaces, punctuation-only dropped.

    Nothing the user types is FTS5 syntax: each term is later quoted as a
    literal, so ``"``, ``AND``, ``*`` or ``(`` are only characters.
    """
    terms = [
        term[:_MAX_TERM_CHARS]
        for term in query.split()
        if any(ch.isalnum() for ch in term)
    ]
    return terms[:_MAX_TERMS]


def fts_query(terms: Sequence[str]) -> str:
    """An FTS5 query matching every term, the last one also as a prefix.

    Each term becomes a quoted string (quotes doubled), which FTS5 reads as a
    phrase of the words the tokenizer finds in it, never as an operator.
    The prefix lets results follow the typing: "hel" finds "hello". A
    single character is not a prefix (it would match nearly every message).
    """
    quoted = ['"' + term.replace('"', '""') + '"' for term in terms]
    if quoted and len(terms[-1]) >= _MIN_PREFIX:
        quoted[-1] += "*"
    return " ".join(quoted)


def search(db: Database, query: str, limit: int = SEARCH_LIMIT) -> list[SearchHit]:
    """Messages of every conversation containing every word of ``query``.

    Best matches first (bm25), at most ``limit``. Words match whole words,
    the last one also as a prefix; case and accents are ignored. Any text is
    a valid query: one without a letter or digit finds nothing. A database
    without the search index (a read-only older file, an SQLite without
    FTS5) is scanned instead: same hits for plain words, newest first.
    """
    terms = search_terms(query)
    if not terms or limit <= 0:
        return []
    with db.read() as s:
        if _has_search_index(s):
            return _search_index(s, terms, limit)
        return _scan_messages(s, terms, limit)


def _has_search_index(session: Session) -> bool:
    found = session.execute(
        text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"),
        {"name": SEARCH_TABLE},
    ).first()
    return found is not None


def _search_index(session: Session, terms: list[str], limit: int) -> list[SearchHit]:
    # Ranking needs a score for every match, but a snippet only for the few
    # shown. FTS5's snippet() would be computed for every match before the
    # LIMIT (130 ms for a word in all of 5,000 messages), and asked per row
    # it runs the whole query again per row; so the index only ranks, and
    # the snippets are cut here from the texts of the rows shown.
    statement = text(
        "WITH top(id, score) AS MATERIALIZED ("
        f"SELECT rowid, {_BM25} FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH :query "
        "ORDER BY 2, rowid DESC LIMIT :limit) "
        "SELECT n.id, n.conversation_id, c.title, n.role, n.text, n.thinking, "
        "top.score AS score, n.created_at "
        "FROM top JOIN node n ON n.id = top.id "
        "JOIN conversation c ON c.id = n.conversation_id "
        "ORDER BY top.score, top.id DESC"
    ).columns(created_at=DateTime())
    rows = session.execute(statement, {"query": fts_query(terms), "limit": limit})
    words = _MatchWords(terms)
    return [
        SearchHit(
            r.conversation_id,
            r.title,
            r.id,
            r.role,
            words.snippet(r.text, r.thinking),
            r.score,
            r.created_at,
        )
        for r in rows
    ]


# Letters and digits: where FTS5's unicode61 tokenizer splits words.
_WORD = re.compile(r"[^\W_]+")


def _fold(word: str) -> str:
    # What unicode61 with remove_diacritics compares: no case, no accents.
    if word.isascii():
        return word.lower()
    decomposed = unicodedata.normalize("NFKD", word)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


class _MatchWords:
    """The words of a search as the index matched them, to mark them in text."""

    def __init__(self, terms: list[str]) -> None:
        self._whole: set[str] = set()
        prefixes: list[str] = []
        for i, term in enumerate(terms):
            words = [_fold(word) for word in _WORD.findall(term)]
            # fts_query makes the last word of the last term a prefix.
            if i == len(terms) - 1 and len(term) >= _MIN_PREFIX and words:
                prefixes.append(words.pop())
            self._whole.update(words)
        self._prefixes = tuple(prefixes)

    def matches(self, word: str) -> bool:
        """Whether ``word`` of a message is one the search matched."""
        folded = _fold(word)
        return folded in self._whole or folded.startswith(self._prefixes)

    def snippet(self, *bodies: str) -> str:
        """A few words of the first of ``bodies`` with a match, marked.

        The excerpt starts a few words before the first match. Only the
        words up to the end of the excerpt are looked at: texts can be long.
        """
        for body in bodies:
            excerpt = self._excerpt(body)
            if excerpt is not None:
                return excerpt
        return bodies[0][: 2 * _SNIPPET_CHARS] if bodies else ""

    def _excerpt(self, body: str) -> str | None:
        before: list[tuple[int, int]] = []  # the words just before the match
        words = _WORD.finditer(body)
        for found in words:
            if self.matches(found.group()):
                first = found.span()
                break
            before = [*before[-(_SNIPPET_WORDS_BEFORE - 1) :], found.span()]
        else:
            return None
        spans = [*before, first]
        rest = itertools.islice(words, _SNIPPET_WORDS - len(spans))
        spans += [m.span() for m in rest]
        more = next(words, None) is not None
        pieces: list[str] = []
        at = spans[0][0]
        for a, b in spans:
            if (a, b) == first or ((a, b) > first and self.matches(body[a:b])):
                pieces += [body[at:a], MATCH_START, body[a:b], MATCH_END]
                at = b
        # The excerpt ends with its last word, or with the text's own ending
        # (the full stop after the last word).
        pieces.append(body[at:] if not more else body[at : spans[-1][1]])
        earlier = _WORD.search(body, 0, spans[0][0]) is not None
        return ("…" if earlier else "") + "".join(pieces) + ("…" if more else "")


def _scan_messages(session: Session, terms: list[str], limit: int) -> list[SearchHit]:
    # Substring matching: looser than the index's whole words, which is the
    # side to err on. LIKE ignores case for ASCII letters only.
    query = (
        select(Node.id, Node.conversation_id, Conversation.title, Node.role)
        .add_columns(Node.text, Node.thinking, Node.created_at)
        .join(Conversation, Conversation.id == Node.conversation_id)
        .order_by(Node.id.desc())
        .limit(limit)
    )
    for term in terms:
        pattern = "%" + _escape_like(term) + "%"
        query = query.where(
            or_(
                Node.text.like(pattern, escape="\\"),
                Node.thinking.like(pattern, escape="\\"),
            )
        )
    return [
        SearchHit(
            r.conversation_id,
            r.title,
            r.id,
            r.role,
            _scanned_snippet(r.text if _contains(r.text, terms) else r.thinking, terms),
            0.0,
            r.created_at,
        )
        for r in session.execute(query)
    ]


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _contains(body: str, terms: list[str]) -> bool:
    lowered = body.lower()
    return any(term.lower() in lowered for term in terms)


def _scanned_snippet(body: str, terms: list[str]) -> str:
    """An excerpt around the first match, every match in it marked."""
    lowered = body.lower()
    needles = [term.lower() for term in terms]
    found = [i for i in (lowered.find(n) for n in needles) if i >= 0]
    first = min(found, default=0)
    start = max(0, first - _SNIPPET_CHARS)
    end = min(len(body), first + 2 * _SNIPPET_CHARS)
    pieces: list[str] = []
    at = start
    while at < end:
        hits = [(lowered.find(n, at, end), n) for n in needles]
        hits = [(i, n) for i, n in hits if i >= 0]
        if not hits:
            break
        i, needle = min(hits, key=lambda hit: (hit[0], -len(hit[1])))
        pieces += [body[at:i], MATCH_START, body[i : i + len(needle)], MATCH_END]
        at = i + len(needle)
    pieces.append(body[at:end])
    return ("…" if start else "") + "".join(pieces) + ("…" if end < len(body) else "")


# --- whole conversations (export and import) ----------------------------------------


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


def read_conversation(
    db: Database, conversation_id: int
) -> tuple[ConversationRecord, list[NodeRecord]]:
    """A conversation and all its nodes, parents first, from one snapshot."""
    with db.read() as s:
        conv = _get(s, Conversation, conversation_id)
        nodes = s.execute(
            select(Node)
            .where(Node.conversation_id == conversation_id)
            .order_by(Node.id)
        ).scalars()
        return _conversation_record(conv), [_node_record(n) for n in nodes]


def insert_conversation(
    db: Database,
    *,
    title: str | None,
    system_prompt: str | None,
    reasoning: str | None,
    created_at: datetime | None,
    nodes: Sequence[NewNode],
    active_key: Hashable | None = None,
) -> tuple[ConversationRecord, dict[Hashable, int]]:
    """Insert a whole conversation in one transaction: all of it or nothing.

    ``nodes`` come parents first, the root (no ``parent_key``) first of all;
    the caller has checked the shape (``ValueError`` here is a bug). Returns
    the new conversation and the new id of every key. ``active_key`` names
    where it reopens (the root when None).
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
            )
            s.add(node)
            s.flush()
            ids[new.key] = node.id
        conv.active_node_id = ids.get(active_key, ids[nodes[0].key])
        return _recounted(s, conv), ids


# --- settings ---------------------------------------------------------------------


def get_setting(db: Database, key: str, default: Any = None) -> Any:
    """Return a stored preference, or ``default``."""
    with db.read() as s:
        row = s.get(Setting, key)
        return default if row is None else row.value


def set_setting(db: Database, key: str, value: Any) -> None:
    """Store a preference (any JSON value)."""
    with db.write() as s:
        s.merge(Setting(key=key, value=value))


def _get(session: Session, model: type, ident: int) -> Any:
    _require_valid_id(model, ident)
    obj = session.get(model, ident)
    if obj is None:
        raise NotFound(_not_found_message(model, ident))
    return obj


def _not_found_message(model: type, ident: object) -> str:
    return f"No {model.__name__.lower()} with id {ident}."


def _valid_id(ident: object) -> bool:
    return isinstance(ident, int) and 0 < ident <= _MAX_ID


def _require_valid_id(model: type, ident: object) -> None:
    if not _valid_id(ident):
        raise NotFound(_not_found_message(model, ident))


def _valid_ids(idents: list[int] | tuple[int, ...]) -> list[int]:
    # Ids SQLite could not even bind cannot match a row: leave them out.
    return [ident for ident in idents if _valid_id(ident)]
