"""The list of conversations, read with the standard library's sqlite3.

Listing is what start-up needs first, and importing SQLAlchemy's ORM costs
more than everything else ``arbor list`` does together. So the listing is one
SQL statement over a plain sqlite3 connection: ``conversation_rows`` runs it inside
its own read transaction, and ``read_listing`` runs it on a read-only
connection of its own, without SQLAlchemy, when the file is already at the
current schema. Anything less ordinary (a new, old, foreign or locked file)
is left to ``storage.db.open_database``, which knows what to say about it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from storage import probe
from storage.errors import StorageUnavailable


@dataclass(frozen=True)
class ConversationRecord:
    """A conversation with the figures a list shows."""

    id: int
    title: str
    system_prompt: str | None
    active_node_id: int | None
    created_at: datetime
    updated_at: datetime
    node_count: int = 0
    checkpoint_bytes: int = 0
    reasoning: str | None = None
    model_path: str | None = None
    model_identity: str | None = None
    # The sampling its replies use (``SamplingParams`` fields and the preset's
    # name); None: the Settings' own.
    sampling: dict[str, Any] | None = None


# A conversation's columns in the order ``conversation_record`` reads them.
_COLUMNS = """c.id, c.title, c.system_prompt, c.active_node_id, c.created_at,
       c.updated_at, c.node_count, c.checkpoint_bytes, c.reasoning,
       c.model_path, c.model_identity, c.sampling"""

_LISTING = f"""
SELECT {_COLUMNS}
FROM conversation AS c
{{where}}
ORDER BY c.updated_at DESC, c.id DESC
"""

# One conversation by id, for ``conversation_record``.
CONVERSATION_BY_ID = f"SELECT {_COLUMNS} FROM conversation AS c WHERE c.id = ?"

# The filter matches the title or any message's text, case-insensitively
# (SQLite's LIKE folds ASCII case); % and _ in it are matched literally.
_FILTER = """
WHERE c.title LIKE :pattern ESCAPE '\\'
   OR c.id IN (SELECT conversation_id FROM node WHERE text LIKE :pattern ESCAPE '\\')
"""


_UNFINISHED = "SELECT 1 FROM node WHERE status = 'generating' LIMIT 1"


def has_unfinished_replies(connection: sqlite3.Connection) -> bool:
    """Whether a reply was left "generating" (by a process that died)."""
    return connection.execute(_UNFINISHED).fetchone() is not None


def list_conversations(
    connection: sqlite3.Connection, text_filter: str | None = None
) -> list[ConversationRecord]:
    """Conversations, most recently updated first, optionally filtered by text."""
    if text_filter:
        escaped = (
            text_filter.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        )
        rows = connection.execute(
            _LISTING.format(where=_FILTER), {"pattern": f"%{escaped}%"}
        )
    else:
        rows = connection.execute(_LISTING.format(where=""))
    return [conversation_record(row) for row in rows]


def conversation_record(row: tuple[Any, ...]) -> ConversationRecord:
    """The record of a row of the listing's columns (``CONVERSATION_BY_ID``)."""
    return ConversationRecord(
        id=row[0],
        title=row[1],
        system_prompt=row[2],
        active_node_id=row[3],
        created_at=timestamp(row[4]),
        updated_at=timestamp(row[5]),
        node_count=row[6],
        checkpoint_bytes=row[7],
        reasoning=row[8],
        model_path=row[9],
        model_identity=row[10],
        sampling=json.loads(row[11]) if row[11] is not None else None,
    )


def read_listing(path: Path) -> list[ConversationRecord] | None:
    """The conversations in the database at ``path``, read without SQLAlchemy.

    None when the file needs more than reading (it is new, at an older
    schema, not Arbor's, locked, or otherwise unusual): then open it with
    ``open_database``, which creates, upgrades or explains.
    """
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        # Read-only: an ordinary connection could not remove the -wal and -shm
        # files it makes; open_database reads such files without them.
        return None
    try:
        if probe.inspect_file(path) != probe.SCHEMA_VERSION:
            return None
        # Not mode=ro: a read-only connection to a WAL database leaves -wal and
        # -shm files behind, which the last ordinary connection removes on
        # closing. query_only keeps this one from writing anything else.
        with contextlib.closing(
            sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True)
        ) as connection:
            connection.execute("PRAGMA query_only = 1")
            if has_unfinished_replies(connection):
                # A reply left "generating" by a process that died: the full
                # way closes it first, as every command's open does.
                return None
            return list_conversations(connection)
    except (StorageUnavailable, sqlite3.Error):
        return None  # the full way reports it, in the words it has for each case


def timestamp(value: str) -> datetime:
    """A DateTime column's value read as sqlite3 gives it: SQLAlchemy stores it
    on SQLite as "YYYY-MM-DD HH:MM:SS[.ffffff]"."""
    return datetime.fromisoformat(value)
