"""Deleting at any depth (issue 23): paths past SQLite's 1,000 cascade levels,
what goes with the nodes, the plans that keep it proportional to what is
deleted, the schema step that adds its index, and the CLI around it.

The trees are built with raw inserts in one transaction
(``tools.scale_delete.add_nodes``), not through a model: thousands of
messages in milliseconds.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from app.platform import paths
from storage import (
    checkpoint_rows,
    conversation_rows,
    node_rows,
    setting_rows,
    text_search,
    tree_reads,
)
from storage.db import Database, open_database
from storage.errors import NotFound
from storage.probe import SCHEMA_VERSION
from tests.conftest import ROOT, run_cli
from tools.scale_delete import add_nodes, new_conversation, path_shape

# Small checkpoints: the rows and their blobs are what is checked, not bytes.
CHECKPOINT_BYTES = 64


def _what_is_stored(db: Database) -> dict[str, set[int]]:
    """The node ids that have a row of each kind: the node itself, a
    checkpoint, a checkpoint's blob, an entry in the search index."""
    with db.read_raw() as raw:

        def ids(query: str) -> set[int]:
            return {row[0] for row in raw.execute(query)}

        return {
            "nodes": ids("SELECT id FROM node"),
            "checkpoints": ids("SELECT node_id FROM checkpoint"),
            "blobs": ids(
                "SELECT c.node_id FROM checkpoint_blob b "
                "JOIN checkpoint c ON c.id = b.checkpoint_id"
            ),
            # Every generated node's text has the word; the roots' are empty.
            "indexed": ids("SELECT rowid FROM node_fts WHERE node_fts MATCH 'scale'"),
        }


def _assert_consistent(db: Database) -> None:
    """No row points to one that is gone, and the search index matches the
    messages (rank 1: checked against the node table too)."""
    with db.read_raw() as raw:
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
        orphans = raw.execute(
            "SELECT count(*) FROM checkpoint_blob "
            "WHERE checkpoint_id NOT IN (SELECT id FROM checkpoint)"
        ).fetchone()[0]
        assert orphans == 0
    # A command written as an INSERT: it needs a connection that may write.
    with sqlite3.connect(db.path) as raw:
        raw.execute(
            "INSERT INTO node_fts(node_fts, rank) VALUES ('integrity-check', 1)"
        )
    raw.close()


def _assert_gone_and_kept(db: Database, gone: list[int], kept: list[int]) -> None:
    stored = _what_is_stored(db)
    for kind, ids in stored.items():
        assert not ids & set(gone), f"deleted nodes still have {kind}"
    assert set(kept) <= stored["nodes"]
    # The roots were made without a checkpoint and with no text.
    with db.read_raw() as raw:
        roots = {
            row[0] for row in raw.execute("SELECT id FROM node WHERE role = 'root'")
        }
    for kind in ("checkpoints", "blobs", "indexed"):
        assert set(kept) - roots <= stored[kind], f"kept nodes lost {kind}"
    _assert_consistent(db)


@pytest.mark.parametrize("length", [1_001, 3_001])
def test_a_conversation_whose_path_is_deeper_than_sqlite_cascades_is_deleted(
    db, length
):
    deep, deep_ids = new_conversation(db, path_shape(length - 1), CHECKPOINT_BYTES)
    other, other_ids = new_conversation(db, path_shape(20), CHECKPOINT_BYTES)
    assert len(deep_ids) == length

    conversation_rows.delete_conversation(db, deep)

    with pytest.raises(NotFound):
        conversation_rows.get_conversation(db, deep)
    assert len(tree_reads.tree(db, other)) == len(other_ids)
    _assert_gone_and_kept(db, deep_ids, other_ids)
    hits = text_search.search(db, "scale benchmark", limit=100)
    assert {hit.conversation_id for hit in hits} == {other}


def test_a_branch_of_1002_nodes_below_the_root_is_deleted(db):
    conversation, ids = new_conversation(db, path_shape(1_002), CHECKPOINT_BYTES)
    root, branch = ids[0], ids[1:]
    beside = add_nodes(db, root, path_shape(5), CHECKPOINT_BYTES)
    _other, other_ids = new_conversation(db, path_shape(5), CHECKPOINT_BYTES)
    conversation_rows.set_active_node(db, branch[-1])

    assert node_rows.delete_subtree(db, branch[0]).parent_id == root

    # The active node was in the branch: its parent, the root, takes over.
    record = conversation_rows.get_conversation(db, conversation)
    assert record.active_node_id == root
    assert len(tree_reads.tree(db, conversation)) == 1 + len(beside)
    assert [n.id for n in node_rows.get_children(db, root)] == [beside[0]]
    _assert_gone_and_kept(db, branch, [root, *beside, *other_ids])


