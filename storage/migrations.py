"""Schema versioning with a ``PRAGMA user_version`` ladder.

``storage.probe.inspect_file`` looks at a file first; only a file that is new,
or carries Arbor's tables and a schema version we understand, reaches this
module. Each upgrade step runs in its own transaction after a file backup. A database
from a newer Arbor is refused untouched rather than damaged.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from storage.counters import create_counters, drop_counters
from storage.errors import StorageUnavailable
from storage.probe import SCHEMA_VERSION
from storage.tables import Base, checkpoint_checksum

log = logging.getLogger(__name__)

# --- creating and upgrading ---------------------------------------------------


def upgrade(engine: Engine, path: Path, version: int) -> None:
    """Create (``version`` 0) or upgrade the schema of the database at ``path``.

    ``version`` is what ``inspect_file`` found; ``engine`` opens the file for
    writing.
    """
    if version == 0:
        _create(engine)
        return
    if version < SCHEMA_VERSION:
        backup = path.with_suffix(path.suffix + f".v{version}.bak")
        _backup(path, backup)
        for step_from in range(version, SCHEMA_VERSION):
            _run_step(engine, step_from)


def _create(engine: Engine) -> None:
    # auto_vacuum=INCREMENTAL was set by the engine's connect hook (db.py),
    # which must run it before the switch to WAL.
    with engine.begin() as connection:
        Base.metadata.create_all(connection)
        # create_all knows no virtual tables: the search index comes from the
        # same function as the upgrade's, so both paths build the same schema.
        raw: sqlite3.Connection = connection.connection.dbapi_connection  # type: ignore[assignment]
        create_search_index(raw)
        create_counters(raw)
        connection.execute(text(f"PRAGMA user_version={SCHEMA_VERSION}"))


def _run_step(engine: Engine, step_from: int) -> None:
    """Run one upgrade step and record its version, in one transaction."""
    with engine.connect() as connection:
        raw: sqlite3.Connection = connection.connection.dbapi_connection  # type: ignore[assignment]
        # Table rebuilds need foreign keys off, and the pragma is a no-op
        # inside a transaction, so it is set before BEGIN and restored after.
        raw.execute("PRAGMA foreign_keys=OFF")
        try:
            raw.execute("BEGIN IMMEDIATE")
            try:
                _STEPS[step_from](raw)
                _check_foreign_keys(raw)
                raw.execute(f"PRAGMA user_version={step_from + 1}")
                raw.execute("COMMIT")
            except BaseException:
                raw.execute("ROLLBACK")
                raise
        finally:
            raw.execute("PRAGMA foreign_keys=ON")


def _check_foreign_keys(raw: sqlite3.Connection) -> None:
    problems = raw.execute("PRAGMA foreign_key_check").fetchall()
    if problems:
        tables = sorted({row[0] for row in problems})
        raise StorageUnavailable(
            "The database is damaged (rows point to rows that do not exist, in "
            f"{', '.join(tables)}); it was not upgraded. A backup was saved beside it."
        )


def _backup(path: Path, backup: Path) -> None:
    # SQLite's online backup copies committed pages, WAL included; a plain file
    # copy could miss what still sits in the -wal file.
    with (
        contextlib.closing(sqlite3.connect(path)) as source,
        contextlib.closing(sqlite3.connect(backup)) as target,
    ):
        source.backup(target)


# --- the steps ----------------------------------------------------------------


def _add_reasoning_and_span_text(raw: sqlite3.Connection) -> None:
    # Version 2: replies keep their reasoning apart from the answer, nodes keep
    # the text their span was rendered from, conversations their reasoning
    # choice. Existing rows get "no reasoning" and an unknown span text (filled
    # in from the tokens the next time a model loads them).
    raw.execute("ALTER TABLE node ADD COLUMN thinking TEXT NOT NULL DEFAULT ''")
    raw.execute("ALTER TABLE node ADD COLUMN span_text TEXT")
    raw.execute("ALTER TABLE conversation ADD COLUMN reasoning VARCHAR(16)")


# Tables whose ids must never be given twice (version 3).
_AUTOINCREMENT_TABLES = ("conversation", "node", "checkpoint")


def _autoincrement_ids_and_bound_checksums(raw: sqlite3.Connection) -> None:
    # Version 3: ids are never reused (AUTOINCREMENT), and checkpoint checksums
    # bind the bytes to their node, profile, span and tokens. Checkpoints are
    # re-bound after their old CRC-32 is verified; damaged ones are dropped
    # (they are a cache, rebuilt from tokens on the next visit).
    _drop_orphan_checkpoints(raw)
    # Only in a file whose version was set back by hand (tests do); version 7
    # creates them again.
    drop_counters(raw)
    for name in _AUTOINCREMENT_TABLES:
        _rebuild_table(raw, name)
    _rebind_checksums(raw)


def _drop_orphan_checkpoints(raw: sqlite3.Connection) -> None:
    # Rows deleted by hand with foreign keys off (e.g. the sqlite3 shell) leave
    # checkpoints or blobs behind that would fail the foreign key check.
    raw.execute(
        "DELETE FROM checkpoint WHERE node_id NOT IN (SELECT id FROM node) "
        "OR profile_id NOT IN (SELECT id FROM backend_profile)"
    )
    raw.execute(
        "DELETE FROM checkpoint_blob WHERE checkpoint_id NOT IN "
        "(SELECT id FROM checkpoint)"
    )


def _rebuild_table(raw: sqlite3.Connection, name: str) -> None:
    # SQLite cannot add AUTOINCREMENT to a table, so this follows its
    # "12-step" recipe: create the new table, copy every row (ids included),
    # drop the old one, rename the new one, recreate the indexes. Copying the
    # ids makes SQLite record max(id) in sqlite_sequence, the seed of new ids.
    table = Base.metadata.tables[name]
    dialect = sqlite.dialect()
    temporary = f"arbor_new_{name}"
    create = str(CreateTable(table).compile(dialect=dialect)).strip()
    raw.execute(
        create.replace(f"CREATE TABLE {name} ", f"CREATE TABLE {temporary} ", 1)
    )
    # Only the columns the old table has: the new one may have columns a later
    # step adds (they start NULL here, and that step finds them there).
    old = _column_names(raw, name)
    columns = ", ".join(c.name for c in table.columns if c.name in old)
    raw.execute(
        f"INSERT INTO {temporary} ({columns}) SELECT {columns} FROM {name} ORDER BY id"
    )
    raw.execute(f"DROP TABLE {name}")
    raw.execute(f"ALTER TABLE {temporary} RENAME TO {name}")
    for index in table.indexes:
        raw.execute(str(CreateIndex(index).compile(dialect=dialect)))


def _rebind_checksums(raw: sqlite3.Connection) -> None:
    ids = [row[0] for row in raw.execute("SELECT id FROM checkpoint")]
    for checkpoint_id in ids:
        # One blob at a time: checkpoints can be gigabytes in all.
        row = raw.execute(
            "SELECT c.node_id, p.fingerprint, c.kind, c.start_pos, c.end_pos, "
            "c.checksum, n.tokens, b.data FROM checkpoint c "
            "JOIN node n ON n.id = c.node_id "
            "JOIN backend_profile p ON p.id = c.profile_id "
            "LEFT JOIN checkpoint_blob b ON b.checkpoint_id = c.id WHERE c.id = ?",
            (checkpoint_id,),
        ).fetchone()
        node_id, profile, kind, start, end, old, tokens, data = row
        if not (_crc32_intact(old, data) and isinstance(tokens, bytes)):
            # Foreign keys are off here: no cascade, so the blob goes by hand.
            raw.execute(
                "DELETE FROM checkpoint_blob WHERE checkpoint_id = ?", (checkpoint_id,)
            )
            raw.execute("DELETE FROM checkpoint WHERE id = ?", (checkpoint_id,))
            continue
        checksum = checkpoint_checksum(node_id, profile, kind, start, end, tokens, data)
        raw.execute(
            "UPDATE checkpoint SET checksum = ? WHERE id = ?", (checksum, checkpoint_id)
        )


def _crc32_intact(checksum: object, data: object) -> bool:
    # The version-2 format: "crc32:" and eight hex digits of the bytes alone.
    if not isinstance(data, bytes) or not isinstance(checksum, str):
        return False
    return checksum == f"crc32:{zlib.crc32(data):08x}"


# --- the search index -----------------------------------------------------------

# Full-text search over every message (its answer and its reasoning). An
# external-content FTS5 table: it stores only the index, the text stays in
# ``node``. Triggers keep it in step with every insert, edit and delete,
# including rows removed by ON DELETE CASCADE (foreign-key actions fire
# triggers), so no Python code path can forget to update it. unicode61 splits
# on anything that is not a letter or digit and, with remove_diacritics 2,
# finds "cafe" in "café"; people type words, and the last one is searched as
# a prefix while they type. The prefix index ('2 3') makes those short
# prefixes cheap: "th*" otherwise merges the lists of every word starting
# with "th" (50 ms on 5,000 messages, 7 with it; the index grows by a third).
# trigram would find any substring but needs three characters per term and
# an index several times the size.
#
# A step that rebuilds the node table (as _rebuild_table does) drops these
# triggers with the old table: it must call create_search_index again.
SEARCH_TABLE = "node_fts"

_SEARCH_SCHEMA = (
    "CREATE VIRTUAL TABLE node_fts USING fts5(text, thinking, content='node', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2', prefix='2 3')",
    "CREATE TRIGGER node_fts_insert AFTER INSERT ON node BEGIN "
    "INSERT INTO node_fts(rowid, text, thinking) "
    "VALUES (new.id, new.text, new.thinking); END",
    # An external-content index deletes by the values it indexed: the old ones.
    "CREATE TRIGGER node_fts_delete AFTER DELETE ON node BEGIN "
    "INSERT INTO node_fts(node_fts, rowid, text, thinking) "
    "VALUES ('delete', old.id, old.text, old.thinking); END",
    "CREATE TRIGGER node_fts_update AFTER UPDATE OF text, thinking ON node BEGIN "
    "INSERT INTO node_fts(node_fts, rowid, text, thinking) "
    "VALUES ('delete', old.id, old.text, old.thinking); "
    "INSERT INTO node_fts(rowid, text, thinking) "
    "VALUES (new.id, new.text, new.thinking); END",
)


def fts5_available(raw: sqlite3.Connection) -> bool:
    """Whether this SQLite library has FTS5 (every common build does)."""
    options = {row[0] for row in raw.execute("PRAGMA compile_options")}
    return "ENABLE_FTS5" in options


def create_search_index(raw: sqlite3.Connection) -> None:
    """Create (or recreate) the search index and its triggers, then fill it.

    Runs inside the caller's transaction. Where SQLite lacks FTS5 the index is
    left out and search reads the messages themselves (slower, same results
    for plain words).
    """
    raw.execute(f"DROP TABLE IF EXISTS {SEARCH_TABLE}")
    for trigger in ("insert", "delete", "update"):
        raw.execute(f"DROP TRIGGER IF EXISTS node_fts_{trigger}")
    if not fts5_available(raw):
        log.warning("SQLite has no FTS5: search will scan the messages")
        return
    for statement in _SEARCH_SCHEMA:
        raw.execute(statement)
    raw.execute(f"INSERT INTO {SEARCH_TABLE}({SEARCH_TABLE}) VALUES ('rebuild')")


def _add_search_index(raw: sqlite3.Connection) -> None:
    # Version 4: the full-text index of every message, built from the rows
    # already there.
    create_search_index(raw)


def _add_conversation_model(raw: sqlite3.Connection) -> None:
    # Version 5: the model each conversation was made with (unknown, NULL,
    # for the conversations already there). A table rebuilt by an earlier
    # step of this upgrade has the columns already.
    have = _column_names(raw, "conversation")
    for column, kind in (("model_path", "TEXT"), ("model_identity", "VARCHAR(64)")):
        if column not in have:
            raw.execute(f"ALTER TABLE conversation ADD COLUMN {column} {kind}")


def _add_parent_index_and_sampling(raw: sqlite3.Connection) -> None:
    # Version 6: an index on node.parent_id alone (deleting a node finds its
    # children through it instead of scanning the file), and the sampling
    # each conversation was given (NULL: the Settings' own).
    raw.execute("CREATE INDEX IF NOT EXISTS ix_node_parent ON node (parent_id)")
    if "sampling" not in _column_names(raw, "conversation"):
        raw.execute("ALTER TABLE conversation ADD COLUMN sampling JSON")


def _add_counters(raw: sqlite3.Connection) -> None:
    # Version 7: each conversation keeps its node count and checkpoint bytes
    # (storage/counters.py), counted here once from the rows already there.
    have = _column_names(raw, "conversation")
    for column in ("node_count", "checkpoint_bytes"):
        if column not in have:
            raw.execute(
                f"ALTER TABLE conversation ADD COLUMN {column} "
                "INTEGER NOT NULL DEFAULT 0"
            )
    create_counters(raw)


def _add_origin(raw: sqlite3.Connection) -> None:
    # Version 8: where each conversation was made, when not in the window or
    # the CLI (NULL). The local server made those it remembers for its
    # clients, one setting per client under this key (app/server/completion.py
    # wrote it so before this version; a conversation the server made and the
    # window deleted is no longer remembered, nor there). Its values are
    # conversation ids, stored as JSON text, read back as numbers.
    if "origin" not in _column_names(raw, "conversation"):
        raw.execute("ALTER TABLE conversation ADD COLUMN origin VARCHAR(32)")
    raw.execute(
        "UPDATE conversation SET origin = 'local server' WHERE id IN "
        "(SELECT CAST(value AS INTEGER) FROM setting "
        "WHERE key LIKE 'server.conversation:%')"
    )


def _add_tool_use_and_client(raw: sqlite3.Connection) -> None:
    # Version 9: tool calls (a start's tools, a reply's calls, a tool
    # result's call: node.tool_use) and the program that made a conversation
    # through the local server (conversation.client). NULL for what is there.
    if "tool_use" not in _column_names(raw, "node"):
        raw.execute("ALTER TABLE node ADD COLUMN tool_use JSON")
    if "client" not in _column_names(raw, "conversation"):
        raw.execute("ALTER TABLE conversation ADD COLUMN client VARCHAR(100)")


def _add_context_size(raw: sqlite3.Connection) -> None:
    # Version 10: a context size raised for one conversation
    # (conversation.context_size); NULL, the Settings' own, for what is there.
    if "context_size" not in _column_names(raw, "conversation"):
        raw.execute("ALTER TABLE conversation ADD COLUMN context_size INTEGER")


def _column_names(raw: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in raw.execute(f"PRAGMA table_info({table})")}


# Steps from version N to N+1, keyed by N. Version 1 is the first schema.
_STEPS: dict[int, Callable[[sqlite3.Connection], None]] = {
    1: _add_reasoning_and_span_text,
    2: _autoincrement_ids_and_bound_checksums,
    3: _add_search_index,
    4: _add_conversation_model,
    5: _add_parent_index_and_sampling,
    6: _add_counters,
    7: _add_origin,
    8: _add_tool_use_and_client,
    9: _add_context_size,
}
