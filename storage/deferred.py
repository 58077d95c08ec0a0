"""Bookkeeping writes that may wait: kept in memory, written a little later.

Restoring a node must not wait for a write transaction, yet two facts about
it are worth keeping: where the conversation continues (its active node) and
which checkpoints were just used (eviction drops the least recently used).
``Database.defer`` records such a write here instead of running it. Pending
writes are run, in the order they were first recorded:

- inside the next write transaction of the same ``Database``, before that
  transaction's own statements (so a later write, e.g. a new message that
  becomes the active node, always wins over an earlier deferred one);
- by one background thread once nothing new was deferred for ``IDLE_SECONDS``
  (an idle moment);
- at ``Database.close()`` and when the interpreter exits normally.

So a process killed right after a restore loses at most the bookkeeping of
the restores of its last ``IDLE_SECONDS``: in practice the last switch, whose
place the window then reopens one step earlier.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

log = logging.getLogger(__name__)

# How long the deferred writes wait for more to come before they are written.
IDLE_SECONDS = 0.25

# A pending write: runs its statements in the session of a write transaction.
Write = Callable[[Any], None]


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


class _Flusher:
    """One daemon thread that writes deferred bookkeeping at idle moments.

    It holds the databases that have something pending (so a database whose
    last user dropped it still gets its writes), and at interpreter exit it
    writes whatever is left.
    """

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._due: dict[int, tuple[Any, float]] = {}  # id -> (database, due time)
        self._thread: threading.Thread | None = None
        atexit.register(self.flush_all)

    def schedule(self, database: Any, now: float) -> None:
        """Write ``database``'s pending writes ``IDLE_SECONDS`` after ``now``."""
        with self._wake:
            # Waking the thread costs the caller the GIL for a while (0.75 ms
            # a restore, measured): only wake it when this is due before
            # anything else, else it finds the later time when it wakes.
            due = now + IDLE_SECONDS
            earliest = min((d for _db, d in self._due.values()), default=None)
            self._due[id(database)] = (database, due)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="arbor-deferred-writes", daemon=True
                )
                self._thread.start()
            elif earliest is None or due < earliest:
                self._wake.notify()

    def forget(self, database: Any) -> None:
        """Stop holding ``database`` (closed, or nothing left to write)."""
        with self._wake:
            self._due.pop(id(database), None)

    def flush_all(self) -> None:
        """Write every database's pending writes now (interpreter exit)."""
        with self._wake:
            databases = [database for database, _due in self._due.values()]
            self._due.clear()
        for database in databases:
            database.flush_deferred()

    def _run(self) -> None:
        while True:
            with self._wake:
                now = time.monotonic()
                ready = [d for d, due in self._due.values() if due <= now]
                for database in ready:
                    self._due.pop(id(database), None)
                if not ready:
                    waits = [due - now for _d, due in self._due.values()]
                    self._wake.wait(min(waits) if waits else None)
                    continue
            for database in ready:
                try:
                    database.flush_deferred()
                except Exception:  # a bug: keep the thread for the others
                    log.exception("deferred writes failed")


FLUSHER = _Flusher()
