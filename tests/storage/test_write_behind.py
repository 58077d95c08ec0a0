"""The database's one background writer (storage/write_behind.py), on a real
SQLite file: queued writes in order, settle by key, one failure channel,
bookkeeping written at an idle moment on the same thread, flush and close."""

from __future__ import annotations

import threading
import time

import pytest

from storage import conversation_rows, node_rows, write_behind
from storage.db import Database, open_database
from storage.errors import StorageUnavailable
from storage.values import Role

WAIT_S = 10


def _conversation(db: Database) -> tuple[int, int, int]:
    """A conversation with a root and two replies under it."""
    conversation, root = conversation_rows.create_conversation(db, "t", None)
    first = node_rows.add_node(db, root.id, Role.USER, "one")
    second = node_rows.add_node(db, root.id, Role.USER, "two")
    return conversation.id, first.id, second.id


def test_queued_writes_run_in_order_and_settle_waits_only_for_its_keys(db):
    _conversation_id, first, second = _conversation(db)
    behind = db.write_behind
    gate = threading.Event()
    ran: list[str] = []

    def held() -> None:
        gate.wait(WAIT_S)
        node_rows.update_node(db, first, text="one, written behind")
        ran.append("first")

    def quick() -> None:
        node_rows.update_node(db, second, text="two, written behind")
        ran.append("second")

    behind.put([first], 10, held)
    behind.put([second], 10, quick)
    assert behind.pending_bytes == 20
    settled = threading.Event()
    waiter = threading.Thread(target=lambda: (behind.settle([second]), settled.set()))
    waiter.start()
    # The second write waits behind the first: settle([second]) waits too.
    assert not settled.wait(0.2)
    gate.set()
    waiter.join(WAIT_S)
    assert settled.is_set()
    assert ran == ["first", "second"]
    behind.flush()
    assert behind.pending_bytes == 0
    assert node_rows.get_node(db, second).text == "two, written behind"


def test_a_failure_is_kept_once_with_a_count_of_the_others(db):
    _conversation_id, first, second = _conversation(db)
    behind = db.write_behind

    def full() -> None:
        raise StorageUnavailable("disk full")

    behind.put([first], 1, full)
    behind.put([second], 1, full)
    behind.flush()
    failure = behind.take_failure()
    assert failure is not None
    assert (failure.node_id, str(failure.error), failure.more) == (
        first,
        "disk full",
        1,
    )
    assert behind.take_failure() is None


def test_bookkeeping_is_written_at_an_idle_moment_by_the_same_thread(db, monkeypatch):
    monkeypatch.setattr(write_behind, "IDLE_SECONDS", 0.05)
    conversation, first, _second = _conversation(db)
    behind = db.write_behind
    gate = threading.Event()
    ran_on: list[threading.Thread] = []

    def busy() -> None:
        ran_on.append(threading.current_thread())
        gate.wait(WAIT_S)

    behind.put([first], 1, busy)
    conversation_rows.defer_active_node(db, conversation, first)
    db.defer(
        "probe", lambda _old: lambda _session: ran_on.append(threading.current_thread())
    )
    time.sleep(0.2)
    # Due, but the queued write goes first: still pending.
    assert db.deferred
    gate.set()
    deadline = time.monotonic() + WAIT_S
    while db.deferred and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not db.deferred
    assert conversation_rows.get_conversation(db, conversation).active_node_id == first
    assert len(ran_on) == 2 and ran_on[0] is ran_on[1]
    assert ran_on[0].name == "arbor-write-behind"


def test_flush_writes_the_bookkeeping_and_close_stops_the_thread(tmp_path, monkeypatch):
    monkeypatch.setattr(write_behind, "IDLE_SECONDS", 3600.0)  # never idle here
    path = tmp_path / "closing.sqlite3"
    db = open_database(path)
    conversation, first, second = _conversation(db)
    conversation_rows.defer_active_node(db, conversation, first)
    db.write_behind.flush()
    assert not db.deferred
    assert conversation_rows.get_conversation(db, conversation).active_node_id == first

    ran_on: list[threading.Thread] = []
    db.write_behind.put([first], 1, lambda: ran_on.append(threading.current_thread()))
    db.write_behind.settle([first])
    thread = ran_on[0]
    assert thread.name == "arbor-write-behind" and thread.is_alive()
    conversation_rows.defer_active_node(db, conversation, second)
    assert db.deferred
    db.close()  # writes the place, and stops the thread
    thread.join(WAIT_S)
    assert not thread.is_alive()
    with pytest.raises(RuntimeError):
        db.write_behind.put([first], 1, lambda: None)
    again = open_database(path)
    try:
        assert (
            conversation_rows.get_conversation(again, conversation).active_node_id
            == second
        )
    finally:
        again.close()
