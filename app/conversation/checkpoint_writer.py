"""Where the service's checkpoints go: written at once, or queued to a thread.

Storing a checkpoint is one SQLite transaction holding the node's KV bytes
(about 22 KiB per token on the starter model: 140 ms for a 517-token span).
Done on the thread that generates, that is time the person waits for. The
``CheckpointWriter`` takes the captured bytes and writes them on its own
thread, in the order they came, so the reply goes on while SQLite works.
``DirectWriter`` writes at once on the caller's thread: the plain default,
with nothing to flush or close.

What a queued writer promises, and why:

- **Read-your-writes by waiting.** Before checkpoints are read, the reader
  calls ``settle(node_ids)``: it returns once no write for those nodes is
  queued or running. Waiting (rather than serving the queued bytes from
  memory) keeps one read path: what is restored is exactly what is stored,
  verified like any other checkpoint, and a write that failed shows up as a
  missing checkpoint (the node is then rebuilt, as after a restart). The
  wait is rare and short: the nodes just written are usually the ones the
  context still holds, which are kept, not read.
- **Bounded memory.** ``save`` blocks while the queue holds more than
  ``max_queued_bytes`` (back-pressure); a single checkpoint larger than that
  still goes in, alone.
- **Failures are reported, not lost.** A write that fails (disk full,
  read-only, locked) is logged and kept; ``take_failure`` hands it to the
  service, which raises it on its next call (see ``ConversationService``).
  An unexpected exception (a bug) is kept the same way and raised as it is.
- **Deleted nodes are no failure.** A write for a node deleted meanwhile (a
  branch deleted by this or another process) finds no node and is dropped:
  ``save_checkpoint`` reads the node in the same transaction it writes in,
  so nothing is resurrected. A node whose span changed since its capture
  (re-placed for another model, another process) is skipped the same way:
  the writer passes the tokens it captured, and that transaction compares.
- **Flush before what must see every write.** ``flush`` waits for the
  queue to empty; the service calls it before deleting, evicting, clearing
  and closing, and ``close`` stops the thread after a last flush.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from storage import checkpoint_rows
from storage.db import Database
from storage.errors import NotFound
from storage.records import NodeRecord

log = logging.getLogger(__name__)

# Most bytes waiting in the queue before ``save`` blocks: about 2,900 tokens
# of the starter model, more than any one reply, bounded whatever the model.
MAX_QUEUED_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class WriteFailure:
    """A checkpoint write that failed: the node and what went wrong."""

    node_id: int
    error: Exception
    # Further writes that failed before this one was reported.
    more: int = 0


class CheckpointSink(Protocol):
    """What the service needs from whatever stores its checkpoints."""

    def save(self, node: NodeRecord, profile_id: int, kind: str, data: bytes) -> int:
        """Store ``node``'s checkpoint (or queue it); return its size in bytes."""
        ...

    def settle(self, node_ids: Iterable[int]) -> None:
        """Return once no write for ``node_ids`` is pending."""
        ...

    def flush(self) -> None:
        """Return once every write asked for so far is done (or failed)."""
        ...

    def take_failure(self) -> WriteFailure | None:
        """The first write failure not yet reported, if any (and forget it)."""
        ...

    def close(self) -> None:
        """Finish every write, then release what the sink holds."""
        ...


def _write(
    db: Database,
    node: NodeRecord,
    profile_id: int,
    kind: str,
    data: bytes,
    captured_tokens: Sequence[int] | None = None,
) -> int:
    # Named, so that the service's tree cache reads only this node's
    # checkpoint again, not the whole tree (``Database.changing``).
    with db.changing([node.id]):
        return checkpoint_rows.save_checkpoint(
            db,
            node.id,
            profile_id,
            kind,
            node.start_pos,
            node.end_pos,
            data,
            captured_tokens,
        )


