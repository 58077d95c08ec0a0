"""The queued checkpoint writer through the real stack: tiny model, real SQLite.

A gate can hold the writer thread just before it writes (it wraps
``checkpoint_rows.save_checkpoint``, which only the writer thread calls here), so
a test can act while a checkpoint is still queued: restore the node (the
restore waits for exactly that write), delete it (nothing comes back),
clear it, or make the write fail (the next call says so).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.checkpoint_writer import CheckpointWriter
from app.conversation.service import ConversationService
from storage import checkpoint_rows, node_rows, tree_reads
from storage.db import Database, open_database
from storage.errors import StorageUnavailable

GREEDY = SamplingParams(temperature=0, max_tokens=12)
OTHER = SamplingParams(temperature=0.9, seed=7, max_tokens=12)
# How long a test keeps a write waiting before it lets it through.
HOLD_S = 0.3


class Gate:
    """Holds the writer thread before each checkpoint write while closed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open_event = threading.Event()
        self.open_event.set()
        self.waiting = threading.Event()  # a write is held at the gate
        # Raised instead of writing, once the gate opens (a disk gone full).
        self.fail_with: Exception | None = None
        real = checkpoint_rows.save_checkpoint

        def gated(*args: object, **kwargs: object) -> int:
            if not self.open_event.is_set():
                self.waiting.set()
                self.open_event.wait()
            if self.fail_with is not None:
                raise self.fail_with
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(checkpoint_rows, "save_checkpoint", gated)

    def close(self) -> None:
        """Hold the next write (flush the service first: only new writes wait)."""
        self.waiting.clear()
        self.open_event.clear()

    def open(self) -> None:
        self.open_event.set()

    def open_later(self, seconds: float = HOLD_S) -> threading.Timer:
        timer = threading.Timer(seconds, self.open)
        timer.start()
        return timer


@pytest.fixture
def engine(tiny_model: Path) -> Iterator[LlamaEngine]:
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=4096)) as loaded:
        yield loaded


@pytest.fixture
def service(db: Database, engine: LlamaEngine) -> Iterator[ConversationService]:
    with ConversationService(db, engine, CheckpointWriter(db)) as queued:
        yield queued


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    return Gate(monkeypatch)


def _checkpointed(db: Database, service: ConversationService, ids: list[int]) -> set:
    assert service.profile_id is not None
    return set(checkpoint_rows.checkpointed_nodes(db, ids, service.profile_id))


def _reply_held_at_the_gate(service: ConversationService, gate: Gate) -> tuple:
    """A conversation, its first reply (checkpointed) and a regenerated reply
    whose checkpoint write is held at the gate."""
    conversation, root = service.new_conversation()
    first = service.send(root, "Hello", GREEDY)
    service.flush_checkpoints()
    gate.close()
    again = service.regenerate(first.assistant_node, OTHER)
    assert gate.waiting.wait(10)
    return conversation, first, again


def test_a_replys_checkpoints_are_stored_by_close_and_restore_cold(
    db, engine, tiny_model
):
    with ConversationService(db, engine, CheckpointWriter(db)) as service:
        _conv, root = service.new_conversation("Be brief.")
        first = service.send(root, "Hello there", GREEDY)
        second = service.send(first.assistant_node, "And then?", GREEDY)
        alternatives = service.regenerate_parallel(second.assistant_node, OTHER, 2)
    path = [n.id for n in node_rows.get_path(db, second.assistant_node)]
    leaves = [r.assistant_node for r in alternatives]
    assert _checkpointed(db, service, path[1:] + leaves) == set(path[1:] + leaves)
    # A fresh engine and service (a restart) restore each leaf from them alone.
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=4096)) as cold:
        for leaf in leaves:
            stats = ConversationService(db, cold).restore(leaf)
            assert (stats.reprocessed_tokens, stats.fallbacks) == (0, [])


def test_a_restore_waits_for_the_queued_checkpoint_it_needs(service, gate):
    _conv, root = service.new_conversation()
    first = service.send(root, "Hello", GREEDY)
    service.flush_checkpoints()
    gate.close()
    again = service.regenerate(first.assistant_node, OTHER)
    assert gate.waiting.wait(10), "the new reply's checkpoint was not queued"
    # Moving away needs only checkpoints already written.
    away = service.restore(first.assistant_node)
    assert (away.reprocessed_tokens, away.fallbacks) == (0, [])
    timer = gate.open_later()
    started = time.perf_counter()
    back = service.restore(again.assistant_node)
    timer.join()
    # Restored from its checkpoint, once the write it waited for was done.
    assert (back.reprocessed_tokens, back.fallbacks) == (0, [])
    assert back.restored_tokens > 0
    assert time.perf_counter() - started >= HOLD_S * 0.9


