"""Schema versioning with a ``PRAGMA user_version`` ladder.

Version 0 with no tables is a new file. Each upgrade step runs in its own
transaction after a file backup. A database from a newer Arbor is refused
untouched rather than damaged.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Connection, Engine, inspect, text

from storage.errors import StorageUnavailable
from storage.models import Base

SCHEMA_VERSION = 2


def _add_reasoning_and_span_text(connection: Connection) -> None:
    # Version 2: replies keep their reasoning apart from the answer, nodes keep
    # the text their span was rendered from, conversations their reasoning
    # choice. Existing rows get "no reasoning" and an unknown span text (filled
    # in from the tokens the next time a model loads them).
    connection.execute(
        text("ALTER TABLE node ADD COLUMN thinking TEXT NOT NULL DEFAULT ''")
    )
    connection.execute(text("ALTER TABLE node ADD COLUMN span_text TEXT"))
    connection.execute(
        text("ALTER TABLE conversation ADD COLUMN reasoning VARCHAR(16)")
    )


# Steps from version N to N+1, keyed by N. Version 1 is the first schema.
_STEPS: dict[int, Callable[[Connection], None]] = {1: _add_reasoning_and_span_text}


def read_version(connection: Connection) -> int:
    """Return the schema version recorded in the database."""
    return int(connection.execute(text("PRAGMA user_version")).scalar_one())


def refuse_newer(path: Path) -> None:
    """Raise ``StorageUnavailable`` if ``path`` holds a schema newer than ours.

    Checked read-only before anything else opens the file, so that not even
    the switch to WAL journaling touches a database we cannot understand.
    """
    if not path.exists():
        return
    try:
        with contextlib.closing(
            sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        ) as con:
            version = int(con.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise StorageUnavailable(
            f"{path} is not an Arbor database, or it is corrupt."
        ) from exc
    if version > SCHEMA_VERSION:
        raise StorageUnavailable(
            f"{path} was written by a newer version of Arbor (schema {version}; this "
            f"version understands up to {SCHEMA_VERSION}). Update Arbor to open it; "
            "the file was not changed."
        )


def upgrade(engine: Engine, path: Path) -> None:
    """Create or upgrade the schema of the database at ``path``."""
    with engine.connect() as connection:
        version = read_version(connection)
        has_tables = bool(inspect(connection).get_table_names())
    if version == 0 and not has_tables:
        with engine.begin() as connection:
            Base.metadata.create_all(connection)
            connection.execute(text(f"PRAGMA user_version={SCHEMA_VERSION}"))
        return
    if version == 0:
        raise StorageUnavailable(
            f"{path} is not an Arbor database; the file was not changed."
        )
    if version < SCHEMA_VERSION:
        backup = path.with_suffix(path.suffix + f".v{version}.bak")
        _backup(path, backup)
        for step_from in range(version, SCHEMA_VERSION):
            with engine.begin() as connection:
                _STEPS[step_from](connection)
                connection.execute(text(f"PRAGMA user_version={step_from + 1}"))


def _backup(path: Path, backup: Path) -> None:
    # SQLite's online backup copies committed pages, WAL included; a plain file
    # copy could miss what still sits in the -wal file.
    with sqlite3.connect(path) as source, sqlite3.connect(backup) as target:
        source.backup(target)
