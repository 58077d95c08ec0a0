"""The conversation list read without SQLAlchemy (storage.conversation_listing)
on real files.

It must say exactly what the repository says, leave the file untouched, and
step aside (None) for every file that needs more than reading.
"""

from __future__ import annotations

import ast
import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from storage import checkpoint_rows, conversation_listing, conversation_rows, node_rows
from storage.db import open_database
from storage.probe import DATABASE_FILENAME, SCHEMA_VERSION


def _fill(db) -> None:
    """Three conversations: messages, a checkpoint, a title with LIKE's wildcards."""
    profile = checkpoint_rows.ensure_profile(db, "fingerprint", {"model": "test"})
    for title, texts in [
        ("Plans for 100% of the garden", ["roses", "tulips"]),
        ("snake_case names", ["what is snake_case?"]),
        ("Weather", ["Rain tomorrow?", "Yes, RAIN."]),
    ]:
        _conversation, root = conversation_rows.create_conversation(db, title, None)
        parent = root.id
        for i, text in enumerate(texts):
            role = "user" if i % 2 == 0 else "assistant"
            node = node_rows.add_node(db, parent, role, text, tokens=[i, i + 1])
            parent = node.id
        blob = b"x" * (100 * len(title))
        checkpoint_rows.save_checkpoint(db, parent, profile, "delta", 0, 2, blob)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    file = tmp_path / DATABASE_FILENAME
    db = open_database(file)
    _fill(db)
    db.close()
    return file


def _files(folder: Path) -> dict[str, bytes]:
    return {f.name: hashlib.sha256(f.read_bytes()).digest() for f in folder.glob("*")}


def test_the_listing_equals_the_repositorys(path: Path):
    fast = conversation_listing.read_listing(path)
    db = open_database(path)
    try:
        assert fast == conversation_rows.list_conversations(db)
    finally:
        db.close()
    assert [c.title for c in fast] == [
        "Weather",
        "snake_case names",
        "Plans for 100% of the garden",
    ]
    assert [c.node_count for c in fast] == [3, 2, 3]
    assert [c.checkpoint_bytes for c in fast] == [700, 1600, 2800]


@pytest.mark.parametrize(
    ("text", "titles"),
    [
        ("rain", ["Weather"]),  # message text, any case
        ("100%", ["Plans for 100% of the garden"]),  # % is not a wildcard
        ("e_c", ["snake_case names"]),  # nor is _ ("e c" would match otherwise)
        ("0% of", ["Plans for 100% of the garden"]),
        ("nothing like it", []),
    ],
)
def test_the_filter_matches_text_literally(path: Path, text: str, titles: list[str]):
    db = open_database(path)
    try:
        found = conversation_rows.list_conversations(db, text)
    finally:
        db.close()
    assert [c.title for c in found] == titles


def test_reading_changes_no_file(path: Path):
    before = _files(path.parent)
    assert conversation_listing.read_listing(path)
    assert _files(path.parent) == before


def test_files_that_need_more_than_reading_are_left_to_the_full_open(tmp_path: Path):
    assert conversation_listing.read_listing(tmp_path / "absent.sqlite3") is None
    foreign = tmp_path / "foreign.sqlite3"
    foreign.write_bytes(b"not a database at all" * 10)
    assert conversation_listing.read_listing(foreign) is None
    older = tmp_path / "older.sqlite3"
    open_database(older).close()
    with sqlite3.connect(older) as con:
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    assert conversation_listing.read_listing(older) is None


def test_a_reply_left_generating_takes_the_full_way(path: Path):
    # The full open marks it interrupted, as any command's open does.
    with sqlite3.connect(path) as con:
        con.execute("UPDATE node SET status = 'generating' WHERE id = 3")
    assert conversation_listing.read_listing(path) is None


def test_arbor_list_needs_no_sqlalchemy(path: Path):
    # A fresh interpreter runs the command as `arbor list` would.
    program = (
        "import sys; from app.cli.commands import run; "
        f"status = run(['--data-dir', {str(path.parent)!r}, 'list']); "
        "print(repr((status, sorted(m for m in ('sqlalchemy', 'jinja2', 'llama_cpp', "
        "'numpy', 'PySide6') if m in sys.modules))), file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True
    )
    assert ast.literal_eval(result.stderr.strip().splitlines()[-1]) == (0, [])
    assert '"title": "Weather"' in result.stdout
