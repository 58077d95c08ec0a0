"""Full-text search: the index follows every write, ranks, marks, never chokes.

On real SQLite files: the FTS5 index is kept by triggers, so inserts, edits,
branch deletes and conversation deletes (cascades) are all seen; hostile input
is only text; a version-3 database gains the index when it is upgraded, and a
database without it (read-only, not upgraded) is scanned instead.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from storage import conversation_rows, node_rows, text_search
from storage.db import _open_read_only, open_database
from storage.errors import StorageUnavailable
from storage.migrations import SCHEMA_VERSION
from storage.tables import Base
from storage.text_search import MATCH_END, MATCH_START


def _ids(db, query: str) -> list[int]:
    return [hit.node_id for hit in text_search.search(db, query)]


def _marked(snippet: str) -> list[str]:
    """The words between the match markers of a snippet."""
    return [part.split(MATCH_END)[0] for part in snippet.split(MATCH_START)[1:]]


def _integrity(path: Path) -> None:
    # FTS5's own check: the index matches the content table exactly.
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("INSERT INTO node_fts(node_fts) VALUES ('integrity-check')")


def test_new_edited_and_deleted_messages_are_found_or_gone(db):
    _conv, root = conversation_rows.create_conversation(db, "Trip", "Be brief.")
    user = node_rows.add_node(db, root.id, "user", "Where is the lighthouse?")
    reply = node_rows.add_node(
        db, user.id, "assistant", "North of the harbour.", thinking="maps say north"
    )
    assert _ids(db, "lighthouse") == [user.id]
    assert _ids(db, "harbour") == [reply.id]
    assert _ids(db, "maps") == [reply.id]  # reasoning is searched too
    assert _ids(db, "brief") == [root.id]  # and the system prompt

    node_rows.update_node(db, reply.id, text="South of the bay.")
    assert _ids(db, "harbour") == []
    assert _ids(db, "bay") == [reply.id]

    node_rows.delete_subtree(db, user.id)  # the reply goes by cascade
    assert _ids(db, "lighthouse") == [] and _ids(db, "bay") == []
    _integrity(db.path)


def test_deleting_a_conversation_empties_its_part_of_the_index(db):
    gone, root = conversation_rows.create_conversation(db, "A", None)
    node_rows.add_node(db, root.id, "user", "zebra crossing")
    _kept, other_root = conversation_rows.create_conversation(db, "B", None)
    kept = node_rows.add_node(db, other_root.id, "user", "zebra stripes")
    conversation_rows.delete_conversation(db, gone.id)
    assert _ids(db, "zebra") == [kept.id]
    _integrity(db.path)


def test_words_prefixes_case_and_accents(db):
    _conv, root = conversation_rows.create_conversation(db, "Café", None)
    node = node_rows.add_node(db, root.id, "user", "Un CAFÉ crème, s'il vous plaît")
    assert _ids(db, "cafe") == [node.id]
    assert _ids(db, "creme plait") == [node.id]
    assert _ids(db, "pla") == [node.id]  # the last word is a prefix
    assert _ids(db, "caf vous") == []  # earlier words are whole words
    assert _ids(db, "cafe absent") == []  # every word must be there


def test_hits_carry_their_conversation_role_and_a_marked_snippet(db):
    conv, root = conversation_rows.create_conversation(db, "Garden", None)
    long_text = " ".join(["filler"] * 40 + ["tomatoes", "need", "sun"] + ["x"] * 40)
    node = node_rows.add_node(db, root.id, "user", long_text)
    (hit,) = text_search.search(db, "tomato")
    assert (hit.conversation_id, hit.conversation_title) == (conv.id, "Garden")
    assert (hit.node_id, hit.role) == (node.id, "user")
    assert _marked(hit.snippet) == ["tomatoes"]
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert len(hit.snippet) < 200


def test_better_matches_rank_first(db):
    _conv, root = conversation_rows.create_conversation(db, "Ranks", None)
    once = node_rows.add_node(
        db, root.id, "user", "kiwi " + "and many other words " * 20
    )
    reply = node_rows.add_node(db, once.id, "assistant", "nothing here")
    often = node_rows.add_node(db, reply.id, "user", "kiwi kiwi kiwi kiwi")
    assert _ids(db, "kiwi") == [often.id, once.id]
    ranks = [hit.rank for hit in text_search.search(db, "kiwi")]
    assert ranks == sorted(ranks)


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        "AND",
        "OR NOT",
        "*",
        "(",
        ")",
        "NEAR(a b)",
        "text:foo",
        "^start",
        "a AND (b OR",
        "'; DROP TABLE node; --",
        "\\",
        "-",
        "x" * 5000,
        "word " * 200,
        "\x00",
        "\x02\x03",
        "🙂",
    ],
)
def test_hostile_queries_are_only_text(db, query: str):
    _conv, root = conversation_rows.create_conversation(db, "Hostile", None)
    node = node_rows.add_node(db, root.id, "user", "AND OR NOT NEAR text foo")
    hits = text_search.search(db, query)  # never an FTS5 syntax error
    assert all(hit.node_id == node.id for hit in hits)
    # Keywords are words like any other.
    assert _ids(db, "AND") == [node.id] and _ids(db, "near") == [node.id]
    assert text_search.fts_query(['a"b']) == '"a""b"*'


def test_empty_and_punctuation_only_queries_find_nothing(db):
    _conv, root = conversation_rows.create_conversation(db, "Empty", None)
    node_rows.add_node(db, root.id, "user", "some words")
    for query in ("", "   ", "!!!", '* ( ) "'):
        assert text_search.search(db, query) == []
    assert text_search.search(db, "some", limit=0) == []


def test_limit_keeps_the_best(db):
    _conv, root = conversation_rows.create_conversation(db, "Many", None)
    parent = root.id
    for i in range(30):
        role = "user" if i % 2 == 0 else "assistant"
        parent = node_rows.add_node(db, parent, role, f"needle {i}").id
    assert len(text_search.search(db, "needle", limit=7)) == 7
    assert len(text_search.search(db, "needle")) == 30


# --- databases without the index ------------------------------------------------


def _make_version_3(path: Path) -> None:
    """A version-3 file as Arbor 3 created it: today's tables, no search index."""
    engine = create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(engine)
    engine.dispose()
    with contextlib.closing(sqlite3.connect(path)) as con:
        now = "2024-01-01 00:00:00.000000"
        con.execute(
            "INSERT INTO conversation (id, title, active_node_id, created_at, "
            "updated_at) VALUES (1, 'Old trip', 3, ?, ?)",
            (now, now),
        )
        rows = [
            (1, None, "root", ""),
            (2, 1, "user", "Which ferry goes to the island?"),
            (3, 2, "assistant", "The morning ferry from pier four."),
        ]
        for node_id, parent, role, text in rows:
            con.execute(
                "INSERT INTO node (id, conversation_id, parent_id, role, text, "
                "thinking, tokens, n_tokens, start_pos, chunks, status, created_at) "
                "VALUES (?, 1, ?, ?, ?, '', x'', 0, 0, '[]', 'complete', ?)",
                (node_id, parent, role, text, now),
            )
        con.execute("PRAGMA user_version = 3")
        con.commit()