class DirectWriter:
    """Writes each checkpoint at once, on the caller's thread.

    A failure raises from ``save`` itself, so there is never one to take.
    """

    def __init__(self, db: Database) -> None:
        self._db = db

    def save(self, node: NodeRecord, profile_id: int, kind: str, data: bytes) -> int:
        """Write ``node``'s checkpoint now; return its size."""
        return _write(self._db, node, profile_id, kind, data)

    def settle(self, node_ids: Iterable[int]) -> None:
        """Nothing is ever pending."""

    def flush(self) -> None:
        """Nothing is ever pending."""

    def take_failure(self) -> WriteFailure | None:
        """Failures raised from ``save``: none to take."""
        return None

    def close(self) -> None:
        """Nothing to release."""


@dataclass(frozen=True)
class _Job:
    node: NodeRecord
    profile_id: int
    kind: str
    data: bytes = field(repr=False)


class CheckpointWriter:
    """Writes checkpoints on one background thread, in the order they came.

    Parameters
    ----------
    db
        The database to write to (each write is its own transaction).
    max_queued_bytes
        Back-pressure: ``save`` waits while more than this is queued.

    The thread starts with the first ``save`` and ends with ``close``. It is
    a daemon thread, so a process that forgets ``close`` still exits; what
    was queued is then lost, which costs a rebuild, never a message.
    """

    def __init__(self, db: Database, max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        self._db = db
        self._max_queued_bytes = max_queued_bytes
        # One lock guards everything below; waiters are woken on every change.
        self._changed = threading.Condition()
        self._queue: deque[_Job] = deque()
        # Bytes queued or being written, and writes pending per node id.
        self._queued_bytes = 0
        self._pending: Counter[int] = Counter()
        self._failure: WriteFailure | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    @property
    def pending_bytes(self) -> int:
        """Bytes of checkpoints queued or being written."""
        with self._changed:
            return self._queued_bytes

    def save(self, node: NodeRecord, profile_id: int, kind: str, data: bytes) -> int:
        """Queue ``node``'s checkpoint; return its size.

        Blocks while the queue is over its bound. Raises ``RuntimeError``
        after ``close`` (a bug: nothing may write through a closed sink).
        """
        with self._changed:
            if self._closing:
                raise RuntimeError("checkpoint writer used after close")
            while self._queued_bytes and (
                self._queued_bytes + len(data) > self._max_queued_bytes
            ):
                self._changed.wait()
            self._queue.append(_Job(node, profile_id, kind, data))
            self._queued_bytes += len(data)
            self._pending[node.id] += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="arbor-checkpoint-writer", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()
        return len(data)

    def settle(self, node_ids: Iterable[int]) -> None:
        """Wait until no write for any of ``node_ids`` is queued or running."""
        wanted = set(node_ids)
        with self._changed:
            self._changed.wait_for(lambda: wanted.isdisjoint(self._pending))

    def flush(self) -> None:
        """Wait until every queued write is done (or failed)."""
        with self._changed:
            self._changed.wait_for(lambda: not self._pending)

    def take_failure(self) -> WriteFailure | None:
        """The first failure since the last call, or None; it is then forgotten."""
        with self._changed:
            failure, self._failure = self._failure, None
            return failure

    def close(self) -> None:
        """Write what is queued, then stop the thread. Safe to call twice."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._closing)
                if not self._queue:
                    return  # closing, and everything is written
                job = self._queue.popleft()
            try:
                self._store(job)
            finally:
                with self._changed:
                    self._queued_bytes -= len(job.data)
                    self._pending[job.node.id] -= 1
                    if not self._pending[job.node.id]:
                        del self._pending[job.node.id]
                    self._changed.notify_all()

    def _store(self, job: _Job) -> None:
        node = job.node
        try:
            # Queued bytes may meet a node deleted or re-placed since their
            # capture: save_checkpoint checks the span in its own transaction.
            _write(self._db, node, job.profile_id, job.kind, job.data, node.tokens)
        except NotFound as exc:
            log.info("checkpoint of node %s not written: %s", node.id, exc)
        except Exception as exc:
            # Kept for the service to raise on its next call: StorageUnavailable
            # (disk full, read-only, locked) for the person, anything else as
            # the bug it is.
            log.warning("checkpoint of node %s not written: %s", node.id, exc)
            with self._changed:
                if self._failure is None:
                    self._failure = WriteFailure(node.id, exc)
                else:
                    self._failure = WriteFailure(
                        self._failure.node_id,
                        self._failure.error,
                        self._failure.more + 1,
                    )
