"""The SQLite layer on real files: schema, pragmas, refusals, cascades, eviction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from storage import checkpoint_rows, conversation_rows, node_rows, tree_reads
from storage.db import open_database
from storage.errors import NotFound, StorageUnavailable
from storage.migrations import SCHEMA_VERSION


@pytest.fixture
def db(tmp_path: Path):
    database = open_database(tmp_path / "arbor.sqlite3", busy_timeout_ms=200)
    yield database
    database.close()


def _chain(db, length: int) -> list[int]:
    _conv, root = conversation_rows.create_conversation(db, "t", None)
    ids = [root.id]
    for i in range(length):
        role = "user" if i % 2 == 0 else "assistant"
        ids.append(node_rows.add_node(db, ids[-1], role, f"m{i}", tokens=[i, i + 1]).id)
    return ids


def test_new_database_has_schema_wal_and_foreign_keys(db):
    with db.engine.connect() as con:
        raw = con.connection.dbapi_connection
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert raw.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_foreign_file_is_refused_untouched(tmp_path: Path):
    junk = tmp_path / "junk.sqlite3"
    junk.write_bytes(b"definitely not sqlite" * 100)
    with pytest.raises(StorageUnavailable, match="not an Arbor database"):
        open_database(junk)
    assert junk.read_bytes() == b"definitely not sqlite" * 100

    other_app = tmp_path / "other.sqlite3"
    with sqlite3.connect(other_app) as con:
        con.execute("CREATE TABLE contacts (name)")
    with pytest.raises(StorageUnavailable, match="not an Arbor database"):
        open_database(other_app)


def test_locked_database_gives_a_readable_error(db, tmp_path: Path):
    _conv, root = conversation_rows.create_conversation(db, "t", None)
    blocker = sqlite3.connect(tmp_path / "arbor.sqlite3")
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StorageUnavailable, match="locked"):
            node_rows.add_node(db, root.id, "user", "hello")
    finally:
        blocker.rollback()
        blocker.close()
    assert node_rows.add_node(db, root.id, "user", "hello").text == "hello"


def test_path_is_root_first_and_tokens_round_trip(db):
    ids = _chain(db, 5)
    path = node_rows.get_path(db, ids[-1])
    assert [n.id for n in path] == ids
    assert path[-1].tokens == (4, 5)
    with pytest.raises(NotFound):
        node_rows.get_path(db, 12345)


def test_deleting_a_subtree_cascades_to_checkpoints(db):
    ids = _chain(db, 4)
    profile = checkpoint_rows.ensure_profile(db, "fp", {"n_ctx": 1})
    for node in ids:
        checkpoint_rows.save_checkpoint(db, node, profile, "delta", 0, 2, b"x" * 100)
    node_rows.delete_subtree(db, ids[2])
    assert checkpoint_rows.total_checkpoint_bytes(db) == 200
    with db.engine.connect() as con:
        raw = con.connection.dbapi_connection
        assert raw.execute("SELECT count(*) FROM checkpoint_blob").fetchone()[0] == 2
    assert (
        conversation_rows.get_conversation(
            db, node_rows.get_node(db, ids[0]).conversation_id
        ).active_node_id
        == ids[1]
    )
    with pytest.raises(ValueError, match="only start"):
        node_rows.delete_subtree(db, ids[0])


def test_checksum_detects_flipped_bytes(db):
    ids = _chain(db, 1)
    profile = checkpoint_rows.ensure_profile(db, "fp", {})
    checkpoint_rows.save_checkpoint(
        db, ids[1], profile, "delta", 0, 2, bytes(range(200))
    )
    stored = checkpoint_rows.load_checkpoint(db, ids[1], profile)
    assert stored is not None and stored.is_intact()
    with db.engine.begin() as con:
        con.exec_driver_sql(
            "UPDATE checkpoint_blob SET data = ?", (bytes(199) + b"\x01",)
        )
    assert not checkpoint_rows.load_checkpoint(db, ids[1], profile).is_intact()
    assert checkpoint_rows.load_checkpoint(db, ids[1], profile + 1) is None


def test_eviction_drops_least_recently_used_and_keeps_messages(db):
    ids = _chain(db, 4)
    profile = checkpoint_rows.ensure_profile(db, "fp", {})
    for node in ids:
        checkpoint_rows.save_checkpoint(db, node, profile, "delta", 0, 2, b"x" * 1000)
    checkpoint_rows.load_checkpoint(db, ids[0], profile)  # the root was used last
    freed = checkpoint_rows.evict_checkpoints(db, budget_bytes=2500)
    assert freed == 3000
    assert checkpoint_rows.total_checkpoint_bytes(db) == 2000
    remaining = checkpoint_rows.checkpointed_nodes(db, ids, profile)
    assert ids[0] in remaining
    assert [n.text for n in node_rows.get_path(db, ids[-1])][1:] == [
        "m0",
        "m1",
        "m2",
        "m3",
    ]


def test_filter_matches_titles_and_messages(db):
    first, _root = conversation_rows.create_conversation(db, "Gardening", None)
    second, root2 = conversation_rows.create_conversation(db, "Cooking", None)
    node_rows.add_node(db, root2.id, "user", "How do I prune an apple tree?")
    assert [c.id for c in conversation_rows.list_conversations(db, "garden")] == [
        first.id
    ]
    assert [c.id for c in conversation_rows.list_conversations(db, "APPLE")] == [
        second.id
    ]
    assert [c.id for c in conversation_rows.list_conversations(db)] == [
        second.id,
        first.id,
    ]


def test_clearing_checkpoints_shrinks_the_file(db, tmp_path: Path):
    ids = _chain(db, 4)
    profile = checkpoint_rows.ensure_profile(db, "fp", {})
    for node in ids:
        checkpoint_rows.save_checkpoint(
            db, node, profile, "delta", 0, 2, b"\x07" * 2_000_000
        )
    path = tmp_path / "arbor.sqlite3"
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    full = path.stat().st_size
    checkpoint_rows.delete_checkpoints(db)
    with sqlite3.connect(path) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    assert path.stat().st_size < full / 10
    assert [n.text for n in node_rows.get_path(db, ids[-1])][1:] == [
        "m0",
        "m1",
        "m2",
        "m3",
    ]


def test_schema_1_database_is_upgraded_with_its_messages(tmp_path: Path):
    # Build a version-1 file: today's schema minus the columns version 2 added.
    path = tmp_path / "old.sqlite3"
    db = open_database(path)
    _conv, root = conversation_rows.create_conversation(db, "old", "Be brief.")
    user = node_rows.add_node(db, root.id, "user", "Hi", tokens=[5, 6, 7])
    db.close()
    with sqlite3.connect(path) as con:
        # Version 4's search index reads the thinking column: it goes first.
        con.executescript(
            "DROP TABLE node_fts; DROP TRIGGER IF EXISTS node_fts_insert; "
            "DROP TRIGGER IF EXISTS node_fts_delete; "
            "DROP TRIGGER IF EXISTS node_fts_update;"
        )
        con.execute("ALTER TABLE node DROP COLUMN thinking")
        con.execute("ALTER TABLE node DROP COLUMN span_text")
        con.execute("ALTER TABLE conversation DROP COLUMN reasoning")
        con.execute("PRAGMA user_version = 1")
    con.close()

    db = open_database(path)
    try:
        node = node_rows.get_node(db, user.id)
        assert (node.text, node.tokens, node.thinking, node.span_text) == (
            "Hi",
            (5, 6, 7),
            "",
            None,
        )
        assert (
            conversation_rows.get_conversation(db, node.conversation_id).reasoning
            is None
        )
        conversation_rows.set_reasoning(db, node.conversation_id, "off")
        assert (
            conversation_rows.get_conversation(db, node.conversation_id).reasoning
            == "off"
        )
    finally:
        db.close()
    assert (tmp_path / "old.sqlite3.v1.bak").exists()
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()


def test_marking_interrupted_replies_writes_only_when_one_was_left(db):
    """Every start looks for replies a killed process left "generating"; after
    a clean exit it finds none and takes no write transaction (which would wait
    for another writer's lock and drop every cache)."""
    ids = _chain(db, 2)
    generation = db.generation()
    assert node_rows.mark_interrupted_generations(db) == 0
    assert db.generation() == generation

    left = node_rows.add_node(db, ids[-1], "user", "q", status="generating").id
    assert node_rows.mark_interrupted_generations(db) == 1
    assert node_rows.get_node(db, left).status == "interrupted"
    assert node_rows.get_node(db, ids[-1]).status == "complete"


def test_a_moves_reads_give_the_records_the_orm_reads_give(db):
    """``tree_index`` and ``get_nodes`` read on sqlite3's own connection and
    convert the values themselves: field for field, what the ORM gives."""
    ids = _chain(db, 3)
    reply = node_rows.add_node(
        db,
        ids[-1],
        "assistant",
        "an answer",
        tokens=[5, 6, 7],
        start_pos=9,
        chunks=[2, 1],
        vocab_id="v1",
        status="stopped",
        generation={"params": {"temperature": 0.5}, "model": "tiny"},
        span_text="<a>an answer",
        thinking="first, think",
    )
    profile = checkpoint_rows.ensure_profile(db, "fp", {})
    checkpoint_rows.save_checkpoint(
        db, reply.id, profile, "delta", 9, 12, b"cells" * 50
    )

    index = tree_reads.tree_index(db, reply.id, profile)

    assert index.nodes == {n.id: n for n in node_rows.get_path(db, reply.id)}
    assert index.conversation == conversation_rows.get_conversation(
        db, reply.conversation_id
    )
    chain = dict(zip(ids, [None, *ids[:-1]], strict=True))
    assert index.parents == {**chain, reply.id: ids[-1]}
    assert set(index.checkpoints) == {reply.id} and index.profile == "fp"
    assert index.checkpoints[reply.id].byte_size == 250
    wanted = [reply.id, ids[1], 10**12]  # an id no node has is left out
    assert tree_reads.get_nodes(db, wanted) == {
        n: node_rows.get_node(db, n) for n in wanted[:2]
    }
