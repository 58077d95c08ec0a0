"""Importing a file that is not an Arbor export says so in plain words; an
imported conversation's title says it is a copy.

Through the real reader (``exchange.read_json_file``, as the window and the
CLI call it) and the real import into a fresh SQLite file.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from storage import conversation_rows, exchange
from storage.exchange import ExchangeError

# Words of Python's json module (and of UnicodeDecodeError) that must not reach
# the user: they describe the parser, not the file.
PYTHON_WORDS = (
    "Expecting",
    "char ",
    "Extra data",
    "Unterminated",
    "Invalid control",
    "delimiter",
    "codec",
    "JSONDecodeError",
)
NOT_OURS = "is not a conversation exported by Arbor"


def _export(title: str | None = "Birds") -> dict[str, Any]:
    data: dict[str, Any] = {
        "format": "arbor-conversation",
        "version": 1,
        "nodes": [
            {"id": 1, "parent": None, "role": "root", "text": ""},
            {"id": 2, "parent": 1, "role": "user", "text": "Hi"},
            {"id": 3, "parent": 2, "role": "assistant", "text": "Hello"},
        ],
    }
    if title is not None:
        data["title"] = title
    return data


_CUT = json.dumps(_export(), indent=2).encode()
# name -> (bytes, what the message must say it is)
NOT_AN_EXPORT: dict[str, tuple[bytes, str]] = {
    "notes.txt": (b"Dear diary, today I exported nothing.\n", "it is not JSON"),
    "empty.json": (b"", "it is empty"),
    "blank.json": (b" \n\t\n", "it is empty"),
    "picture.png": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x01", "not a text file"),
    "nul.json": (b"\x00\x01\x02\x03", "not a text file"),
    "latin1.json": ('{"title": "café"}'.encode("latin-1"), "not UTF-8 text"),
    "utf16.json": ('{"format": "arbor-conversation"}'.encode("utf-16"), "UTF-16"),
    "list.json": (b"[1, 2, 3]", "not in Arbor's format"),
    "other.json": (
        json.dumps({"format": "someone-else", "messages": []}).encode(),
        "not in Arbor's format",
    ),
    "settings.json": (b'{"theme": "dark"}', "not in Arbor's format"),
    "number.json": (b"42", "not in Arbor's format"),
}


def _counts(path: Path) -> dict[str, int]:
    with contextlib.closing(sqlite3.connect(path)) as con:
        return {
            table: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("conversation", "node")
        }


def _refusal(db, path: Path) -> str:
    """The message a refused import gives; checks it imported nothing."""
    before = _counts(db.path)
    with pytest.raises(ExchangeError) as read:
        exchange.read_json_file(path)
    with pytest.raises(ExchangeError) as imported:
        exchange.import_json(db, exchange.read_json_file(path))
    assert _counts(db.path) == before
    message = str(read.value)
    assert str(imported.value) == message
    assert "\n" not in message and message.endswith(".")
    assert not any(word in message for word in PYTHON_WORDS), message
    return message


@pytest.mark.parametrize("name", list(NOT_AN_EXPORT))
def test_a_file_that_is_not_an_export_says_what_it_is(db, tmp_path: Path, name: str):
    content, what = NOT_AN_EXPORT[name]
    path = tmp_path / name
    path.write_bytes(content)
    message = _refusal(db, path)
    assert message.startswith(f"{name} {NOT_OURS} (")
    assert what in message
    # And what to do instead.
    assert "Arbor imports the .json files it exports" in message


def test_a_newer_export_asks_for_a_newer_arbor(db, tmp_path: Path):
    path = tmp_path / "from-the-future.json"
    path.write_text(json.dumps({**_export(), "version": 2}), encoding="utf-8")
    message = _refusal(db, path)
    assert message.startswith("from-the-future.json was exported by a newer Arbor")
    assert "version 2" in message and "Update Arbor to import it." in message


@pytest.mark.parametrize("version", [None, "1", True, 0, 1.5])
def test_an_export_without_a_version_it_knows_is_not_ours(db, tmp_path, version):
    data = _export()
    data["version"] = version
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    message = _refusal(db, path)
    assert message.startswith(f"odd.json {NOT_OURS} (")


def test_a_damaged_export_says_it_is_damaged(db, tmp_path: Path):
    cut = tmp_path / "cut.json"
    cut.write_bytes(_CUT[: len(_CUT) // 2])
    message = _refusal(db, cut)
    assert message.startswith("cut.json is an Arbor conversation, but damaged")
    assert "cut short" in message and "Export the conversation again" in message
    broken = tmp_path / "broken.json"
    broken.write_bytes(_CUT.replace(b'"Hello"', b'"Hello" oops', 1))
    message = _refusal(db, broken)
    assert message.startswith("broken.json is an Arbor conversation, but damaged")
    line = _CUT[: _CUT.index(b'"Hello"')].count(b"\n") + 1
    assert f"line {line}" in message


def test_a_good_export_still_reads(db, tmp_path: Path):
    path = tmp_path / "birds.json"
    path.write_text(json.dumps(_export()), encoding="utf-8")
    assert exchange.read_json_file(path) == _export()
    # With a byte order mark, as some Windows editors save it.
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(_export()).encode())
    assert exchange.import_json(db, exchange.read_json_file(path)).node_count == 3


# --- the title of an imported copy ---------------------------------------------


def test_an_imported_copy_is_titled_as_one_once(db):
    first = exchange.import_json(db, _export("Birds"))
    assert first.title == "Birds (imported)"
    assert conversation_rows.get_conversation(db, first.conversation_id).title == (
        "Birds (imported)"
    )
    # Importing the copy's export does not stack "(imported) (imported)".
    again = exchange.import_json(db, exchange.export_json(db, first.conversation_id))
    assert again.title == "Birds (imported)"


def test_an_untitled_or_long_titled_import_is_marked_too(db):
    untitled = exchange.import_json(db, _export(None))
    assert untitled.title == "New conversation (imported)"
    blank = exchange.import_json(db, _export("   "))
    assert blank.title == "New conversation (imported)"
    # The mark fits in the longest title a conversation keeps.
    long = exchange.import_json(db, _export("x" * 500))
    assert long.title.endswith("x (imported)") and len(long.title) == 200
