"""Opening the SQLite database: one engine per file, pragmas, sessions, errors.

Opening never writes to a file before it is known to be an Arbor database of a
schema this version understands (``probe.inspect_file`` looks first,
read-only and without creating anything beside the file). A database that
cannot be written (read-only file, folder or file system) opens read-only:
``Database.read_only`` is then True and every write raises
``StorageUnavailable`` naming the cause.

Transactions are explicit. pysqlite would defer BEGIN until the first INSERT or
UPDATE, so a read-then-write function would read outside its own transaction
and race other writers. Here every connection runs in SQLite's autocommit mode
and a "begin" event emits the BEGIN itself (the recipe of SQLAlchemy's SQLite
dialect documentation): ``Database.write()`` starts with BEGIN IMMEDIATE (the
write lock is taken before the first read), ``Database.read()`` with BEGIN
DEFERRED (a consistent snapshot that, under WAL, never waits for a writer).

Checkpoint blobs are most of the file and are read whole, tens of megabytes
per restore, so new files get 16 KiB pages (a 2 MiB blob spans 128 overflow
pages instead of 512) and every connection reads through SQLite's memory
map (``mmap_size``): the bytes are copied once, from the page cache to where
the caller wants them. Not 64 KiB: every transaction writes whole pages to
the -wal file, and with 64 KiB pages deleting a branch on a full disk needed
more than the 1 MiB the space reserve frees (``storage/reserve.py``), for
reads barely faster. Files made before keep their 4 KiB pages (the page size
of a WAL database cannot change in place); docs/benchmarks.md says how to
convert one with ``VACUUM``.

Each database has one background writer (``Database.write_behind``,
``storage/write_behind.py``): the checkpoints queued behind a reply, and the
bookkeeping that may wait (the active node, when checkpoints were last used),
recorded with ``Database.defer``. ``Database.generation()`` tells caches whether
anything else may have changed since they read it, and ``changes_since``
what, where the writes said so (``Database.changing``).

Deleting does not overwrite what it deletes (``secure_delete=FAST``, where
Debian's SQLite, for one, is built to zero every freed page): zeroing a
checkpoint's pages wrote all of its bytes to the -wal file before a byte was
freed, so that freeing 1 GB first needed 1 GB more of disk. What deleting
frees is given back to the file system right after (``release_space`` in
``storage/space.py``), and in a file made with incremental auto-vacuum
(every file Arbor makes) no freed page is left in it then: each is either cut
off its end or filled with a page moved there. (Zeroing would not have
reached those cut off: a checkpoint does not write pages past the file's new
end.)
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import cast

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import QueuePool

from storage import migrations, probe, reserve
from storage.errors import StorageUnavailable
from storage.write_behind import DeferredWrites, Write, WriteBehind

log = logging.getLogger(__name__)

# The page size of new files: suited to blobs of megabytes (see above).
PAGE_SIZE = 16384
# How much of the file SQLite maps into memory to read it. Address space, not
# memory: pages are only loaded as they are read, and are the page cache's.
MMAP_SIZE = 1 << 30
# How far the -wal file may grow before SQLite copies its pages into the
# file. Not SQLite's 1000 pages: with 16 KiB pages that is 16 MiB, pages still
# in the -wal are read with read(), not through the map, and on a nearly full
# disk the -wal's room is what deleting needs (tests/system/test_faults.py,
# test_storage_reliability.py). Large pages also make each small commit
# longer, so half the 4 MiB that 1000 pages of 4 KiB give.
WAL_AUTOCHECKPOINT_BYTES = 2 << 20
# How many blobs one connection opens before it is closed and replaced.
# CPython's sqlite3 (3.11, and up to 3.14 at least: python/cpython#144424)
# keeps a weak reference to every Blob a connection ever opened, dead or
# alive, until the connection is closed: 83 bytes a blob here, 1.8 KiB a
# restore, for the life of the process. Closing the connection frees them;
# replacing it costs 0.5 to 2.5 ms (tools/scale_space.py), so this bounds
# that memory at some 80 KiB a pooled connection for at most 2.5 µs a blob
# (reading a 1 MiB blob takes some 200 µs).
BLOBS_PER_CONNECTION = 1000

# The execution option that tells the "begin" event which BEGIN to emit.
_BEGIN_OPTION = "arbor_begin"
# How many of the latest generations keep what their writes changed (see
# ``Database.changing``), and how many node ids they may name in all (a move
# names its whole path): a cache further behind reads everything again.
CHANGES_KEPT = 1024
CHANGED_IDS_KEPT = 1 << 16


@dataclasses.dataclass
class _Commit:
    """A write transaction: its session, then the generation its commit made."""

    session: Session
    generation: int = -1


def _own_data_version(raw: sqlite3.Connection) -> int:
    return int(raw.execute("PRAGMA data_version").fetchone()[0])


@dataclasses.dataclass(eq=False)
class _Scope:
    """An open ``changing`` or ``adding`` block: the nodes it names, whether
    they are named as each write commits, and the generations made in it."""

    ids: frozenset[int] | set[int]
    named_now: bool
    made: list[int] = dataclasses.field(default_factory=list)


class Database:
    """An open Arbor database: the engine and its read and write sessions.

    Each repository call is one unit of work, ``with db.read() as s:`` or
    ``with db.write() as s:``. Sessions are never shared across threads.

    Attributes
    ----------
    path
        The database file (absolute).
    read_only
        True when the database could only be opened for reading; the window
        and the CLI show "Read-only: you can read, not write" from it.
    read_only_reason
        Why it is read-only, for messages (None when writable).
    """

    def __init__(
        self,
        path: Path,
        engine: Engine,
        read_only_reason: str | None = None,
        space_low: bool = False,
    ) -> None:
        self.path = path
        self.engine = engine
        self.read_only_reason = read_only_reason
        self.read_only = read_only_reason is not None
        # Opened on a full disk with the space reserve: the room it gave is
        # for deleting (which frees more), not for new messages.
        self.space_low = space_low
        self._readers = sessionmaker(
            engine.execution_options(**{_BEGIN_OPTION: "BEGIN DEFERRED"}),
            expire_on_commit=False,
        )
        # Write sessions are bound to a connection of this engine that the
        # transaction keeps until after its commit (see _transaction).
        self._write_engine = engine.execution_options(
            **{_BEGIN_OPTION: "BEGIN IMMEDIATE"}
        )
        self.deferred = DeferredWrites()
        # The one thread that writes behind callers, started by its first use.
        self.write_behind = WriteBehind(self.flush_deferred)
        # Counts writes through this object; see generation().
        self._generation = 0
        # Generation -> the node ids its write changed, where it said so
        # (changing(), adding()); guarded by _watch_lock, like _generation.
        self._changes: dict[int, frozenset[int]] = {}
        self._changed_ids = 0  # how many ids _changes holds, shared ones each time
        # Per thread: the changing() and adding() blocks open there.
        self._scopes = threading.local()
        self._watch_lock = threading.Lock()
        self._watch: sqlite3.Connection | None = None
        self._seen_version: int | None = None

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """Yield a session that reads one consistent snapshot, then rolls back.

        Database failures caused by the environment surface as
        ``StorageUnavailable`` with a readable message.
        """
        with translate_errors(self.path), self._readers() as session:
            yield session

    @contextlib.contextmanager
    def read_raw(self) -> Iterator[sqlite3.Connection]:
        """Yield sqlite3's own connection inside a read transaction (one snapshot).

        For reading checkpoint blobs with ``Connection.blobopen``, which
        SQLAlchemy does not offer, and without the cost of an ORM session
        (0.27 ms against 0.01 ms here, most of a sibling switch's Python
        time). Only reads: the transaction is rolled back. A connection that
        has opened ``BLOBS_PER_CONNECTION`` blobs is closed afterwards (the
        pool opens a new one when next asked), for the memory each blob
        leaves behind in it.
        """
        with translate_errors(self.path):
            pooled = self.engine.raw_connection()
            raw = cast(_Connection, pooled.driver_connection)
            try:
                raw.execute("BEGIN DEFERRED")
                try:
                    yield raw
                finally:
                    if raw.in_transaction:  # some errors end it themselves
                        raw.execute("ROLLBACK")
            finally:
                if raw.blobs_opened >= BLOBS_PER_CONNECTION:
                    pooled.invalidate()  # closes it; the pool makes a new one
                pooled.close()

    @contextlib.contextmanager
    def write(self, frees_space: bool = False) -> Iterator[Session]:
        """Yield a session inside one write transaction, committed on success.

        The transaction holds SQLite's write lock from its first statement, so
        what it reads cannot change before it writes. Raises
        ``StorageUnavailable`` on a read-only database and for environment
        failures (locked, disk full, ...). While space is low (see
        ``space_low``) only a write that ``frees_space`` may run.
        """
        self.require_writable()
        if frees_space:
            reserve.spend_if_short(self.path)
        elif self.space_low and not self._space_recovered():
            raise StorageUnavailable(disk_full_message(self.path))
        with self._transaction(changed=True) as commit:
            yield commit.session
        for scope in self._open_scopes():
            scope.made.append(commit.generation)

    @contextlib.contextmanager
    def _transaction(self, changed: bool) -> Iterator[_Commit]:
        # Deferred bookkeeping goes first, so the transaction's own statements
        # win where both set the same thing (the active node). It is forgotten
        # only once committed: a rolled back transaction leaves it pending.
        pending = self.deferred.snapshot()
        with (
            translate_errors(self.path),
            self._write_engine.connect() as connection,
            Session(bind=connection, expire_on_commit=False) as session,
        ):
            # Kept until after the commit: it tells whether another
            # connection committed right after us (_committed).
            raw = cast(sqlite3.Connection, connection.connection.driver_connection)
            commit = _Commit(session)
            session.begin()
            # BEGIN IMMEDIATE: the write lock is held from here, so nobody
            # commits between this look and our commit.
            session.connection()
            before = _own_data_version(raw)
            if self._seen_version is not None:
                # A cache is watching: look at data_version before our own
                # commit hides other commits.
                self._notice_others()
            for write in pending.values():
                write(session)
            yield commit
            # Committed and counted under the watch's lock: another thread's
            # look at data_version (generation(), changes_since) comes before
            # both or after both, and never takes our commit for another's.
            # (An exception above leaves the session to roll back as it
            # closes.)
            with self._watch_lock:
                session.commit()
                commit.generation = self._committed(changed, raw, before)
        self.deferred.written(pending)

    # --- deferred bookkeeping --------------------------------------------------

    def defer(self, key: Hashable, make: Callable[[Write | None], Write]) -> None:
        """Record a bookkeeping write to run later (``storage/write_behind.py``).

        ``make`` gets the write still pending under ``key`` (or None) and
        returns the one to keep. Nothing is recorded on a read-only database
        or while space is low: bookkeeping is not worth an error there.
        """
        if self.read_only or self.space_low:
            return
        self.deferred.update(key, make)
        self.write_behind.bookkeeping_deferred(time.monotonic())

    def flush_deferred(self) -> None:
        """Write the pending bookkeeping now, in one transaction (best effort).

        A failure (locked, disk full) is logged and the writes stay pending:
        the next write transaction, or the next flush, tries again.
        """
        if not self.deferred or self.read_only:
            return
        try:
            with self._transaction(changed=False):
                pass
        except StorageUnavailable as exc:
            log.warning("Could not save the place in the conversation yet: %s", exc)

    # --- telling caches about changes ---------------------------------------------

    def generation(self) -> int:
        """A number that changes whenever the data may have changed.

        It counts the write transactions run through this object (deferred
        bookkeeping alone excepted: it changes nothing a cache holds) and
        notices commits of other connections and processes through SQLite's
        ``PRAGMA data_version``. Another process's commit that lands between
        a commit of ours and our look at ``data_version`` right after it
        would pass for ours; the connection that committed tells them apart
        (``_committed``), and such a commit moves the number once more.
        A read-only database only counts (nothing of ours writes to it).
        """
        with self._watch_lock:
            self._notice_others_locked()
            return self._generation

    def _notice_others(self) -> None:
        with self._watch_lock:
            self._notice_others_locked()

    def _notice_others_locked(self) -> None:
        if self.read_only:
            return  # nothing of ours writes; a writer elsewhere is not watched
        version = self._data_version()
        if version != self._seen_version:
            if self._seen_version is not None:
                self._generation += 1
            self._seen_version = version

    def _committed(self, changed: bool, raw: sqlite3.Connection, before: int) -> int:
        # Called with _watch_lock held, right after our commit on ``raw``
        # (whose data_version was ``before`` inside the transaction). Returns
        # the generation the commit made (counted only after it committed: a
        # cache that reads it has the commit's data in what it reads next).
        # What this thread's open changing() blocks name goes with it: no
        # cache sees the generation without its names.
        if changed:
            self._generation += 1
            named = [s.ids for s in self._open_scopes() if s.named_now]
            if named:
                # One block's ids as they are: shared by all its writes.
                ids = named[0] if len(named) == 1 else frozenset().union(*named)
                self._name(self._generation, frozenset(ids))
        generation = self._generation
        if self._seen_version is None or self.read_only:
            return generation
        # Our own commit changes the watch's data_version too: take it as
        # seen. Another process's commit landing after ours but before this
        # look would pass for ours; the connection that committed tells them
        # apart (its own commits do not change its data_version). Looked at
        # after the watch: a commit between the two is then seen there, one
        # after both by the watch's next look.
        self._seen_version = self._data_version()
        try:
            alone = _own_data_version(raw) == before
        except sqlite3.Error:
            alone = False  # unknown: as if someone had (ours is committed)
        if not alone:
            self._generation += 1  # someone's commit, named by nobody
        return generation

    @contextlib.contextmanager
    def changing(self, node_ids: Iterable[int]) -> Iterator[None]:
        """Say what the writes this thread makes inside the block change.

        The promise: every write transaction that this thread commits through
        this object inside the block changes nothing but the rows of the nodes
        of ``node_ids`` and what belongs to them (their checkpoints), besides
        bookkeeping that no cache holds (a conversation's active node and time
        of change, when checkpoints were last used). Nodes of any conversation
        may be named. ``changes_since`` tells caches, which then read again
        only those nodes instead of everything; each write is named as it
        commits. Blocks nest (with ``adding`` too); each must keep the promise
        for all the writes inside it.
        """
        with self._scope(_Scope(frozenset(node_ids), named_now=True)):
            yield

    @contextlib.contextmanager
    def adding(self) -> Iterator[set[int]]:
        """``changing`` for nodes known only once written (a node just added).

        The ids put in the yielded set inside the block are the nodes its
        writes change. They are told when the block ends, so a cache that
        looks before that (on another thread) sees writes it cannot name and
        reads everything again: slower, never wrong. A block that raises
        tells nothing: its writes stay unnamed, like any other write.
        """
        ids: set[int] = set()
        scope = _Scope(ids, named_now=False)
        with self._scope(scope):
            yield ids
        if scope.made:
            named = frozenset(ids)
            with self._watch_lock:
                for generation in scope.made:
                    self._name(generation, named)

    @contextlib.contextmanager
    def _scope(self, scope: _Scope) -> Iterator[None]:
        stack = self._open_scopes()
        stack.append(scope)
        try:
            yield
        finally:
            stack.remove(scope)  # by identity: _Scope compares as an object

    def _name(self, generation: int, named: frozenset[int]) -> None:
        # Called with _watch_lock held.
        old = self._changes.get(generation)
        entry = named if old is None else old | named
        self._changes[generation] = entry
        self._changed_ids += len(entry) - (len(old) if old is not None else 0)
        if len(self._changes) > CHANGES_KEPT or self._changed_ids > CHANGED_IDS_KEPT:
            # Down to half of each bound, oldest first: a cache that far
            # behind finds a generation unnamed and reads everything.
            for oldest in sorted(self._changes):
                if (
                    len(self._changes) <= CHANGES_KEPT // 2
                    and self._changed_ids <= CHANGED_IDS_KEPT // 2
                ):
                    break
                self._changed_ids -= len(self._changes.pop(oldest))

    def changes_since(self, generation: int) -> tuple[int, frozenset[int] | None]:
        """The generation now, and the nodes changed since ``generation``.

        The ids are those named by ``changing`` and ``adding`` for every
        write since (empty when nothing was written), or None when any
        change since cannot be named: a write that named nothing, another
        connection's or process's commit, an ``adding`` block not finished
        yet, or one too long ago (``CHANGES_KEPT``, ``CHANGED_IDS_KEPT``).
        As with ``generation``,
        the number is taken before the caller reads: what it reads next holds
        at least every change up to it.
        """
        with self._watch_lock:
            self._notice_others_locked()
            now = self._generation
            if generation == now:
                return now, frozenset()
            if not 0 <= generation < now or now - generation > CHANGES_KEPT:
                return now, None
            changed: set[int] = set()
            for later in range(generation + 1, now + 1):
                named = self._changes.get(later)
                if named is None:
                    return now, None
                changed |= named
            return now, frozenset(changed)

    def _open_scopes(self) -> list[_Scope]:
        # This thread's open changing() and adding() blocks, innermost last.
        stack: list[_Scope] | None = getattr(self._scopes, "stack", None)
        if stack is None:
            stack = self._scopes.stack = []
        return stack

    def _data_version(self) -> int:
        # A connection of its own: data_version tells a connection about the
        # commits of every *other* connection, pooled ones included.
        if self._watch is None:
            self._watch = sqlite3.connect(
                f"{self.path.as_uri()}?mode=ro", uri=True, check_same_thread=False
            )
        with translate_errors(self.path):
            return int(self._watch.execute("PRAGMA data_version").fetchone()[0])

    def require_writable(self) -> None:
        """Raise ``StorageUnavailable`` if this database was opened read-only."""
        if self.read_only_reason is not None:
            raise StorageUnavailable(
                read_only_message(self.path, self.read_only_reason)
            )

    def _space_recovered(self) -> bool:
        # Room again for the reserve means room for ordinary writes too.
        reserve.keep(self.path)
        self.space_low = not reserve.reserve_path(self.path).exists()
        return not self.space_low

    def close(self) -> None:
        """Run the writes queued behind, write the pending bookkeeping, then
        release every connection."""
        try:
            self.write_behind.close()
            self.flush_deferred()
        finally:
            with self._watch_lock:
                if self._watch is not None:
                    self._watch.close()
                    self._watch = None
            self.engine.dispose()


def disk_full_message(path: Path) -> str:
    """The sentence shown when a write fails for lack of disk space."""
    return (
        f"The disk holding {path} is full. Free some space (or clear "
        "checkpoints) and try again."
    )


def read_only_message(path: Path, reason: str) -> str:
    """The sentence shown when a write is refused on a read-only database."""
    return f"The database {path} is read-only ({reason}): you can read, not write."


def open_database(path: Path, busy_timeout_ms: int = 5000) -> Database:
    """Open (creating or upgrading) the Arbor database at ``path``.

    ``busy_timeout_ms`` is how long a write waits for another process's lock
    before giving up with ``StorageUnavailable``.

    A database that cannot be written opens read-only (``Database.read_only``).
    Raises ``StorageUnavailable`` if it cannot be used at all, e.g. it is not an
    Arbor database, was written by a newer Arbor, or cannot be created; such a
    file is left exactly as it was.
    """
    # Resolved first: SQLite URIs need an absolute path, and a relative one
    # would follow the working directory.
    path = Path(path).expanduser().resolve()
    _make_folder(path.parent)
    version = probe.inspect_file(path)
    reason = _read_only_reason(path, new=version == 0)
    if reason is None:
        try:
            return _open_writable_with_reserve(path, version, busy_timeout_ms)
        except _CannotWrite as exc:
            reason = exc.reason
    return _open_read_only(path, version, reason, busy_timeout_ms)


def _open_writable_with_reserve(
    path: Path, version: int, busy_timeout_ms: int
) -> Database:
    # On a full disk the reserve makes room for the -wal and -shm files, so
    # that the user can still delete things (see storage/reserve.py).
    try:
        db = _open_writable(path, version, busy_timeout_ms)
    except _CannotWrite as exc:
        if not (exc.full_disk and reserve.give_up(path)):
            raise
        db = _open_writable(path, version, busy_timeout_ms)
        db.space_low = True
    reserve.keep(path)
    return db


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageUnavailable(
            f"Cannot create the data folder {folder}: {exc.strerror}."
        ) from exc


class _CannotWrite(Exception):
    """Opening for writing was refused by the file system; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.full_disk = reason == _FULL_DISK_REASON


