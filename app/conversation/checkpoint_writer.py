"""Where the service's checkpoints go: written at once, or behind the reply.

Storing a checkpoint is one SQLite transaction holding the node's KV bytes
(about 22 KiB per token on the starter model: 140 ms for a 517-token span).
Done on the thread that generates, that is time the person waits for. The
``CheckpointWriter`` hands the captured bytes to the database's one
background writer (``storage/write_behind.py``), which writes them in the
order they came, so the reply goes on while SQLite works. ``DirectWriter``
writes at once on the caller's thread: the synchronous mode, with nothing
queued (the default of a service, the tests' and the benchmarks').

What a queued write promises, and why:

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
- **Flush before what must see every write.** ``flush`` waits for every
  write behind (and writes the deferred bookkeeping); the service calls it
  before deleting, evicting, clearing and closing, and the engine worker at
  the end of every job: a job is finished once what it wrote is on disk.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from storage import checkpoint_rows
from storage.db import Database
from storage.errors import NotFound
from storage.records import NodeRecord
from storage.write_behind import MAX_QUEUED_BYTES, WriteFailure

log = logging.getLogger(__name__)


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
        """Nothing of this sink is ever pending."""

    def flush(self) -> None:
        """Write the database's deferred bookkeeping (nothing of this sink
        is pending), as a queued sink's flush does."""
        self._db.write_behind.flush()

    def take_failure(self) -> WriteFailure | None:
        """Failures raised from ``save``: none to take."""
        return None

    def close(self) -> None:
        """Nothing to release."""


class CheckpointWriter:
    """Queues checkpoints to the database's background writer.

    ``max_queued_bytes`` bounds what waits (``save`` blocks beyond it).
    ``close`` waits for every write; the thread is the database's, and ends
    with it (``Database.close``).
    """

    def __init__(self, db: Database, max_queued_bytes: int = MAX_QUEUED_BYTES) -> None:
        self._db = db
        self._behind = db.write_behind
        self._max_queued_bytes = max_queued_bytes
        self._closed = False

    @property
    def pending_bytes(self) -> int:
        """Bytes of checkpoints queued or being written."""
        return self._behind.pending_bytes

    def save(self, node: NodeRecord, profile_id: int, kind: str, data: bytes) -> int:
        """Queue ``node``'s checkpoint; return its size.

        Blocks while the queue is over its bound. Raises ``RuntimeError``
        after ``close`` (a bug: nothing may write through a closed sink).
        """
        if self._closed:
            raise RuntimeError("checkpoint writer used after close")
        self._behind.put(
            [node.id],
            len(data),
            functools.partial(_store, self._db, node, profile_id, kind, data),
            self._max_queued_bytes,
        )
        return len(data)

    def settle(self, node_ids: Iterable[int]) -> None:
        """Wait until no write for any of ``node_ids`` is queued or running."""
        self._behind.settle(node_ids)

    def flush(self) -> None:
        """Wait until every write behind is done (or failed)."""
        self._behind.flush()

    def take_failure(self) -> WriteFailure | None:
        """The first failure since the last call, or None; it is then forgotten."""
        return self._behind.take_failure()

    def close(self) -> None:
        """Write what is queued; later saves are refused. Safe to call twice."""
        self._closed = True
        self._behind.flush()


def _store(
    db: Database, node: NodeRecord, profile_id: int, kind: str, data: bytes
) -> None:
    """Write a queued checkpoint (on the database's background thread)."""
    try:
        # Queued bytes may meet a node deleted or re-placed since their
        # capture: save_checkpoint checks the span in its own transaction.
        _write(db, node, profile_id, kind, data, node.tokens)
    except NotFound as exc:
        log.info("checkpoint of node %s not written: %s", node.id, exc)
