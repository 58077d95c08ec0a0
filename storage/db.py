"""Opening the SQLite database: one engine per file, pragmas, sessions, errors."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from storage import migrations
from storage.errors import StorageUnavailable

DATABASE_FILENAME = "arbor.sqlite3"


class Database:
    """An open Arbor database: the engine and a session factory for it.

    Each repository call is one unit of work: ``with db.transaction() as s:``.
    Sessions are never shared across threads.
    """

    def __init__(self, path: Path, engine: Engine) -> None:
        self.path = path
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Session]:
        """Yield a session inside one transaction, committed on success.

        Database failures caused by the environment (locked, full, corrupt)
        surface as ``StorageUnavailable`` with a readable message.
        """
        with translate_errors(self.path), self._sessions.begin() as session:
            yield session

    def close(self) -> None:
        """Release every pooled connection."""
        self.engine.dispose()


def open_database(path: Path, busy_timeout_ms: int = 5000) -> Database:
    """Open (creating or upgrading) the Arbor database at ``path``.

    ``busy_timeout_ms`` is how long a write waits for another process's lock
    before giving up with ``StorageUnavailable``.

    Raises ``StorageUnavailable`` if it cannot be used, e.g. it was written by a
    newer Arbor, is not a database, or its folder is not writable.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageUnavailable(
            f"Cannot create the data folder {path.parent}: {exc.strerror}."
        ) from exc
    migrations.refuse_newer(path)
    engine = create_engine(f"sqlite:///{path}")
    event.listen(engine, "connect", functools.partial(_on_connect, busy_timeout_ms))
    with translate_errors(path):
        migrations.upgrade(engine, path)
    return Database(path, engine)


def _on_connect(
    busy_timeout_ms: int, dbapi_connection: sqlite3.Connection, _record: object
) -> None:
    # Foreign keys are off by default in SQLite; cascades rely on them. WAL keeps
    # readers (the UI) unblocked while the worker writes, and with
    # synchronous=NORMAL a crash can lose the last commit but never corrupts.
    cursor = dbapi_connection.cursor()
    # Takes effect only in a file with no tables yet (a new database): lets
    # deleted checkpoints give their pages back (repository.release_space).
    cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    cursor.close()


_READABLE_ERRORS = (
    (
        "locked",
        "The database {path} is locked by another program. Close other Arbor "
        "windows and try again.",
    ),
    (
        "full",
        "The disk holding {path} is full. Free some space (or clear "
        "checkpoints) and try again.",
    ),
    ("not a database", "{path} is not an Arbor database, or it is corrupt."),
    ("malformed", "The database {path} is corrupt."),
    ("readonly", "The database {path} is read-only."),
    ("unable to open", "Cannot open the database {path}."),
    ("disk i/o", "A disk error occurred while using {path}."),
)


@contextlib.contextmanager
def translate_errors(path: Path) -> Iterator[None]:
    """Turn environment failures of SQLite into ``StorageUnavailable``."""
    try:
        yield
    except DBAPIError as exc:
        message = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
        for needle, text in _READABLE_ERRORS:
            if needle in message:
                raise StorageUnavailable(text.format(path=path)) from exc
        raise
    except sqlite3.DatabaseError as exc:
        raise StorageUnavailable(f"The database {path} cannot be used: {exc}.") from exc
