"""Schema version 9: a node's part in tool use and a conversation's client,
added to a version-8 file (with its backup first), refused read-only."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from app.platform import paths
from storage import conversation_rows, node_rows, tool_use
from storage.db import _open_read_only, open_database
from storage.errors import StorageUnavailable
from storage.probe import SCHEMA_VERSION
from storage.values import Role
from tests.conftest import run_cli


def _as_version_8(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("ALTER TABLE node DROP COLUMN tool_use")
        con.execute("ALTER TABLE conversation DROP COLUMN client")
        con.execute("ALTER TABLE conversation DROP COLUMN context_size")
        con.execute("PRAGMA user_version = 8")
        con.commit()


def test_a_version_8_database_gains_tool_use_and_client(data_dir: Path) -> None:
    path = paths.database_path(data_dir)
    db = open_database(path)
    made, root = conversation_rows.create_conversation(db, "Old", None)
    node_rows.add_node(db, root.id, Role.USER, "Hello")
    db.close()
    _as_version_8(path)

    listed = run_cli("--data-dir", data_dir, "list").json["conversations"]
    assert [(c["id"], c["client"]) for c in listed] == [(made.id, None)]
    db = open_database(path)
    try:
        assert all(n.tool_use is None for n in node_rows.get_path(db, root.id + 1))
        reply = node_rows.add_node(
            db,
            root.id + 1,
            Role.ASSISTANT,
            "",
            tool_use=tool_use.calling([{"id": "c", "name": "f", "arguments": "{}"}]),
        )
        assert tool_use.calls_of(node_rows.get_node(db, reply.id).tool_use) == [
            {"id": "c", "name": "f", "arguments": "{}"}
        ]
    finally:
        db.close()
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    backup = path.with_name(path.name + ".v8.bak")
    with contextlib.closing(sqlite3.connect(backup)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 8
        columns = {row[1] for row in con.execute("PRAGMA table_info(node)")}
        assert "tool_use" not in columns


def test_a_version_8_database_that_cannot_be_written_is_refused(
    tmp_path: Path,
) -> None:
    # Every listing reads the new columns; adding them needs write access.
    path = tmp_path / "arbor.sqlite3"
    open_database(path).close()
    _as_version_8(path)
    with pytest.raises(StorageUnavailable, match="must be upgraded before it can"):
        _open_read_only(path, 8, "a read-only folder", 1000)
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 8
