"""The real engine and service with meters attached.

``TimedEngine`` adds up the time spent inside llama.cpp's KV-state calls, so
the benchmark can tell backend time from SQLite and Python time.
``BenchService`` is the shipped ``ConversationService`` given a metered
checkpoint sink through its constructor: checkpoints are queued to the
shipped ``CheckpointWriter``, written at once on the generating thread (how
Arbor wrote them before, kept as the reference the overhead scenario
compares with), or not made at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation.checkpoint_writer import CheckpointWriter, DirectWriter
from app.conversation.service import ConversationService
from storage.db import Database
from storage.records import NodeRecord
from storage.write_behind import WriteFailure

# Checkpoint modes of BenchService.
OFF = "off"  # no capture, no write: what an app without checkpoints does
SYNC = "sync"  # written to SQLite on the generating thread (the earlier way)
QUEUED = "queued"  # as shipped: captured there, written by the writer thread
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
    write_ms: float  # writing it (sync) or queueing it (queued)


class BenchSink:
    """A checkpoint sink that meters the generating thread's part of each write.

    Every ``save`` is recorded as a ``NodeWrite``; ``waited_ms`` adds up the
    time spent in ``settle`` (a send waits for its message's checkpoint).
    """

    def __init__(self, db: Database, engine: TimedEngine) -> None:
        self.mode = QUEUED
        self.writes: list[NodeWrite] = []
        self.waited_ms = 0.0
        self._engine = engine
        self._direct = DirectWriter(db)
        self._queued = CheckpointWriter(db)

    def save(self, node: NodeRecord, profile_id: int, kind: str, data: bytes) -> int:
        """Write, queue or skip the checkpoint as the mode says, and time it."""
        if self.mode == OFF:
            return 0
        started = time.perf_counter()
        sink = self._queued if self.mode == QUEUED else self._direct
        written = sink.save(node, profile_id, kind, data)
        self.writes.append(
            NodeWrite(
                mode=self.mode,
                role=node.role,
                tokens=len(node.tokens),
                bytes=written,
                capture_ms=self._engine.times.last_capture_ms,
                write_ms=(time.perf_counter() - started) * 1000,
            )
        )
        return written

    def settle(self, node_ids: Iterable[int]) -> None:
        """Wait for queued writes of ``node_ids``, timed (only queued ones can be)."""
        if self.mode != QUEUED:
            return
        started = time.perf_counter()
        self._queued.settle(node_ids)
        self.waited_ms += (time.perf_counter() - started) * 1000

    def flush(self) -> None:
        """Wait for every queued write."""
        self._queued.flush()

    def take_failure(self) -> WriteFailure | None:
        """The queued writer's first unreported failure."""
        return self._queued.take_failure()

    def close(self) -> None:
        """Stop the writer thread after writing what is queued."""
        self._queued.close()


class BenchService(ConversationService):
    """``ConversationService`` with a ``BenchSink`` and a ``TimedEngine``.

    Parameters
    ----------
    db
        The scratch database.
    engine
        A ``TimedEngine``; its ``capturing`` flag follows the mode.
    """

    def __init__(self, db: Database, engine: TimedEngine) -> None:
        self.sink = BenchSink(db, engine)
        super().__init__(db, engine, self.sink)
        self.timed_engine = engine

    @property
    def writes(self) -> list[NodeWrite]:
        """Every checkpoint write so far, as the generating thread saw it."""
        return self.sink.writes

    def set_mode(self, mode: str) -> None:
        """Choose how checkpoints are written from now on (one of ``MODES``)."""
        if mode not in MODES:
            raise ValueError(f"unknown checkpoint mode {mode!r}")
        self.flush_checkpoints()
        self.sink.mode = mode
        self.timed_engine.capturing = mode != OFF
