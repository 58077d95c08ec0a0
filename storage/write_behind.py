"""The one background writer of a database: writes that run behind their caller.

Two kinds of entries share one thread, one lock and one order:

- **Queued writes** (``put``; the service's checkpoints): each its own
  transaction, run in the order they came, named by the keys it writes (node
  ids) so that a reader can wait for just those (``settle``). ``put`` blocks
  while more than ``max_queued_bytes`` waits (back-pressure; one entry larger
  than that still goes in, alone). A write that fails is logged and kept, the
  first one first, for its owner to raise (``take_failure``): one failure
  channel for everything written behind.
- **Bookkeeping that may wait** (``Database.defer``: a conversation's active
  node, which checkpoints a restore used). It is kept keyed in memory
  (``DeferredWrites``); it runs inside the next write transaction of the
  database, before that transaction's own statements (so a later write, such
  as a new message that becomes the active node, wins), or on this thread
  once nothing new was deferred for ``IDLE_SECONDS`` (an idle moment), or at
  ``Database.close``. A process killed right after a restore loses at most
  the bookkeeping of its last ``IDLE_SECONDS``: the window then reopens one
  step earlier.

The thread starts with the first entry and ends at ``close``; it is a daemon,
so a process that never closes its database still exits (what was queued is
then lost, which costs a rebuild, never a message). Nothing here knows what
it writes: the entries are callables, so that the database can own its writer
and the checkpoint code stays where checkpoints are made.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

log = logging.getLogger(__name__)

# How long deferred bookkeeping waits for more to come before it is written.
IDLE_SECONDS = 0.25

# Most bytes waiting in the queue before ``put`` blocks: about 2,900 tokens
# of the starter model's checkpoints, more than any one reply.
MAX_QUEUED_BYTES = 64 * 1024 * 1024

# A pending bookkeeping write: runs its statements in the session of a write
# transaction.
Write = Callable[[Any], None]


@dataclass(frozen=True)
class WriteFailure:
    """A queued write that failed: the first key it wrote, and what went wrong."""

    node_id: int
    error: Exception
    # Further writes that failed before this one was reported.
    more: int = 0


class DeferredWrites:
    """The pending bookkeeping writes of one database, keyed.

    A write recorded under a key that is still pending replaces the earlier
    one (only the newest active node matters); ``update`` lets a caller merge
    with it instead (checkpoints touched by several restores).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[Hashable, Write] = {}

    def update(self, key: Hashable, make: Callable[[Write | None], Write]) -> None:
        """Replace the write under ``key`` with ``make(pending write or None)``."""
        with self._lock:
            self._pending[key] = make(self._pending.get(key))

    def get(self, key: Hashable) -> Write | None:
        """The write pending under ``key``, if any."""
        with self._lock:
            return self._pending.get(key)

    def snapshot(self) -> dict[Hashable, Write]:
        """The writes pending now, to run inside a transaction."""
        with self._lock:
            return dict(self._pending)

    def written(self, done: dict[Hashable, Write]) -> None:
        """Forget the writes of ``done`` once their transaction committed.

        A key deferred again meanwhile holds a newer write, which stays.
        """
        with self._lock:
            for key, write in done.items():
                if self._pending.get(key) is write:
                    del self._pending[key]

    def __bool__(self) -> bool:
        with self._lock:
            return bool(self._pending)


class _Work(Enum):
    """What the thread does when no queued write is next."""

    BOOKKEEPING = "bookkeeping"
    STOP = "stop"


@dataclass(frozen=True)
class _Entry:
    keys: tuple[int, ...]
    size: int
    run: Callable[[], None]


