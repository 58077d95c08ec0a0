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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from storage import probe
from storage.errors import StorageUnavailable
from storage.values import HIDDEN_ORIGINS, Origin


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
    # Where it was made, when not in the window or the CLI (None): the local
    # server, for a conversation an API client began.
    origin: Origin | None = None
    # The program that made it, where an API client said (its user agent or
    # a header); None for the window, the CLI and clients that said nothing.
    client: str | None = None
    # The context size its model loads with, where raised for this
    # conversation alone; None: the Settings' own.
    context_size: int | None = None


# A conversation's stored columns, in the order ``conversation_from_stored``
# reads them: the raw reads select them, the ORM path reads these attributes.
CONVERSATION_COLUMNS = (
    "id",
    "title",
    "system_prompt",
    "active_node_id",
    "created_at",
    "updated_at",
    "node_count",
    "checkpoint_bytes",
    "reasoning",
    "model_path",
    "model_identity",
    "sampling",
    "origin",
    "client",
    "context_size",
)
_COLUMNS = ", ".join(f"c.{name}" for name in CONVERSATION_COLUMNS)

# Scratch conversations (``HIDDEN_ORIGINS``: a local server's background
# tasks) exist for one answer and are never listed.
_HIDDEN = ", ".join(f"'{origin}'" for origin in sorted(HIDDEN_ORIGINS))
_SHOWN = f"(c.origin IS NULL OR c.origin NOT IN ({_HIDDEN}))"

_LISTING = f"""
SELECT {_COLUMNS}
FROM conversation AS c
WHERE {_SHOWN} {{where}}
ORDER BY c.updated_at DESC, c.id DESC
"""

# One conversation by id, for ``conversation_from_stored``.
CONVERSATION_BY_ID = f"SELECT {_COLUMNS} FROM conversation AS c WHERE c.id = ?"

# The filter matches the title or any message's text, case-insensitively
# (SQLite's LIKE folds ASCII case); % and _ in it are matched literally.
_FILTER = """
AND (c.title LIKE :pattern ESCAPE '\\'
   OR c.id IN (SELECT conversation_id FROM node WHERE text LIKE :pattern ESCAPE '\\'))
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
    return [conversation_from_stored(row) for row in rows]


@dataclass(frozen=True)
class Opening:
    """A start of a conversation (its system prompt and the tools it offers)
    under which a first message with a given text was sent."""

    conversation_id: int
    start_id: int
    system: str
    tool_use: dict[str, Any] | None


# The starts, among the ``:limit`` most recently updated conversations of one
# origin and client, that have a user message ``:text`` as a child. Bounded
# by the limit, not by the file: the conversations come in ``updated_at``
# order from its index, each one's starts from ``ix_node_conversation_parent``
# and their children from ``ix_node_parent``; only first messages are read.
# (CROSS JOIN keeps that order: SQLite would otherwise start from every
# start in the file.)
_OPENINGS = """
SELECT r.conversation_id, r.id, r.text, r.tool_use
FROM (
    SELECT id, updated_at FROM conversation
    WHERE origin = :origin AND client IS :client
    ORDER BY updated_at DESC, id DESC
    LIMIT :limit
) AS c
CROSS JOIN node AS r ON r.conversation_id = c.id AND r.parent_id IS NULL
WHERE EXISTS (
    SELECT 1 FROM node AS u
    WHERE u.parent_id = r.id AND u.role = 'user' AND u.text = :text
)
ORDER BY c.updated_at DESC, c.id DESC, r.id DESC
"""


def openings(
    connection: sqlite3.Connection,
    text: str,
    origin: Origin,
    client: str | None,
    limit: int,
) -> list[Opening]:
    """The starts under which a first message ``text`` was sent, in the
    ``limit`` most recently updated conversations made by ``client`` (None:
    one that did not say) from ``origin``; the most recent first."""
    rows = connection.execute(
        _OPENINGS,
        {"origin": origin, "client": client, "limit": limit, "text": text},
    )
    return [
        Opening(conversation_id, start_id, system or "", stored_json(tool_use))
        for conversation_id, start_id, system, tool_use in rows
    ]


def hidden_conversations(connection: sqlite3.Connection, origin: Origin) -> list[int]:
    """The ids of the conversations of ``origin``, one of ``HIDDEN_ORIGINS``
    (which no listing shows)."""
    if origin not in HIDDEN_ORIGINS:
        raise ValueError(f"{origin!r} is listed; hidden_conversations is for the rest")
    rows = connection.execute(
        "SELECT id FROM conversation WHERE origin = ? ORDER BY id", (origin,)
    )
    return [conversation_id for (conversation_id,) in rows]


def conversation_from_stored(values: Sequence[Any]) -> ConversationRecord:
    """The record of a conversation's stored values in ``CONVERSATION_COLUMNS``
    order: the one mapping, for rows sqlite3 reads (text) and for the ORM's
    attributes (already converted) alike."""
    (
        conversation_id,
        title,
        system_prompt,
        active_node_id,
        created_at,
        updated_at,
        node_count,
        checkpoint_bytes,
        reasoning,
        model_path,
        model_identity,
        sampling,
        origin,
        client,
        context_size,
    ) = values
    return ConversationRecord(
        id=conversation_id,
        title=title,
        system_prompt=system_prompt,
        active_node_id=active_node_id,
        created_at=timestamp(created_at),
        updated_at=timestamp(updated_at),
        node_count=node_count,
        checkpoint_bytes=checkpoint_bytes,
        reasoning=reasoning,
        model_path=model_path,
        model_identity=model_identity,
        sampling=stored_json(sampling),
        origin=None if origin is None else Origin(origin),
        client=client,
        context_size=context_size,
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


def timestamp(value: str | datetime) -> datetime:
    """A DateTime column's value: sqlite3 gives the text SQLAlchemy stores on
    SQLite ("YYYY-MM-DD HH:MM:SS[.ffffff]"), the ORM the datetime itself."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)


def stored_json(value: Any) -> Any:
    """A JSON column's value: sqlite3 gives its text, the ORM the value.

    Every JSON column holds an object, a list or nothing, so text is always
    the stored form; SQLAlchemy stores None as the text "null", which most
    rows (a question's figures, a conversation without its own sampling) are.
    """
    if not isinstance(value, str):
        return value
    return None if value == "null" else json.loads(value)
