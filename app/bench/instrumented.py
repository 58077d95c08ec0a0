"""The real engine and service with meters attached, and the queued-writer prototype.

``TimedEngine`` adds up the time spent inside llama.cpp's KV-state calls, so
the benchmark can tell backend time from SQLite and Python time.
``BenchService`` is the shipped ``ConversationService`` with its checkpoint
writer replaced through the seam ``ContextSync`` was built with (the writer is
a callable "so the service decides how (directly or queued)"): it can write
as shipped (timed), not at all, or through a background thread. The last mode
is a prototype of a proposed change to the service, measured here only.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from storage import repository
from storage.db import Database
from storage.repository import NodeRecord

# Checkpoint modes of BenchService.
SYNC = "sync"  # as shipped: written to SQLite on the calling (decode) thread
OFF = "off"  # no capture, no write: what an app without checkpoints does
QUEUED = "queued"  # captured on the decode thread, written by a writer thread
MODES = (OFF, SYNC, QUEUED)


@dataclass
class BackendTimes:
    """Milliseconds spent inside the engine's KV-state calls since the last reset."""

    restore_ms: float = 0.0
    truncate_ms: float = 0.0
    capture_ms: float = 0.0
    last_capture_ms: float = 0.0

    @property
    def switch_ms(self) -> float:
        """Backend time of a move: dropping cells plus applying deltas."""
        return self.restore_ms + self.truncate_ms


class TimedEngine(LlamaEngine):
    """A ``LlamaEngine`` that meters ``restore``, ``truncate`` and ``capture``.

    Set ``capturing`` to False to make ``capture`` return no bytes, which is
    how the benchmark turns checkpointing off without touching the service.
    """

    def __init__(self, model_path: Path, settings: BackendSettings) -> None:
        super().__init__(model_path, settings)
        self.times = BackendTimes()
        self.capturing = True
        self._inside = False

    def reset_times(self) -> None:
        """Start metering from zero."""
        self.times = BackendTimes()

    def restore(self, data: bytes | memoryview, start: int, end: int) -> bool:
        """Time ``LlamaEngine.restore``."""
        restore = super().restore
        return self._restoring(lambda: restore(data, start, end))

    def add_delta(self, data: bytes | memoryview, start: int, end: int) -> bool:
        """Time ``LlamaEngine.add_delta`` (combining, or applying, a delta)."""
        add_delta = super().add_delta
        return self._restoring(lambda: add_delta(data, start, end))

    def end_deltas(self) -> bool:
        """Time ``LlamaEngine.end_deltas``."""
        return self._restoring(super().end_deltas)

    def _restoring(self, call: Callable[[], bool]) -> bool:
        # add_delta may call restore: only the outermost call is counted.
        if self._inside:
            return call()
        self._inside = True
        started = time.perf_counter()
        try:
            return call()
        finally:
            self._inside = False
            self.times.restore_ms += (time.perf_counter() - started) * 1000

    def truncate(self, pos: int) -> None:
        """Time ``LlamaEngine.truncate``."""
        started = time.perf_counter()
        try:
            super().truncate(pos)
        finally:
            self.times.truncate_ms += (time.perf_counter() - started) * 1000

    def capture(self, start: int, end: int) -> bytes:
        """Time ``LlamaEngine.capture``, or return no bytes when not capturing."""
        if not self.capturing:
            self.times.last_capture_ms = 0.0
            return b""
        started = time.perf_counter()
        try:
            return super().capture(start, end)
        finally:
            self.times.last_capture_ms = (time.perf_counter() - started) * 1000
            self.times.capture_ms += self.times.last_capture_ms


@dataclass(frozen=True)
class NodeWrite:
    """What checkpointing one node cost on the thread that generated it."""

    mode: str
    role: str
    tokens: int
    bytes: int
    capture_ms: float
    write_ms: float


@dataclass
class _WriterThread:
    """One background thread that writes queued checkpoints in order."""

    db: Database
    profile_id: int
    kind: str
    pending: queue.Queue[tuple[NodeRecord, bytes] | None] = field(
        default_factory=queue.Queue
    )
    thread: threading.Thread | None = None

    def put(self, node: NodeRecord, data: bytes) -> None:
        if self.thread is None:
            self.thread = threading.Thread(
                target=self._run, name="checkpoint-writer", daemon=True
            )
            self.thread.start()
        self.pending.put((node, data))

    def _run(self) -> None:
        while (item := self.pending.get()) is not None:
            node, data = item
            try:
                repository.save_checkpoint(
                    self.db,
                    node.id,
                    self.profile_id,
                    self.kind,
                    node.start_pos,
                    node.end_pos,
                    data,
                )
            finally:
                self.pending.task_done()
        self.pending.task_done()

    def stop(self) -> None:
        if self.thread is not None:
            self.pending.put(None)
            self.thread.join()
            self.thread = None


class BenchService(ConversationService):
    """``ConversationService`` whose checkpoint writes are timed, skipped or queued.

    Parameters
    ----------
    db
        The scratch database.
    engine
        A ``TimedEngine``; its ``capturing`` flag follows the mode.

    Notes
    -----
    In ``QUEUED`` mode a checkpoint is not readable until the writer got to
    it: call ``drain`` before restoring anything written in that mode. The
    real change would also serve pending blobs from memory (see the report).
    """

    def __init__(self, db: Database, engine: TimedEngine) -> None:
        super().__init__(db, engine)
        self.timed_engine = engine
        self.mode = SYNC
        self.writes: list[NodeWrite] = []
        assert self.profile_id is not None
        self._writer = _WriterThread(db, self.profile_id, engine.state_kind)

    def set_mode(self, mode: str) -> None:
        """Choose how checkpoints are written from now on (one of ``MODES``)."""
        if mode not in MODES:
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        self.drain()
        self.mode = mode
        self.timed_engine.capturing = mode != OFF

    def drain(self) -> None:
        """Wait until every queued checkpoint is in SQLite."""
        self._writer.pending.join()

    def close(self) -> None:
        """Stop the writer thread (after writing what is queued)."""
        self._writer.stop()

    def _store_checkpoint(self, node: NodeRecord, data: bytes) -> int:
        if self.mode == OFF:
            return 0
        started = time.perf_counter()
        if self.mode == QUEUED:
            self._writer.put(node, data)
            written = len(data)
        else:
            written = super()._store_checkpoint(node, data)
        self.writes.append(
            NodeWrite(
                mode=self.mode,
                role=node.role,
                tokens=len(node.tokens),
                bytes=written,
                capture_ms=self.timed_engine.times.last_capture_ms,
                write_ms=(time.perf_counter() - started) * 1000,
            )
        )
        return written