def test_deleting_a_branch_elsewhere_leaves_the_active_node(db):
    conversation, ids = new_conversation(db, path_shape(3), CHECKPOINT_BYTES)
    root = ids[0]
    branch = add_nodes(db, root, path_shape(1_200), CHECKPOINT_BYTES)
    conversation_rows.set_active_node(db, ids[-1])

    node_rows.delete_subtree(db, branch[0])

    assert (
        conversation_rows.get_conversation(db, conversation).active_node_id == ids[-1]
    )
    _assert_gone_and_kept(db, branch, ids)


def test_deleting_a_conversation_with_several_roots_deletes_every_tree(db):
    conversation, ids = new_conversation(db, path_shape(1_100), CHECKPOINT_BYTES)
    second = conversation_rows.add_root(db, conversation, "Another start.")
    below = add_nodes(db, second.id, path_shape(1_100), CHECKPOINT_BYTES)
    _other, other_ids = new_conversation(db, path_shape(3), CHECKPOINT_BYTES)

    conversation_rows.delete_conversation(db, conversation)

    _assert_gone_and_kept(db, [*ids, second.id, *below], other_ids)


def _plans(db: Database, call: Any) -> list[tuple[str, list[str]]]:
    """Each statement ``call`` runs that reads or writes rows, with the
    details of its query plan."""
    statements: list[tuple[str, Any]] = []

    def record(_conn, _cursor, statement, parameters, _context, executemany):
        if (
            statement.lstrip()
            .upper()
            .startswith(("SELECT", "WITH", "UPDATE", "DELETE"))
        ):
            statements.append((statement, parameters[0] if executemany else parameters))

    event.listen(db.engine, "before_cursor_execute", record)
    try:
        call()
    finally:
        event.remove(db.engine, "before_cursor_execute", record)
    with sqlite3.connect(db.path) as raw:
        plans = [
            (sql, [row[3] for row in raw.execute(f"EXPLAIN QUERY PLAN {sql}", args)])
            for sql, args in statements
        ]
    raw.close()
    return plans


def test_every_statement_of_a_deletion_finds_its_rows_through_an_index(db):
    conversation, ids = new_conversation(db, path_shape(30), CHECKPOINT_BYTES)

    plans = _plans(db, lambda: node_rows.delete_subtree(db, ids[10]))
    plans += _plans(db, lambda: conversation_rows.delete_conversation(db, conversation))

    assert any("ix_node_parent" in " ".join(plan) for _sql, plan in plans)
    for sql, plan in plans:
        # "SCAN below" reads the recursive CTE's own rows, not a table.
        scans = [step for step in plan if step.startswith("SCAN ")]
        assert scans in ([], ["SCAN below"], ["SCAN below", "SCAN below"]), sql


def test_a_version_5_database_gains_the_parent_index_and_sampling(tmp_path):
    path = tmp_path / "old.sqlite3"
    db = open_database(path)
    conversation, ids = new_conversation(db, path_shape(4), CHECKPOINT_BYTES)
    db.close()
    with sqlite3.connect(path) as con:
        con.execute("DROP INDEX ix_node_parent")
        con.execute("ALTER TABLE conversation DROP COLUMN sampling")
        con.execute("PRAGMA user_version = 5")
    con.close()

    db = open_database(path)
    try:
        assert conversation_rows.get_conversation(db, conversation).sampling is None
        assert [n.id for n in tree_reads.tree(db, conversation)] == ids
        assert [n.id for n in node_rows.get_path(db, ids[-1])] == ids
        assert {hit.node_id for hit in text_search.search(db, "scale")} == set(ids[1:])
        conversation_rows.set_conversation_sampling(
            db, conversation, {"temperature": 0.5}
        )
        record = conversation_rows.get_conversation(db, conversation)
        assert record.sampling == {"temperature": 0.5}
    finally:
        db.close()
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        plan = con.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM node WHERE parent_id = ?", (ids[0],)
        ).fetchall()
        assert "ix_node_parent" in plan[0][3]
    con.close()
    backup = tmp_path / "old.sqlite3.v5.bak"
    with sqlite3.connect(backup) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 5
        assert con.execute("SELECT count(*) FROM node").fetchone()[0] == len(ids)
        columns = {row[1] for row in con.execute("PRAGMA table_info(conversation)")}
        assert "sampling" not in columns
    con.close()