class WriteBehind:
    """The background writer of one database.

    ``write_bookkeeping`` writes the deferred bookkeeping now (best effort:
    ``Database.flush_deferred``); the thread calls it at idle moments, and
    ``flush`` after the queued writes.
    """

    def __init__(self, write_bookkeeping: Callable[[], None]) -> None:
        self._write_bookkeeping = write_bookkeeping
        # One lock guards everything below; waiters are woken on every change.
        self._changed = threading.Condition()
        self._queue: deque[_Entry] = deque()
        self._queued_bytes = 0  # of entries queued or running
        self._pending: Counter[int] = Counter()  # entries queued or running, by key
        self._failure: WriteFailure | None = None
        self._bookkeeping_due: float | None = None  # time.monotonic()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def pending_bytes(self) -> int:
        """Bytes of queued writes waiting or running."""
        with self._changed:
            return self._queued_bytes

    def put(
        self,
        keys: Iterable[int],
        size: int,
        run: Callable[[], None],
        max_queued_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        """Queue ``run``, a write of ``size`` bytes to the rows of ``keys``.

        Blocks while more than ``max_queued_bytes`` would wait. Raises
        ``RuntimeError`` after ``close`` (a bug: nothing may write through a
        closed database).
        """
        entry = _Entry(tuple(keys), size, run)
        with self._changed:
            if self._closed:
                raise RuntimeError("write-behind used after close")
            while self._queued_bytes and (self._queued_bytes + size > max_queued_bytes):
                self._changed.wait()
            self._queue.append(entry)
            self._queued_bytes += size
            self._pending.update(entry.keys)
            self._start_locked()
            self._changed.notify_all()

    def bookkeeping_deferred(self, now: float) -> None:
        """Bookkeeping was deferred at ``now``: write it ``IDLE_SECONDS`` after,
        unless more comes meanwhile."""
        with self._changed:
            if self._closed:
                return
            due, self._bookkeeping_due = self._bookkeeping_due, now + IDLE_SECONDS
            self._start_locked()
            # Waking the thread costs the caller the GIL for a while (0.75 ms
            # a restore, measured): only wake it when nothing was due, else
            # it finds the later time when it wakes.
            if due is None:
                self._changed.notify_all()

    def settle(self, keys: Iterable[int]) -> None:
        """Wait until no queued write for any of ``keys`` waits or runs."""
        wanted = set(keys)
        with self._changed:
            self._changed.wait_for(lambda: wanted.isdisjoint(self._pending))

    def flush(self) -> None:
        """Wait until every queued write is done (or failed), then write the
        deferred bookkeeping: everything written behind is on disk."""
        with self._changed:
            self._changed.wait_for(lambda: not self._pending)
            self._bookkeeping_due = None
        self._write_bookkeeping()

    def take_failure(self) -> WriteFailure | None:
        """The first failure since the last call, or None; it is then forgotten."""
        with self._changed:
            failure, self._failure = self._failure, None
            return failure

    def close(self) -> None:
        """Run what is queued, then stop the thread. Safe to call twice."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _start_locked(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="arbor-write-behind", daemon=True
            )
            self._thread.start()

    def _next(self) -> _Entry | _Work:
        """The next queued write, or the bookkeeping once due, or STOP once
        closed with nothing queued."""
        with self._changed:
            while True:
                if self._queue:
                    return self._queue.popleft()
                if self._closed:
                    return _Work.STOP  # the database writes what bookkeeping is left
                now = time.monotonic()
                due = self._bookkeeping_due
                if due is not None and due <= now:
                    self._bookkeeping_due = None
                    return _Work.BOOKKEEPING
                self._changed.wait(None if due is None else due - now)

    def _run(self) -> None:
        while True:
            entry = self._next()
            if entry is _Work.STOP:
                return
            if entry is _Work.BOOKKEEPING:
                try:
                    self._write_bookkeeping()
                except Exception:  # a bug: keep the thread for the writes
                    log.exception("deferred bookkeeping failed")
                continue
            assert isinstance(entry, _Entry)
            try:
                entry.run()
            except Exception as exc:
                self._failed(entry, exc)
            finally:
                with self._changed:
                    self._queued_bytes -= entry.size
                    self._pending.subtract(entry.keys)
                    for key in entry.keys:
                        if not self._pending[key]:
                            del self._pending[key]
                    self._changed.notify_all()

    def _failed(self, entry: _Entry, exc: Exception) -> None:
        # Kept for the owner to raise on its next call: StorageUnavailable
        # (disk full, read-only, locked) for the person, anything else as the
        # bug it is.
        key = entry.keys[0] if entry.keys else 0
        log.warning("write behind for %s failed: %s", key, exc)
        with self._changed:
            if self._failure is None:
                self._failure = WriteFailure(key, exc)
            else:
                self._failure = WriteFailure(
                    self._failure.node_id, self._failure.error, self._failure.more + 1
                )
