"""Bring the engine's context to the end of a path: keep, restore, or reprocess.

The engine remembers which nodes its context holds: the *effective* nodes of
a path (``folding.effective``), whose spans follow each other. To move to
another node we keep the common prefix in memory, drop the rest, then apply
the stored checkpoints of the nodes below the fork in order. The first
checkpoint that is missing, corrupt, made by another backend profile or
refused by llama.cpp stops the restoring: from there the stored tokens are
decoded again (never wrong, only slower) and their checkpoints are written
anew.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from app.conversation import folding
from storage import repository
from storage.db import Database
from storage.repository import NodeRecord, StoredCheckpoint

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine

log = logging.getLogger(__name__)


@dataclass
class SyncStats:
    """What it took to reach a node."""

    kept_tokens: int = 0
    restored_tokens: int = 0
    reprocessed_tokens: int = 0
    restore_ms: float = 0.0
    reprocess_ms: float = 0.0
    checkpoint_bytes_read: int = 0
    checkpoint_bytes_written: int = 0
    fallbacks: list[str] = field(default_factory=list)


class ContextSync:
    """Tracks the nodes held in the engine's context and moves between them.

    ``save_checkpoint(node, data)`` stores a freshly captured checkpoint and
    returns the bytes written; the service decides how (directly or queued).
    ``settle(node_ids)`` returns once those nodes' checkpoints are no longer
    queued; it is called before they are read.
    """

    def __init__(
        self,
        db: Database,
        engine: LlamaEngine,
        profile_id: int,
        save_checkpoint: Callable[[NodeRecord, bytes], int],
        settle: Callable[[list[int]], None] = lambda _node_ids: None,
    ) -> None:
        self._db = db
        self._engine = engine
        self._profile_id = profile_id
        self._save_checkpoint = save_checkpoint
        self._settle = settle
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

    def move_to(self, path: list[NodeRecord]) -> SyncStats:
        """Make the context hold exactly the (effective) spans of ``path``."""
        path = folding.effective(path)
        if self._engine.state_kind == "full":
            return self._move_full(path)
        return self._move_delta(path)

    def _common_prefix(self, path: list[NodeRecord]) -> int:
        shared = 0
        for held, wanted in zip(self.loaded, path, strict=False):
            if held.id != wanted.id or held.tokens != wanted.tokens:
                break
            shared += 1
        return shared

    def _move_delta(self, path: list[NodeRecord]) -> SyncStats:
        stats = SyncStats()
        shared = self._common_prefix(path)
        fork = path[shared - 1].end_pos if shared else 0
        self._engine.truncate(fork)
        if self._engine.n_past != fork:  # the engine could not cut there
            shared, fork = 0, 0
        self.loaded = self.loaded[:shared]
        stats.kept_tokens = fork
        below = path[shared:]
        started = time.perf_counter()
        wanted = [n.id for n in below if n.tokens]
        self._settle(wanted)
        stored = repository.load_checkpoints(self._db, wanted, self._profile_id)
        stats.restore_ms += (time.perf_counter() - started) * 1000
        restored: list[int] = []
        restoring = True
        for node in below:
            restoring = restoring and self._try_restore(
                node, stored.get(node.id), stats
            )
            if restoring:
                self.loaded.append(node)
                restored.append(node.id)
            else:
                self._reprocess(node, stats)
        repository.touch_checkpoints(self._db, restored, self._profile_id)
        return stats

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
        sizes = repository.checkpointed_nodes(
            self._db, [n.id for n in path[shared:]], self._profile_id
        )
        for index in reversed(range(shared, len(path))):
            if path[index].id not in sizes:
                continue
            node = path[index]
            stored = repository.load_checkpoint(self._db, node.id, self._profile_id)
            if self._try_restore(node, stored, stats):
                self.loaded = list(path[: index + 1])
                shared = index + 1
                stats.kept_tokens = 0
                break
            # A refused snapshot leaves the context empty.
            self.loaded, shared, stats.kept_tokens = [], 0, 0
        for node in path[shared:]:
            self._reprocess(node, stats)
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
            stats.fallbacks.append(f"node {node.id}: checkpoint {reason}")
            log.info("node %s: checkpoint %s; reprocessing from here", node.id, reason)
            return False
        assert stored is not None
        stats.restore_ms += elapsed
        stats.restored_tokens += (
            len(node.tokens) if self._engine.state_kind == "delta" else node.end_pos
        )
        stats.checkpoint_bytes_read += len(stored.data)
        return True

    def _reprocess(self, node: NodeRecord, stats: SyncStats) -> None:
        started = time.perf_counter()
        self._engine.decode(node.tokens, node.chunks or None)
        stats.reprocess_ms += (time.perf_counter() - started) * 1000
        stats.reprocessed_tokens += len(node.tokens)
        self.loaded.append(node)
        if node.tokens:
            # Repair: the next visit restores instead of reprocessing.
            data = self._engine.capture(node.start_pos, node.end_pos)
            stats.checkpoint_bytes_written += self._save_checkpoint(node, data)