def _read_only_reason(path: Path, new: bool) -> str | None:
    """Why ``path`` cannot be written, or None if it looks writable.

    SQLite needs to create the -wal and -shm files beside the database, so the
    folder must be writable too. (Root passes these checks everywhere except on
    a read-only file system; SQLite's own refusal is caught later.)
    """
    folder = path.parent
    if _on_read_only_file_system(folder):
        return f"it is on a read-only file system ({folder})"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"no write permission on the folder {folder}"
    if not new and not os.access(path, os.W_OK):
        return "no write permission on the file"
    return None


def _on_read_only_file_system(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs on Windows
        return False


def _open_writable(path: Path, version: int, busy_timeout_ms: int) -> Database:
    # mode=rw for an existing file: if it vanished since inspect_file, SQLite
    # must not quietly create an empty one in its place.
    mode = "rwc" if version == 0 else "rw"
    engine = _engine(
        path, f"mode={mode}", busy_timeout_ms, writable=True, new=version == 0
    )
    try:
        with translate_errors(path):
            try:
                migrations.upgrade(engine, path, version)
                # Connect now, so that a file that cannot be opened for
                # writing is known here and not at the first query.
                with engine.connect() as connection:
                    connection.exec_driver_sql("SELECT count(*) FROM sqlite_master")
            except (DBAPIError, sqlite3.Error) as exc:
                original = exc.orig if isinstance(exc, DBAPIError) else exc
                reason = _cannot_write_reason(path, original)
                if reason is None or version == 0:
                    raise
                raise _CannotWrite(reason) from exc
    except BaseException:
        engine.dispose()
        raise
    return Database(path, engine)


_FULL_DISK_REASON = "the disk holding it is full; free some space and open it again"


def _cannot_write_reason(path: Path, exc: BaseException | None) -> str | None:
    # Failures after which the file can still be read: SQLite refused to write
    # although the permission checks passed (ACLs, a -shm owned by someone
    # else), or the disk is too full to create the -wal and -shm files.
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name.startswith("SQLITE_FULL") or (
        name.startswith("SQLITE_IOERR") and _disk_full(path)
    ):
        return _FULL_DISK_REASON
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")):
        return f"SQLite cannot write to it: {exc}"
    return None


def _open_read_only(
    path: Path, version: int, reason: str, busy_timeout_ms: int
) -> Database:
    if version == 0:
        raise StorageUnavailable(f"Cannot create the database {path}: {reason}.")
    if version < probe.READABLE_FROM:
        raise StorageUnavailable(
            f"{path} was written by an older version of Arbor and must be upgraded "
            f"before it can be read, which needs write access ({reason}). The file "
            "was not changed."
        )
    # immutable=1 reads without locks and without creating -shm/-wal files, which
    # a read-only folder could not hold anyway. It is only correct when no -wal
    # holds committed pages: those would silently be ignored.
    query = "mode=ro" if probe.wal_has_content(path) else "mode=ro&immutable=1"
    engine = _engine(path, query, busy_timeout_ms, writable=False)
    try:
        with translate_errors(path), engine.connect() as connection:
            connection.exec_driver_sql("SELECT count(*) FROM sqlite_master").all()
    except StorageUnavailable as exc:
        engine.dispose()
        if query == "mode=ro":
            raise StorageUnavailable(
                f"The database {path} has recent changes in its -wal file that "
                f"can only be read with write access ({reason}). Opening it "
                "read-only would hide them, so it was not opened; make the folder "
                "and file writable and try again."
            ) from exc
        raise
    return Database(path, engine, read_only_reason=reason)


class _Connection(sqlite3.Connection):
    """sqlite3's connection, counting the blobs it opens (``BLOBS_PER_CONNECTION``)."""

    blobs_opened = 0

    def blobopen(
        self,
        table: str,
        column: str,
        row: int,
        /,
        *,
        readonly: bool = False,
        name: str = "main",
    ) -> sqlite3.Blob:
        """Open a blob (``sqlite3.Connection.blobopen``), counted."""
        self.blobs_opened += 1
        return super().blobopen(table, column, row, readonly=readonly, name=name)


def _engine(
    path: Path, query: str, busy_timeout_ms: int, writable: bool, new: bool = False
) -> Engine:
    uri = f"{path.as_uri()}?{query}"

    def connect() -> sqlite3.Connection:
        # The pool hands a connection to one thread at a time, so sqlite3's
        # same-thread check would only get in the way.
        return sqlite3.connect(
            uri, uri=True, check_same_thread=False, factory=_Connection
        )

    # The URL is only a dialect name here, and SQLAlchemy would pick the pool
    # of an in-memory database for it; a file gets the pool it gets by default.
    engine = create_engine("sqlite://", creator=connect, poolclass=QueuePool)
    event.listen(
        engine,
        "connect",
        functools.partial(_on_connect, busy_timeout_ms, writable, new),
    )
    event.listen(engine, "begin", _on_begin)
    return engine


def _on_connect(
    busy_timeout_ms: int,
    writable: bool,
    new: bool,
    dbapi_connection: sqlite3.Connection,
    _record: object,
) -> None:
    # Autocommit at the driver level: _on_begin emits every BEGIN itself.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    if new:
        # Lets deleted checkpoints give their pages back (release_space). Both
        # pragmas only take effect in a file without tables, before the switch
        # to WAL writes the header; they are never sent to an existing file,
        # where they would be a write (and fail on a read-only one).
        # page_size first: auto_vacuum fixes the page size it finds.
        cursor.execute(f"PRAGMA page_size={PAGE_SIZE}")
        cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
    # Foreign keys are off by default in SQLite; cascades rely on them.
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    cursor.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
    if writable:
        # WAL keeps readers (the UI) unblocked while the worker writes, and with
        # synchronous=NORMAL a crash can lose the last commit but never corrupts.
        # Only reached once the file is known to be ours (inspect_file).
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        # Freed pages are not zeroed (see the module docstring); content on
        # pages a deletion writes anyway still is, which costs nothing.
        cursor.execute("PRAGMA secure_delete=FAST")
        page_size = cursor.execute("PRAGMA page_size").fetchone()[0]
        pages = max(16, WAL_AUTOCHECKPOINT_BYTES // page_size)
        cursor.execute(f"PRAGMA wal_autocheckpoint={pages}")
    else:
        # A second guard besides Database.write(): nothing writes by accident.
        cursor.execute("PRAGMA query_only=ON")
    cursor.close()


def _on_begin(connection: Connection) -> None:
    # Database.read() and write() say which BEGIN they need. Plain use of the
    # engine gets SQLite's default, DEFERRED, as pysqlite gave it: it takes no
    # lock before the first statement, so e.g. "PRAGMA wal_checkpoint" works.
    begin = connection.get_execution_options().get(_BEGIN_OPTION, "BEGIN DEFERRED")
    connection.exec_driver_sql(begin)


# (SQLite primary result code, message). The first match by code wins; the
# text needles below catch errors raised without a code.
_MESSAGES_BY_CODE: tuple[tuple[str, str], ...] = (
    (
        "SQLITE_BUSY",
        "The database {path} is locked by another program. Close other Arbor "
        "windows and try again.",
    ),
    (
        "SQLITE_LOCKED",
        "The database {path} is locked by another program. Close other Arbor "
        "windows and try again.",
    ),
    (
        "SQLITE_FULL",
        "The disk holding {path} is full. Free some space (or clear "
        "checkpoints) and try again.",
    ),
    (
        "SQLITE_READONLY",
        "The database {path} is read-only (SQLite cannot write to it: {detail}).",
    ),
    ("SQLITE_PERM", "Permission denied while using the database {path}."),
    ("SQLITE_NOTADB", "{path} is not an Arbor database, or it is corrupt."),
    ("SQLITE_CORRUPT", "The database {path} is corrupt."),
    (
        "SQLITE_CANTOPEN",
        "Cannot open the database {path} ({detail}). Check that the file and its "
        "folder exist and that you may read and write them.",
    ),
    ("SQLITE_IOERR", "A disk error occurred while using {path} ({detail})."),
)

_MESSAGES_BY_TEXT: tuple[tuple[str, str], ...] = (
    ("locked", _MESSAGES_BY_CODE[0][1]),
    ("full", _MESSAGES_BY_CODE[2][1]),
    ("readonly", _MESSAGES_BY_CODE[3][1]),
    ("not a database", _MESSAGES_BY_CODE[5][1]),
    ("malformed", _MESSAGES_BY_CODE[6][1]),
    ("unable to open", _MESSAGES_BY_CODE[7][1]),
    ("disk i/o", _MESSAGES_BY_CODE[8][1]),
)


def describe_sqlite_error(path: Path, exc: sqlite3.Error) -> str | None:
    """A sentence naming the real cause of an environment failure, or None.

    None means the error is not the environment's (e.g. an SQL mistake: a bug).
    """
    name = getattr(exc, "sqlite_errorname", None) or ""
    detail = str(exc)
    for code, text in _MESSAGES_BY_CODE:
        if name == code or name.startswith(code + "_"):
            if code == "SQLITE_IOERR" and _disk_full(path):
                # Some writes on a full disk fail as I/O errors (e.g. growing
                # the -shm file), not as SQLITE_FULL.
                return _MESSAGES_BY_CODE[2][1].format(path=path)
            return text.format(path=path, detail=detail)
    lowered = detail.lower()
    for needle, text in _MESSAGES_BY_TEXT:
        if needle in lowered:
            return text.format(path=path, detail=detail)
    return None


def _disk_full(path: Path) -> bool:
    try:
        return os.statvfs(path.parent).f_bavail == 0
    except (OSError, AttributeError):
        return False


@contextlib.contextmanager
def translate_errors(path: Path) -> Iterator[None]:
    """Turn environment failures of SQLite into ``StorageUnavailable``.

    The message names the cause (locked, disk full, read-only, not a database,
    corrupt, ...). Errors that are Arbor's own mistakes (constraint violations,
    SQL errors) propagate unchanged.
    """
    try:
        yield
    except DBAPIError as exc:
        orig = exc.orig
        message = (
            describe_sqlite_error(path, orig)
            if isinstance(orig, sqlite3.Error)
            else None
        )
        if message is None:
            raise
        raise StorageUnavailable(message) from exc
    except (sqlite3.IntegrityError, sqlite3.ProgrammingError):
        raise
    except sqlite3.DatabaseError as exc:
        # Raised by the plain sqlite3 connections of inspection and migration.
        message = describe_sqlite_error(path, exc)
        if message is None:
            message = f"The database {path} cannot be used: {exc}."
        raise StorageUnavailable(message) from exc
