"""Schema version 10: a context size raised for one conversation, added to a
version-9 file (with its backup first), stored, listed and carried by the
JSON exchange."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from app.platform import paths
from storage import conversation_rows, exchange
from storage.db import open_database
from storage.errors import ExchangeError
from storage.probe import SCHEMA_VERSION


def _as_version_9(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("ALTER TABLE conversation DROP COLUMN context_size")
        con.execute("PRAGMA user_version = 9")
        con.commit()


def test_a_version_9_database_gains_a_context_size_per_conversation(
    data_dir: Path,
) -> None:
    path = paths.database_path(data_dir)
    db = open_database(path)
    made, _ = conversation_rows.create_conversation(db, "Old", None)
    db.close()
    _as_version_9(path)

    db = open_database(path)
    try:
        assert conversation_rows.get_conversation(db, made.id).context_size is None
        conversation_rows.set_context_size(db, made.id, 16384)
        assert conversation_rows.get_conversation(db, made.id).context_size == 16384
        listed = conversation_rows.list_conversations(db)
        assert [(c.id, c.context_size) for c in listed] == [(made.id, 16384)]
        conversation_rows.set_context_size(db, made.id, None)
        assert conversation_rows.get_conversation(db, made.id).context_size is None
    finally:
        db.close()
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    backup = path.with_name(path.name + ".v9.bak")
    with contextlib.closing(sqlite3.connect(backup)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 9


def test_the_exchange_carries_a_raised_context_size(tmp_path: Path) -> None:
    db = open_database(tmp_path / "arbor.sqlite3")
    try:
        made, _ = conversation_rows.create_conversation(db, "Long", None)
        conversation_rows.set_context_size(db, made.id, 12288)
        data = exchange.export_json(db, made.id)
        assert data["context_size"] == 12288
        copied = exchange.import_json(db, data)
        assert (
            conversation_rows.get_conversation(db, copied.conversation_id).context_size
            == 12288
        )

        del data["context_size"]  # a file from before version 10
        older = exchange.import_json(db, data)
        assert (
            conversation_rows.get_conversation(db, older.conversation_id).context_size
            is None
        )
        for bad in (0, -5, "4096", 1.5, True, 1 << 30):
            with pytest.raises(ExchangeError, match="context_size"):
                exchange.import_json(db, {**data, "context_size": bad})
    finally:
        db.close()