def test_a_write_failure_is_raised_by_the_next_call_once(tmp_path, engine, gate):
    # A short busy timeout: a write meeting another program's lock fails fast.
    db = open_database(tmp_path / "arbor.sqlite3", busy_timeout_ms=100)
    with ConversationService(db, engine, CheckpointWriter(db)) as service:
        _conv, first, again = _reply_held_at_the_gate(service, gate)
        other = sqlite3.connect(db.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another program holds the write lock
        gate.open()
        service._checkpoints.flush()
        other.execute("ROLLBACK")
        other.close()
        with pytest.raises(StorageUnavailable) as raised:
            service.restore(first.assistant_node)
        message = str(raised.value)
        assert f"message {again.assistant_node} could not be saved" in message
        assert "locked" in message and "no message is lost" in message
        # Reported once: the same call now works, and the node is rebuilt.
        assert service.restore(first.assistant_node).fallbacks == []
        rebuilt = service.restore(again.assistant_node)
        assert rebuilt.fallbacks == [f"node {again.assistant_node}: checkpoint missing"]
        service.flush_checkpoints()
        assert _checkpointed(db, service, [again.assistant_node])
    db.close()


def test_a_failure_at_close_is_raised(db, engine, gate):
    service = ConversationService(db, engine, CheckpointWriter(db))
    _conv, root = service.new_conversation()
    first = service.send(root, "Hello", GREEDY)
    service.flush_checkpoints()
    gate.close()
    service.regenerate(first.assistant_node, OTHER)
    assert gate.waiting.wait(10)

    gate.fail_with = StorageUnavailable("The disk holding the database is full.")
    gate.open()
    with pytest.raises(StorageUnavailable, match=r"could not be saved.*disk .* full"):
        service.close()


def test_a_bug_on_the_writer_thread_is_raised_as_itself(db, engine, monkeypatch):
    with ConversationService(db, engine, CheckpointWriter(db)) as service:
        _conv, root = service.new_conversation()

        def broken(*_args: object, **_kwargs: object) -> int:
            raise TypeError("a bug")

        monkeypatch.setattr(checkpoint_rows, "save_checkpoint", broken)
        # The message's own write fails: the send stops before its reply.
        with pytest.raises(TypeError, match="a bug"):
            service.send(root, "Hello", GREEDY)
        monkeypatch.undo()
        assert node_rows.get_children(db, root)[0].text == "Hello"


def test_deleting_a_branch_while_its_checkpoint_is_queued(service, db, gate):
    conversation, _first, again = _reply_held_at_the_gate(service, gate)
    timer = gate.open_later()
    # The deletion waits for the write, then takes its bytes with it.
    service.delete_branch(again.assistant_node)
    timer.join()
    left = tree_reads.tree(db, conversation, service.profile_id)
    assert again.assistant_node not in {n.id for n in left}
    assert checkpoint_rows.total_checkpoint_bytes(db) == sum(
        n.checkpoint_bytes for n in left
    )
    service.flush_checkpoints()  # and nothing failed


def test_a_branch_deleted_elsewhere_is_not_brought_back(service, db, gate):
    _conv, first, again = _reply_held_at_the_gate(service, gate)
    # Another window or process deletes the reply while its write is queued.
    elsewhere = open_database(db.path)
    node_rows.delete_subtree(elsewhere, again.assistant_node)
    elsewhere.close()
    gate.open()
    service.flush_checkpoints()  # dropped quietly: no failure to raise
    with db.read() as session:
        orphans = session.connection().exec_driver_sql(
            "SELECT count(*) FROM checkpoint WHERE node_id = ?",
            (again.assistant_node,),
        )
        assert orphans.scalar_one() == 0
    assert service.restore(first.assistant_node).fallbacks == []


def test_a_span_changed_while_its_checkpoint_is_queued_gets_none(service, db, gate):
    _conv, _first, again = _reply_held_at_the_gate(service, gate)
    node = node_rows.get_node(db, again.assistant_node)
    # Re-placed meanwhile (another model, another process): the queued bytes
    # are no longer this span's KV.
    node_rows.update_node(db, node.id, tokens=[*node.tokens, node.tokens[-1]])
    gate.open()
    service.flush_checkpoints()  # dropped quietly: no failure to raise
    assert _checkpointed(db, service, [node.id]) == set()


def test_clearing_checkpoints_while_one_is_queued_leaves_none(service, db, gate):
    conversation, _first, _again = _reply_held_at_the_gate(service, gate)
    timer = gate.open_later()
    service.clear_checkpoints(conversation)
    timer.join()
    service.flush_checkpoints()
    assert checkpoint_rows.total_checkpoint_bytes(db) == 0


def test_a_full_queue_makes_the_next_checkpoint_wait(db, engine, gate):
    # Room for one checkpoint at a time: the second waits for the first.
    writer = CheckpointWriter(db, max_queued_bytes=1)
    with ConversationService(db, engine, writer) as service:
        _conv, root = service.new_conversation()
        first = service.send(root, "Hello", GREEDY)
        service.flush_checkpoints()
        gate.close()
        done = threading.Event()

        def two_alternatives() -> None:
            service.regenerate_parallel(first.assistant_node, OTHER, 2)
            done.set()

        worker = threading.Thread(target=two_alternatives)
        worker.start()
        assert gate.waiting.wait(10)
        # The first alternative's checkpoint is held at the gate; the second
        # cannot be queued, so the generating thread waits.
        assert not done.wait(HOLD_S)
        assert writer.pending_bytes > 0
        gate.open()
        worker.join(30)
        assert done.is_set()
