"""Where a conversation was made (issue 26): the stored origin, the schema
step that adds it (and marks what the local server made before), both reads
of a conversation, ``arbor list``, and export and import.

The local server's own part (a real ``arbor serve`` marking what it makes)
is in ``test_server.py``; the window's mark in ``ui/test_local_server.py``.
"""

from __future__ import annotations

import contextlib
import copy
import sqlite3
from pathlib import Path

import pytest

from app.platform import paths
from storage import (
    conversation_listing,
    conversation_rows,
    exchange,
    node_rows,
    setting_rows,
)
from storage.db import Database, _open_read_only, open_database
from storage.errors import ExchangeError, StorageUnavailable
from storage.probe import SCHEMA_VERSION
from storage.values import Origin
from tests.conftest import run_cli


def _origins(db: Database) -> dict[int, Origin | None]:
    return {c.id: c.origin for c in conversation_rows.list_conversations(db)}


def test_a_version_7_database_gains_the_origin_of_what_the_server_made(
    data_dir: Path,
):
    path = paths.database_path(data_dir)
    db = open_database(path)
    window, root = conversation_rows.create_conversation(db, "Typed here", None)
    node_rows.add_node(db, root.id, "user", "Hello")
    # What the server of version 7 left: its clients' conversations, each
    # remembered under its key (no user, and the user "ada"), and titled so.
    served, _ = conversation_rows.create_conversation(db, "Local server", None)
    ada, _ = conversation_rows.create_conversation(db, "Local server · ada", None)
    setting_rows.set_setting(db, "server.conversation:", served.id)
    setting_rows.set_setting(db, "server.conversation:ada", ada.id)
    # A number under another key names no conversation the server made.
    setting_rows.set_setting(db, "sidebar.width", window.id)
    db.close()
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("ALTER TABLE conversation DROP COLUMN origin")
        con.execute("PRAGMA user_version = 7")
        con.commit()

    # The command line opens it first: the upgrade, then the listing.
    listed = run_cli("--data-dir", data_dir, "list").json["conversations"]
    assert {c["id"]: c["origin"] for c in listed} == {
        window.id: None,
        served.id: "local server",
        ada.id: "local server",
    }
    db = open_database(path)
    try:
        assert _origins(db) == {
            window.id: None,
            served.id: Origin.LOCAL_SERVER,
            ada.id: Origin.LOCAL_SERVER,
        }
        # The ORM's read maps the same column to the same value.
        assert conversation_rows.get_conversation(db, ada.id).origin == "local server"
        assert conversation_rows.get_conversation(db, window.id).origin is None
        made, _ = conversation_rows.create_conversation(
            db, None, None, origin=Origin.LOCAL_SERVER
        )
        assert _origins(db)[made.id] == Origin.LOCAL_SERVER
    finally:
        db.close()
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    backup = path.with_name(path.name + ".v7.bak")
    with contextlib.closing(sqlite3.connect(backup)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 7
        columns = {row[1] for row in con.execute("PRAGMA table_info(conversation)")}
        assert "origin" not in columns
        assert con.execute("SELECT count(*) FROM conversation").fetchone()[0] == 3


def test_a_version_7_database_that_cannot_be_written_is_refused_unchanged(
    tmp_path: Path,
):
    # Every listing reads the origin, which a version-7 file lacks; adding it
    # needs write access. Opened read-only (as open_database does for a file
    # it cannot write; tests may run as root), it is refused, said plainly.
    path = tmp_path / "arbor.sqlite3"
    open_database(path).close()
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("ALTER TABLE conversation DROP COLUMN origin")
        con.execute("PRAGMA user_version = 7")
        con.commit()
    with pytest.raises(StorageUnavailable, match="must be upgraded before it can"):
        _open_read_only(path, 7, "a read-only folder", 1000)
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 7


def test_both_reads_give_the_origin(db: Database):
    made, _ = conversation_rows.create_conversation(
        db, "From a client", None, origin=Origin.LOCAL_SERVER
    )
    mine, _ = conversation_rows.create_conversation(db, "Mine", None)
    db.close()  # the listing without SQLAlchemy reads the file itself
    listed = conversation_listing.read_listing(db.path)
    assert listed is not None
    assert {c.id: c.origin for c in listed} == {
        made.id: Origin.LOCAL_SERVER,
        mine.id: None,
    }
    reopened = open_database(db.path)
    try:
        orm = conversation_rows.get_conversation(reopened, made.id)
        assert orm == next(c for c in listed if c.id == made.id)
        assert isinstance(orm.origin, Origin)
    finally:
        reopened.close()


def _served(db: Database) -> int:
    conversation, root = conversation_rows.create_conversation(
        db, "Local server · ada", "Be brief.", origin=Origin.LOCAL_SERVER
    )
    question = node_rows.add_node(db, root.id, "user", "Hi?")
    node_rows.add_node(db, question.id, "assistant", "Hello.")
    return conversation.id


def test_an_export_carries_the_origin_and_its_import_keeps_it(db: Database):
    data = exchange.export_json(db, _served(db))
    assert data["origin"] == "local server"
    imported = exchange.import_json(db, data)
    record = conversation_rows.get_conversation(db, imported.conversation_id)
    assert record.origin == Origin.LOCAL_SERVER
    assert record.title == "Local server · ada (imported)"

    mine, _ = conversation_rows.create_conversation(db, "Mine", None)
    assert exchange.export_json(db, mine.id)["origin"] is None


def test_an_older_export_without_an_origin_imports_as_the_windows(db: Database):
    data = exchange.export_json(db, _served(db))
    del data["origin"]  # as files exported before origins were stored
    imported = exchange.import_json(db, data)
    record = conversation_rows.get_conversation(db, imported.conversation_id)
    assert record.origin is None
    assert imported.node_count == 3


@pytest.mark.parametrize("origin", ["somewhere", 3, ["local server"]])
def test_an_unknown_origin_is_refused_and_nothing_written(db: Database, origin):
    data = copy.deepcopy(exchange.export_json(db, _served(db)))
    data["origin"] = origin
    before = _origins(db)
    with pytest.raises(ExchangeError, match="The origin of the conversation is"):
        exchange.import_json(db, data)
    assert _origins(db) == before
