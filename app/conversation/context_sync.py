"""Bring the engine's context to the end of a path: keep, restore, or reprocess.

The engine remembers which nodes its context holds: the *effective* nodes of
a path (``folding.effective``), whose spans follow each other. To move to
another node we keep the common prefix in memory, drop the rest, then apply
the stored checkpoints of the nodes below the fork in order. The first
checkpoint that is missing, corrupt, made by another backend profile or
refused by llama.cpp stops the restoring: from there the stored tokens are
decoded again (never wrong, only slower) and their checkpoints are written
anew.

How they are decoded again depends on what relies on their cells. Replaying
the batch sizes a span was first decoded in (one token at a time for a
generated reply) gives the same cells bit for bit, which checkpoints further
down the tree were made on top of: while any node below holds a checkpoint
of this profile, the replay is exact. When none does (checkpoints cleared,
evicted, or a new backend profile: the usual reasons to reprocess) the spans
are decoded in full batches, about twice as fast here
(``tools/reprocess_speed.py``), and the batch sizes used are recorded, so
that what the new checkpoints hold is again what a replay gives.

The checkpoints made on the way are saved in batches where the service can
write several in one transaction (``save_checkpoints``): the first visit of
an imported path of a thousand nodes would otherwise commit a thousand times.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from app.backend.values import StateKind
from app.conversation import folding, profile_difference
from app.conversation.batches import Batches, redecode
from app.conversation.results import SyncStats
from app.conversation.tree_cache import TreeCache
from storage import checkpoint_rows, node_rows
from storage.checkpoint_reader import CheckpointReader
from storage.checkpoint_refs import checkpoint_refs
from storage.checkpoint_rows import CapturedCheckpoint
from storage.db import Database
from storage.records import NodeRecord, StoredCheckpoint
from storage.tree_reads import CheckpointRef

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine

log = logging.getLogger(__name__)

# Checkpoint bytes a reprocess holds before saving them in one transaction
# (at least one checkpoint): few commits, and a bounded amount in memory.
SAVE_BATCH_BYTES = 32 << 20

Captured = Sequence[tuple[NodeRecord, bytes]]
"""Checkpoints just captured, each with its node."""


def write_batches(
    db: Database, profile_id: int, kind: str
) -> Callable[[Captured], int]:
    """A ``save_checkpoints`` that writes each batch at once, in one transaction
    (for a service whose checkpoints are not queued)."""

    def save(captured: Captured) -> int:
        return sum(
            checkpoint_rows.save_checkpoints(
                db,
                profile_id,
                [
                    CapturedCheckpoint(
                        node.id, kind, node.start_pos, node.end_pos, data
                    )
                    for node, data in captured
                ],
            )
        )

    return save


class ContextSync:
    """Tracks the nodes held in the engine's context and moves between them.

    ``save_checkpoint(node, data)`` stores a freshly captured checkpoint and
    returns the bytes written; the service decides how (directly or queued).
    ``tree`` is the service's cache of the conversation's tree.
    ``settle(node_ids)`` returns once those nodes' checkpoints are no longer
    queued; it is called before they are read. ``save_checkpoints(captured)``,
    where given, stores several checkpoints at once and returns the bytes
    written; a reprocess then saves its checkpoints in batches of about
    ``SAVE_BATCH_BYTES``.
    """

    def __init__(
        self,
        db: Database,
        engine: LlamaEngine,
        profile_id: int,
        save_checkpoint: Callable[[NodeRecord, bytes], int],
        tree: TreeCache,
        settle: Callable[[list[int]], None] = lambda _node_ids: None,
        save_checkpoints: Callable[[Captured], int] | None = None,
    ) -> None:
        self._db = db
        self._engine = engine
        self._profile_id = profile_id
        self._save_checkpoint = save_checkpoint
        self._tree = tree
        self._settle = settle
        self._save_checkpoints = save_checkpoints
        self._reader = CheckpointReader()
        self.loaded: list[NodeRecord] = []

    def forget(self) -> None:
        """Empty the context (after an error left it in an unknown state)."""
        self._engine.truncate(0)
        self.loaded = []

    def drop(self, node_id: int) -> None:
        """Forget ``node_id`` and what follows it, keeping the prefix above it."""
        held = [n.id for n in self.loaded]
        if node_id in held:
            index = held.index(node_id)
            self._engine.truncate(self.loaded[index].start_pos)
            self.loaded = self.loaded[:index] if self._engine.n_past else []

    def append(self, node: NodeRecord) -> None:
        """Record that ``node``'s span was just decoded at the end of the context."""
        self.loaded.append(node)

    def move_to(
        self, path: list[NodeRecord], then: NodeRecord | None = None
    ) -> SyncStats:
        """Make the context hold exactly the (effective) spans of ``path``.

        ``then`` is a new node about to be decoded after them. Where the
        context holds, right after the path, a span whose first batch is
        the same tokens as ``then``'s first batch (another message's role
        header under the same start: see ``batches``), those cells are what
        decoding that batch gives, and they stay: the context then ends
        inside ``then``'s span, and ``stats.kept_tokens`` counts them.
        """
        path = folding.effective(path)
        if self._engine.state_kind is StateKind.FULL:
            return self._move_full(path)
        return self._move_delta(path, then)

    def _common_prefix(self, path: list[NodeRecord]) -> int:
        shared = 0
        for held, wanted in zip(self.loaded, path, strict=False):
            same = held is wanted or (
                held.id == wanted.id and held.tokens == wanted.tokens
            )
            if not (same or (shared == 0 and _twin_starts(held, wanted))):
                break
            shared += 1
        return shared

    def _move_delta(self, path: list[NodeRecord], then: NodeRecord | None) -> SyncStats:
        stats = SyncStats()
        shared = self._common_prefix(path)
        fork = path[shared - 1].end_pos if shared else 0
        head = self._held_head(then, shared) if shared == len(path) else 0
        if head:
            self._engine.truncate(fork + head)
            if self._engine.n_past == fork + head:
                self.loaded = self.loaded[:shared]
                stats.kept_tokens = fork + head
                return stats
        self._engine.truncate(fork)
        if self._engine.n_past != fork:  # the engine could not cut there
            shared, fork = 0, 0
        self.loaded = self.loaded[:shared]
        stats.kept_tokens = fork
        below = path[shared:]
        restored = self._restore_deltas(below, stats)
        self._reprocess_all(below[len(restored) :], stats)
        checkpoint_rows.defer_touch(
            self._db, [n.id for n in restored if n.tokens], self._profile_id
        )
        return stats

    def _held_head(self, then: NodeRecord | None, kept: int) -> int:
        """How many cells of ``then``'s first batch the context holds after
        its first ``kept`` nodes: those of another span there whose first
        batch was the same tokens (0: none)."""
        if then is None or len(self.loaded) <= kept:
            return 0
        held = self.loaded[kept]
        if held.start_pos != then.start_pos or held.vocab_id != then.vocab_id:
            return 0
        mine, theirs = Batches.of(then.chunks), Batches.of(held.chunks)
        # Only a batch of the span's own tokens, with more of them after it.
        if not (
            mine.describe(len(then.tokens))
            and theirs.describe(len(held.tokens))
            and mine.lead == theirs.lead == 0
            and len(mine.sizes) > 1
            and len(theirs.sizes) > 1
        ):
            return 0
        size = mine.sizes[0]
        if theirs.sizes[0] != size or held.tokens[:size] != then.tokens[:size]:
            return 0
        return size

    def _restore_deltas(
        self, below: list[NodeRecord], stats: SyncStats
    ) -> list[NodeRecord]:
        """Restore the longest run of ``below`` that has good checkpoints.

        Returns the nodes restored (a prefix of ``below``), which are then
        held; the first node of the rest gets the reason in ``stats``.
        """
        started = time.perf_counter()
        # A checkpoint still in the writer's queue is waited for (read-your-writes).
        self._settle([n.id for n in below if n.tokens])
        planned = self._planned(below, stats)
        engine = self._engine
        engine.begin_deltas([len(n.tokens) for n, ref in planned if ref])
        reader = self._reader
        reader.times.read_ms = reader.times.verify_ms = 0.0
        reader.reserve(max((ref.byte_size for _n, ref in planned if ref), default=0))
        apply_ms = 0.0
        staged: list[NodeRecord] = []
        with reader.reading(self._db) as reads:
            for node, ref in planned:
                if ref is not None:
                    tokens = self._tree.packed_tokens(node)
                    data = reads.verified(ref, self._profile, tokens)
                    if isinstance(data, str):
                        self._fallback(node, data, stats)
                        break
                    applying = time.perf_counter()
                    ok = engine.add_delta(data, node.start_pos, node.end_pos)
                    apply_ms += (time.perf_counter() - applying) * 1000
                    if not ok:
                        self._fallback(node, "rejected by llama.cpp", stats)
                        break
                staged.append(node)
        applying = time.perf_counter()
        applied = engine.end_deltas()
        apply_ms += (time.perf_counter() - applying) * 1000
        # What the engine holds now tells which staged nodes made it.
        restored = [n for n in staged if n.end_pos <= engine.n_past]
        if not applied:
            self._fallback(staged[len(restored)], "rejected by llama.cpp", stats)
        self.loaded += restored
        stats.restored_tokens += sum(len(n.tokens) for n in restored)
        stats.checkpoint_bytes_read += sum(
            ref.byte_size for _node, ref in planned[: len(restored)] if ref
        )
        stats.read_ms += reader.times.read_ms
        stats.verify_ms += reader.times.verify_ms
        stats.apply_ms += apply_ms
        stats.restore_ms += (time.perf_counter() - started) * 1000
        return restored

    def _planned(
        self, below: list[NodeRecord], stats: SyncStats
    ) -> list[tuple[NodeRecord, CheckpointRef | None]]:
        """The nodes of ``below`` up to the first one without a usable
        checkpoint, each with where its checkpoint is (None: an empty span)."""
        if below:
            # A write since the path was read (a span rendered again, its
            # checkpoint dropped) must not leave the index behind.
            self._tree.refresh(below[-1].id)
        planned: list[tuple[NodeRecord, CheckpointRef | None]] = []
        for node in below:
            ref = self._tree.checkpoint(node.id) if node.tokens else None
            if ref is None and node.tokens and node.parent_id is None:
                ref = self._twin_checkpoint(node)
            if node.tokens and ref is None:
                self._fallback(node, self._missing_reason(node), stats)
                break
            if ref is not None and (
                ref.kind != self._engine.state_kind
                or (ref.start_pos, ref.end_pos) != (node.start_pos, node.end_pos)
            ):
                self._fallback(node, "stale (made for a different span)", stats)
                break
            planned.append((node, ref))
        return planned

    def _twin_checkpoint(self, root: NodeRecord) -> CheckpointRef | None:
        """The checkpoint of another start with the same span (the same
        system prompt, decoded in another conversation), which serves this
        one as it is: a start's cells depend on its tokens alone, and its
        checksum binds the twin's id and these same tokens."""
        twin = checkpoint_rows.twin_root(self._db, root.id, self._profile_id)
        if twin is None:
            return None
        refs, _profile = checkpoint_refs(self._db, [twin], self._profile_id)
        return refs.get(twin)

    @property
    def _profile(self) -> str:
        """The loaded profile's fingerprint (what checksums bind)."""
        return self._engine.profile_fingerprint

    def _missing_reason(self, node: NodeRecord) -> str:
        """Why ``node`` has no checkpoint here: "missing", or what differs in
        the profile that made the one it has (another device, another model)."""
        for details in checkpoint_rows.other_checkpoint_profiles(
            self._db, node.id, self._profile_id
        ):
            why = profile_difference.difference(self._engine.profile_details, details)
            if why:
                return f"{why}; not applied here"
        return "missing"

    def _fallback(self, node: NodeRecord, reason: str, stats: SyncStats) -> None:
        stats.fallbacks.append(f"node {node.id}: checkpoint {reason}")
        log.info("node %s: checkpoint %s; reprocessing from here", node.id, reason)

    def _move_full(self, path: list[NodeRecord]) -> SyncStats:
        # Whole-state snapshots cannot be cut at a position: keep what is held
        # only if the path extends it, then jump to the deepest snapshot below.
        stats = SyncStats()
        shared = self._common_prefix(path)
        if shared < len(self.loaded):
            self.forget()
            shared = 0
        stats.kept_tokens = path[shared - 1].end_pos if shared else 0
        self._settle([n.id for n in path[shared:]])
        sizes = checkpoint_rows.checkpointed_nodes(
            self._db, [n.id for n in path[shared:]], self._profile_id
        )
        for index in reversed(range(shared, len(path))):
            if path[index].id not in sizes:
                continue
            node = path[index]
            stored = checkpoint_rows.load_checkpoints(
                self._db, [node.id], self._profile_id
            ).get(node.id)
            if self._try_restore(node, stored, stats):
                checkpoint_rows.defer_touch(self._db, [node.id], self._profile_id)
                self.loaded = list(path[: index + 1])
                shared = index + 1
                stats.kept_tokens = 0
                break
            # A refused snapshot leaves the context empty.
            self.loaded, shared, stats.kept_tokens = [], 0, 0
        self._reprocess_all(path[shared:], stats)
        return stats

    def _try_restore(
        self, node: NodeRecord, stored: StoredCheckpoint | None, stats: SyncStats
    ) -> bool:
        if not node.tokens:
            return True
        started = time.perf_counter()
        reason = None
        if stored is None:
            reason = "missing"
        elif not stored.is_intact():
            reason = "corrupt (checksum mismatch)"
        elif stored.kind != self._engine.state_kind or (
            stored.start_pos,
            stored.end_pos,
        ) != (node.start_pos, node.end_pos):
            reason = "stale (made for a different span)"
        elif not self._engine.restore(stored.data, node.start_pos, node.end_pos):
            reason = "rejected by llama.cpp"
        elapsed = (time.perf_counter() - started) * 1000
        if reason is not None:
            self._fallback(node, reason, stats)
            return False
        assert stored is not None
        stats.restore_ms += elapsed
        stats.apply_ms += elapsed
        delta = self._engine.state_kind is StateKind.DELTA
        stats.restored_tokens += len(node.tokens) if delta else node.end_pos
        stats.checkpoint_bytes_read += len(stored.data)
        return True

    def _reprocess_all(self, nodes: list[NodeRecord], stats: SyncStats) -> None:
        """Decode ``nodes`` again, exactly where checkpoints below rely on it."""
        if not nodes:
            return
        exact = self._relied_on(nodes)
        rebatched: dict[int, list[int]] = {}
        captured: list[tuple[NodeRecord, bytes]] = []
        held = 0
        try:
            for node in nodes:
                used, data = self._reprocess(node, stats, exact)
                if node.tokens and used != list(node.chunks):
                    rebatched[node.id] = used
                if data is None:
                    continue
                if self._save_checkpoints is None:
                    stats.checkpoint_bytes_written += self._save_checkpoint(node, data)
                    continue
                captured.append((node, data))
                held += len(data)
                if held >= SAVE_BATCH_BYTES:
                    self._save_captured(captured, stats)
                    held = 0
        except BaseException:
            # What was decoded before the failure keeps its checkpoints, as
            # when each was saved at once; the failure is the one to report.
            try:
                self._save_captured(captured, stats)
            except Exception as exc:
                log.warning("checkpoints of a failed reprocess not saved: %s", exc)
            raise
        self._save_captured(captured, stats)
        if rebatched:
            # One statement's worth of reading for all of them (an imported
            # path records the batches of every node).
            node_rows.update_nodes(
                self._db,
                {node_id: {"chunks": used} for node_id, used in rebatched.items()},
            )

    def _save_captured(
        self, captured: list[tuple[NodeRecord, bytes]], stats: SyncStats
    ) -> None:
        # Save the checkpoints held back, in one go, and forget them.
        if captured and self._save_checkpoints is not None:
            stats.checkpoint_bytes_written += self._save_checkpoints(list(captured))
        captured.clear()

    def _relied_on(self, nodes: list[NodeRecord]) -> bool:
        """Whether a checkpoint under the first of ``nodes``, other than
        theirs (which are made anew), was made on top of their cells."""
        first = nodes[0]
        self._tree.refresh(first.id)
        others = set(self._tree.below(first.id)) - {n.id for n in nodes}
        # A checkpoint still queued counts too: it lands in the index.
        self._settle(sorted(others))
        self._tree.refresh(first.id)
        return any(self._tree.checkpoint(node) is not None for node in others)

    def _reprocess(
        self, node: NodeRecord, stats: SyncStats, exact: bool
    ) -> tuple[list[int], bytes | None]:
        # Decode one span; returns the batch sizes used and its new checkpoint
        # (None for an empty span), which the caller saves.
        started = time.perf_counter()
        before = self.loaded[-1] if self.loaded else None
        if exact and redecode(self._engine, node, before):
            used = list(node.chunks)
        else:
            used = self._engine.decode(node.tokens)
        stats.reprocess_ms += (time.perf_counter() - started) * 1000
        stats.reprocessed_tokens += len(node.tokens)
        # Held as decoded now: a span kept later is judged by its batches.
        self.loaded.append(
            node if used == list(node.chunks) else replace(node, chunks=tuple(used))
        )
        if not node.tokens:
            return used, None
        # Repair: the next visit restores instead of reprocessing.
        return used, self._engine.capture(node.start_pos, node.end_pos)


def _twin_starts(held: NodeRecord, wanted: NodeRecord) -> bool:
    """Whether two starts (roots) hold the same span: the context's first
    cells depend on their tokens alone, so a start of another conversation
    with the same system prompt is kept rather than restored."""
    return (
        held.parent_id is None
        and wanted.parent_id is None
        and held.start_pos == wanted.start_pos == 0
        and bool(held.tokens)
        and held.tokens == wanted.tokens
        and held.vocab_id == wanted.vocab_id
    )
