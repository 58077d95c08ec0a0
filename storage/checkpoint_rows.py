"""Backend profiles and checkpoints: saved (one or a batch), found, loaded,
touched, deleted, and evicted beyond a budget."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import (
    LargeBinary,
    case,
    cast,
    delete,
    func,
    insert,
    null,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from storage.db import Database
from storage.errors import NotFound
from storage.lookup import get_row, id_batches, valid_id, valid_ids
from storage.records import StoredCheckpoint, pack_tokens
from storage.space import Progress, release_space, releases_space
from storage.tables import (
    BackendProfile,
    Checkpoint,
    CheckpointBlob,
    Conversation,
    Node,
    checkpoint_checksum,
    utcnow,
)

log = logging.getLogger(__name__)


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
        node = get_row(s, Node, node_id)
        if captured_tokens is not None and (node.start_pos, node.tokens) != (
            start_pos,
            pack_tokens(captured_tokens),
        ):
            raise NotFound(f"Node {node_id} changed after its checkpoint was captured.")
        profile = get_row(s, BackendProfile, profile_id)
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
        profile = get_row(s, BackendProfile, profile_id)
        wanted = sorted(set(valid_ids([c.node_id for c in checkpoints])))
        spans: dict[int, tuple[int, bytes]] = {}
        for part in id_batches(wanted):
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
        for part in id_batches(sorted(latest)):
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
    node_ids = valid_ids(node_ids)
    if not node_ids or not valid_id(profile_id):
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
    if not valid_id(node_id):
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
    node_ids = valid_ids(node_ids)
    if not node_ids or not valid_id(profile_id):
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


# What makes ``m`` (with its checkpoint ``c``) a twin of the start ``n``: a
# start of its own, the same tokens, a checkpoint of the whole span (of the
# profile ``:profile``, any profile where it is NULL). In raw SQL, so that
# the tree's rows (tree_reads.tree) mark the starts that have one with the
# very same test.
TWIN_OF_START = """
m.parent_id IS NULL AND m.id != n.id AND m.n_tokens = n.n_tokens
AND m.start_pos = 0 AND m.tokens = n.tokens
AND (:profile IS NULL OR c.profile_id = :profile)
AND c.start_pos = 0 AND c.end_pos = n.n_tokens
"""

_TWIN_ROOT = f"""
SELECT m.id FROM node AS n JOIN node AS m JOIN checkpoint AS c ON c.node_id = m.id
WHERE n.id = :root AND n.parent_id IS NULL AND n.n_tokens > 0 AND {TWIN_OF_START}
ORDER BY c.last_used_at DESC LIMIT 1
"""


def twin_root(db: Database, root_id: int, profile_id: int) -> int | None:
    """Another start, of any conversation, whose span is the same tokens as
    ``root_id``'s and which has a checkpoint for the profile; None if none.

    A start's span begins the context, so its KV depends on its tokens
    alone: a new conversation with a system prompt decoded before can take
    that checkpoint instead of decoding the prompt again. The most recently
    used twin is preferred (the least likely to be evicted next).
    """
    if not valid_id(root_id) or not valid_id(profile_id):
        return None
    with db.read() as s:
        twin: int | None = s.scalar(
            text(_TWIN_ROOT), {"root": root_id, "profile": profile_id}
        )
        return twin


def touch_checkpoints(db: Database, node_ids: list[int], profile_id: int) -> None:
    """Mark checkpoints as just used (eviction drops the least recently used).

    Does nothing on a read-only database or while disk space is low: this is
    bookkeeping, and restoring a checkpoint must still work there.
    """
    node_ids = valid_ids(node_ids)
    if not node_ids or not valid_id(profile_id) or db.read_only or db.space_low:
        return
    with db.write() as s:
        s.execute(
            update(Checkpoint)
            .where(
                Checkpoint.node_id.in_(node_ids), Checkpoint.profile_id == profile_id
            )
            .values(last_used_at=utcnow())
        )


def defer_touch(db: Database, node_ids: Sequence[int], profile_id: int) -> None:
    """``touch_checkpoints`` later (see ``defer_active_node``), merged with
    the touches still pending."""
    ids = frozenset(valid_ids(list(node_ids)))
    if not ids or not valid_id(profile_id):
        return
    when = utcnow()

    def merge(old: Callable[[Session], None] | None) -> _Touch:
        earlier = old.node_ids if isinstance(old, _Touch) else frozenset()
        return _Touch(profile_id, earlier | ids, when)

    db.defer(("checkpoints used", profile_id), merge)


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


@releases_space
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
            query = query.where(Checkpoint.node_id.in_(valid_ids(node_ids)))
        if conversation_id is not None:
            if not valid_id(conversation_id):
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