# --- the CLI -----------------------------------------------------------------


def _deep_conversation(data_dir: Path, length: int) -> tuple[int, list[int]]:
    db = open_database(paths.database_path(data_dir))
    try:
        return new_conversation(db, path_shape(length - 1), CHECKPOINT_BYTES)
    finally:
        db.close()


def test_the_cli_deletes_a_deep_conversation_and_a_deep_branch(data_dir):
    deep, _ids = _deep_conversation(data_dir, 1_001)
    other, other_ids = _deep_conversation(data_dir, 1_003)

    gone = run_cli("--data-dir", data_dir, "delete-conversation", deep)
    assert gone.json == {"deleted_conversation": deep}
    branch = run_cli("--data-dir", data_dir, "delete", other_ids[1])
    assert branch.json == {"deleted": other_ids[1], "active_node": other_ids[0]}

    listed = run_cli("--data-dir", data_dir, "list").json["conversations"]
    assert [(c["id"], c["nodes"]) for c in listed] == [(other, 1)]


# A CLI process whose deletion is the cascade Arbor used before issue 23
# (one trigger level per tree level), or fails with sqlite3's own error.
_REFUSING_CLI = """
import sqlite3, sys
from sqlalchemy import delete
from app.cli import commands as cli
from storage import conversation_rows
from storage.tables import Conversation

def cascading(db, conversation_id):
    with db.write(frees_space=True) as s:
        s.execute(delete(Conversation).where(Conversation.id == conversation_id))

def refusing(db, conversation_id):
    raise sqlite3.OperationalError("too many levels of trigger recursion")

conversation_rows.delete_conversation = {how}
sys.exit(cli.run(["--data-dir", {data_dir!r}, "delete-conversation", "{conversation}"]))
"""


@pytest.mark.parametrize("how", ["cascading", "refusing"])
def test_a_deletion_sqlite_refuses_is_one_line_not_a_traceback(data_dir, how):
    deep, _ids = _deep_conversation(data_dir, 1_001)
    program = _REFUSING_CLI.format(how=how, data_dir=str(data_dir), conversation=deep)

    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )

    assert result.returncode == 1
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        "arbor: error: the database could not do this: "
        "too many levels of trigger recursion."
    ]
    listed = run_cli("--data-dir", data_dir, "list").json["conversations"]
    assert [(c["id"], c["nodes"]) for c in listed] == [(deep, 1_001)]


# The budget preference counts megabytes: 1 is the least.
BUDGET = 1024 * 1024


def _over_budget(data_dir: Path) -> tuple[int, int]:
    """A database with a budget of 1 MB and, from an earlier conversation,
    checkpoints older than any to come and more than the budget; the new
    conversation to go on with, and its root."""
    db = open_database(paths.database_path(data_dir))
    try:
        setting_rows.set_setting(db, "checkpoint_budget_mb", BUDGET // (1024 * 1024))
        new_conversation(db, path_shape(3), checkpoint_bytes=BUDGET // 2)
        assert checkpoint_rows.total_checkpoint_bytes(db) > BUDGET
        conversation, root = conversation_rows.create_conversation(db, None, None)
        return conversation.id, root.id
    finally:
        db.close()


def _checkpoints_after(data_dir: Path, conversation: int) -> tuple[int, list[int]]:
    """All checkpoint bytes, and those of each node of ``conversation``."""
    db = open_database(paths.database_path(data_dir))
    try:
        sizes = [n.checkpoint_bytes for n in tree_reads.tree(db, conversation)]
        return checkpoint_rows.total_checkpoint_bytes(db), sizes
    finally:
        db.close()


def test_a_cli_reply_past_the_checkpoint_budget_evicts_down_to_it(arbor, data_dir):
    conversation, root = _over_budget(data_dir)

    reply = arbor("send", root, "Hi", "--temperature", "0", "--max-tokens", "3")

    assert reply["evicted_bytes"] >= BUDGET // 2
    total, sizes = _checkpoints_after(data_dir, conversation)
    assert total <= BUDGET
    # Least recently used first: the reply's own stay.
    assert len(sizes) == 3 and all(sizes)


def test_a_cli_restore_past_the_checkpoint_budget_evicts_down_to_it(arbor, data_dir):
    conversation, root = _over_budget(data_dir)

    # The root's span is rendered and checkpointed on this first visit.
    restored = arbor("restore", root)

    assert restored["evicted_bytes"] >= BUDGET // 2
    total, sizes = _checkpoints_after(data_dir, conversation)
    assert total <= BUDGET
    assert all(sizes)