def test_version_3_database_is_upgraded_and_indexed(tmp_path: Path):
    path = tmp_path / "old.sqlite3"
    _make_version_3(path)
    db = open_database(path)
    try:
        with contextlib.closing(sqlite3.connect(path)) as con:
            assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (hit,) = text_search.search(db, "ferry island")
        assert (hit.node_id, hit.conversation_title) == (2, "Old trip")
        assert _marked(hit.snippet) == ["ferry", "island"]
        # The triggers came with it: later writes are indexed too.
        node_rows.add_node(db, 3, "user", "And back by ferry?")
        assert len(text_search.search(db, "ferry")) == 3
        node_rows.delete_subtree(db, 2)
        assert text_search.search(db, "ferry") == []
        _integrity(path)
    finally:
        db.close()
    assert (tmp_path / "old.sqlite3.v3.bak").exists()


def test_a_read_only_older_database_is_refused_and_left_as_it_is(tmp_path: Path):
    # What open_database does for an older file it cannot write (tests may
    # run as root, for whom no file is read-only): the reads need columns it
    # lacks, and upgrading it needs write access, so it says so.
    path = tmp_path / "old.sqlite3"
    _make_version_3(path)
    with pytest.raises(StorageUnavailable, match="must be upgraded before it can"):
        _open_read_only(path, 3, "test", 1000)
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 3


def test_scanning_treats_like_wildcards_as_text(tmp_path: Path):
    path = tmp_path / "arbor.sqlite3"
    db = open_database(path)
    _conv, root = conversation_rows.create_conversation(db, "Percent", None)
    node = node_rows.add_node(db, root.id, "user", "100% sure_thing")
    node_rows.add_node(db, node.id, "assistant", "1000 surely")
    db.close()
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.executescript(
            "DROP TABLE node_fts; DROP TRIGGER node_fts_insert; "
            "DROP TRIGGER node_fts_delete; DROP TRIGGER node_fts_update;"
        )
    db = open_database(path)
    try:
        assert _ids(db, "100%") == [node.id]
        assert _ids(db, "sure_") == [node.id]
    finally:
        db.close()
