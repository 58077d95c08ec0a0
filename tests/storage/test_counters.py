"""The node count and checkpoint bytes each conversation keeps (issue 23):
equal to its rows after every kind of write, on a real SQLite file, and
counted once for a file from before them (schema 7, with its backup)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from storage import checkpoint_rows, conversation_rows, exchange, node_rows
from storage.db import Database, open_database
from storage.probe import SCHEMA_VERSION
from tools.scale_delete import (
    PROFILE,
    add_nodes,
    bushy_shape,
    new_conversation,
    path_shape,
)

CHECKPOINT_BYTES = 300


def _counted_from_rows(path: Path) -> dict[int, tuple[int, int]]:
    """Each conversation's nodes and checkpoint bytes, counted the long way."""
    with sqlite3.connect(path) as raw:
        rows = raw.execute(
            "SELECT c.id, "
            "(SELECT count(*) FROM node WHERE node.conversation_id = c.id), "
            "(SELECT coalesce(sum(k.byte_size), 0) FROM checkpoint AS k "
            " JOIN node ON node.id = k.node_id WHERE node.conversation_id = c.id) "
            "FROM conversation AS c"
        ).fetchall()
    raw.close()
    return {row[0]: (row[1], row[2]) for row in rows}


def _listed(db: Database) -> dict[int, tuple[int, int]]:
    return {
        c.id: (c.node_count, c.checkpoint_bytes)
        for c in conversation_rows.list_conversations(db)
    }


def _assert_kept(db: Database) -> None:
    assert _listed(db) == _counted_from_rows(db.path)
    assert checkpoint_rows.total_checkpoint_bytes(db) == sum(
        size for _nodes, size in _counted_from_rows(db.path).values()
    )


def test_the_counts_follow_every_kind_of_write(db):
    first, ids = new_conversation(db, bushy_shape(60), CHECKPOINT_BYTES)
    second, other = new_conversation(db, path_shape(25), CHECKPOINT_BYTES)
    assert _listed(db) == {
        first: (61, 60 * CHECKPOINT_BYTES),
        second: (26, 25 * CHECKPOINT_BYTES),
    }
    _assert_kept(db)

    # A message through the ORM, a new start, a checkpoint saved and replaced.
    node = node_rows.add_node(db, ids[-1], "user", "one more", tokens=[1, 2, 3])
    profile = checkpoint_rows.ensure_profile(db, PROFILE, {"tool": PROFILE})
    checkpoint_rows.save_checkpoint(db, node.id, profile, "delta", 0, 3, b"x" * 1000)
    checkpoint_rows.save_checkpoint(db, node.id, profile, "delta", 0, 3, b"y" * 10)
    conversation_rows.add_root(db, first, "a new system prompt")
    _assert_kept(db)
    assert _listed(db)[first] == (63, 60 * CHECKPOINT_BYTES + 10)

    # An import (messages only: the file carries no checkpoints).
    imported = exchange.import_json(db, exchange.export_json(db, second))
    assert _listed(db)[imported.conversation_id] == (26, 0)

    # Raw inserts below a node, then a branch deleted, then checkpoints of
    # some nodes and of a whole conversation, then eviction to a budget.
    add_nodes(db, other[3], [-1, 0, 1], CHECKPOINT_BYTES)
    node_rows.delete_subtree(db, ids[1])
    _assert_kept(db)
    checkpoint_rows.delete_checkpoints(db, node_ids=other[:5])
    checkpoint_rows.delete_checkpoints(db, conversation_id=first)
    _assert_kept(db)
    checkpoint_rows.evict_checkpoints(db, budget_bytes=10 * CHECKPOINT_BYTES)
    _assert_kept(db)
    assert checkpoint_rows.total_checkpoint_bytes(db) <= 10 * CHECKPOINT_BYTES

    conversation_rows.delete_conversation(db, first)
    _assert_kept(db)
    assert first not in _listed(db)


def test_a_node_deleted_alone_takes_its_checkpoints_off_the_count(db):
    # A leaf deleted by a plain DELETE: its checkpoints go by the foreign
    # key's cascade, after the node, where they could not find their
    # conversation any more; the node takes them off first.
    conversation, ids = new_conversation(db, bushy_shape(5), CHECKPOINT_BYTES)
    leaves = set(ids) - {
        row[0] for row in sqlite3.connect(db.path).execute("SELECT parent_id FROM node")
    }
    with sqlite3.connect(db.path) as raw:
        raw.execute("PRAGMA foreign_keys = ON")
        raw.execute("DELETE FROM node WHERE id = ?", (max(leaves),))
    raw.close()
    assert _listed(db)[conversation] == (5, 4 * CHECKPOINT_BYTES)
    _assert_kept(db)


def test_a_version_6_database_is_counted_once_and_kept_after(tmp_path):
    path = tmp_path / "old.sqlite3"
    db = open_database(path)
    conversation, ids = new_conversation(db, bushy_shape(40), CHECKPOINT_BYTES)
    db.close()
    with sqlite3.connect(path) as con:
        for trigger in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' "
            "AND name NOT LIKE 'node_fts%'"
        ).fetchall():
            con.execute(f"DROP TRIGGER {trigger[0]}")
        con.execute("ALTER TABLE conversation DROP COLUMN node_count")
        con.execute("ALTER TABLE conversation DROP COLUMN checkpoint_bytes")
        con.execute("PRAGMA user_version = 6")
    con.close()

    db = open_database(path)
    try:
        assert _listed(db) == {conversation: (41, 40 * CHECKPOINT_BYTES)}
        node_rows.delete_subtree(db, ids[2])
        add_nodes(db, ids[0], [-1, 0], CHECKPOINT_BYTES)
        _assert_kept(db)
    finally:
        db.close()
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()
    with sqlite3.connect(tmp_path / "old.sqlite3.v6.bak") as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 6
        columns = {row[1] for row in con.execute("PRAGMA table_info(conversation)")}
        assert "node_count" not in columns
    con.close()
