"""Looking at a database file before anything touches it.

``inspect_file`` reads the header and the schema version read-only, without
creating -wal or -shm files beside it. Only a file that is new, or carries
Arbor's tables and a schema version we understand, is ever opened for
writing; anything else is refused and stays byte-for-byte as it was. This
module uses the standard library alone, so that a command that only lists
conversations (``storage.conversation_listing``) can check the file without SQLAlchemy.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from storage.errors import StorageUnavailable

DATABASE_FILENAME = "arbor.sqlite3"

SCHEMA_VERSION = 10

# The oldest schema that can be read as it is, without upgrading: what a
# read-only database must have. Versions 6 to 10 added columns that every
# listing reads (a conversation's sampling, its counts, its origin and
# client, a node's tool use, its context size), so an older file must be
# upgraded first, which needs write access: opened read-only it is refused
# with that said, and left as it is.
READABLE_FROM = 10

# Tables every Arbor database has had since version 1.
_OUR_TABLES = frozenset(
    {"conversation", "node", "backend_profile", "checkpoint", "checkpoint_blob"}
)

_SQLITE_MAGIC = b"SQLite format 3\x00"


# --- looking before touching --------------------------------------------------


def wal_has_content(path: Path) -> bool:
    """Whether a -wal file beside ``path`` may hold committed pages."""
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size > 0
    except OSError:
        return False


def inspect_file(path: Path) -> int:
    """Return the schema version of the Arbor database at ``path`` (0: new).

    Raises ``StorageUnavailable``, without changing or creating any file, when
    ``path`` is not an Arbor database or was written by a newer Arbor.
    """
    header = _read_header(path)
    if header is None:
        return 0  # no file yet, or an empty one: SQLite treats both as new
    if not header.startswith(_SQLITE_MAGIC):
        raise StorageUnavailable(
            f"{path} is not an Arbor database (not an SQLite file), or it is "
            "corrupt; the file was not changed."
        )
    version, tables = _probe(path)
    if version > SCHEMA_VERSION:
        raise StorageUnavailable(
            f"{path} was written by a newer version of Arbor (schema {version}; this "
            f"version understands up to {SCHEMA_VERSION}). Update Arbor to open it; "
            "the file was not changed."
        )
    if version == 0 and not tables:
        return 0  # an empty database, e.g. left by a creation that was cut short
    if version == 0 or not tables >= _OUR_TABLES:
        raise StorageUnavailable(
            f"{path} is not an Arbor database; the file was not changed."
        )
    return version


def _read_header(path: Path) -> bytes | None:
    try:
        with path.open("rb") as file:
            header = file.read(100)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageUnavailable(f"Cannot read {path}: {exc.strerror}.") from exc
    return header or None


def _probe(path: Path) -> tuple[int, set[str]]:
    # immutable=1 makes SQLite read the file with no locking and no -shm/-wal,
    # so not even a file of another program gains a file beside it. When a -wal
    # holds pages, immutable would hide them: then a plain read-only open,
    # which only reads that database's existing -wal and -shm.
    query = "mode=ro" if wal_has_content(path) else "mode=ro&immutable=1"
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.as_uri()}?{query}", uri=True)
        ) as con:
            version = int(con.execute("PRAGMA user_version").fetchone()[0])
            tables = {
                row[0]
                for row in con.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'"
                )
            }
    except sqlite3.DatabaseError as exc:
        name = getattr(exc, "sqlite_errorname", "")
        if name.startswith("SQLITE_CANTOPEN") and query == "mode=ro":
            raise StorageUnavailable(
                f"Cannot read {path}: its -wal file holds recent changes that can "
                f"only be read with write permission on {path.parent}. The file "
                "was not changed."
            ) from exc
        raise StorageUnavailable(
            f"{path} is not an Arbor database, or it is corrupt ({exc}); the file "
            "was not changed."
        ) from exc
    return version, tables
