"""The restore path of issue 11: combined deltas, the tree cache, deferred writes.

- Consecutive deltas applied with one llama.cpp call give the logits and the
  greedy continuation that reprocessing gives, bit for bit, with V stored
  transposed (flash attention off) or not.
- A switch reads the path from memory, and notices every write that changes
  the tree, from this process or another.
- A restore writes nothing; its place is written a moment later, within the
  next write, or at close.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import event

from app.backend import engine as engine_module
from app.backend.engine import RUN_BYTES, LlamaEngine
from app.backend.kv_state import DeltaLayout
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage import checkpoint_reader, conversation_rows, node_rows, write_behind
from storage import db as storage_db
from storage.db import PAGE_SIZE, open_database
from storage.errors import NotFound
from tests.helpers.replay import replayed_digest

GREEDY = SamplingParams(temperature=0, max_tokens=12)
# Spans of a path, one batch each, as replies and messages are decoded.
SPANS = (23, 7, 41, 1, 30, 12, 64, 5)
NEXT = [40, 41, 42, 43, 44]


def _spans() -> list[list[int]]:
    rng = np.random.default_rng(11)
    return [rng.integers(5, 261, n).tolist() for n in SPANS]


def _greedy(engine: LlamaEngine, first: list[int], steps: int = 8) -> list[int]:
    """Decode ``first``, then continue greedily; the tokens chosen."""
    engine.decode(first, [len(first)])
    chosen = []
    for _ in range(steps):
        token = int(np.argmax(engine.logits()))
        chosen.append(token)
        engine.decode([token], [1])
    return chosen


@pytest.fixture(params=[False, True], ids=["v-transposed", "flash-attention"])
def settings(request) -> BackendSettings:
    return BackendSettings(n_ctx=512, n_threads=1, flash_attn=request.param)


def _captured(engine: LlamaEngine) -> list[tuple[bytes, int, int]]:
    """Decode the spans, capturing each one's delta as the service does."""
    deltas = []
    for span in _spans():
        start = engine.n_past
        engine.decode(span, [len(span)])
        deltas.append((engine.capture(start, engine.n_past), start, engine.n_past))
    return deltas


@pytest.mark.parametrize("run_bytes", [RUN_BYTES, 20_000], ids=["one-run", "runs"])
def test_combined_deltas_give_the_logits_of_reprocessing(
    tiny_model, settings, run_bytes, monkeypatch
):
    monkeypatch.setattr(engine_module, "RUN_BYTES", run_bytes)
    with (
        LlamaEngine(tiny_model, settings) as made,
        LlamaEngine(tiny_model, settings) as combined,
        LlamaEngine(tiny_model, settings) as one_by_one,
    ):
        deltas = _captured(made)
        assert DeltaLayout.parse(memoryview(deltas[0][0]), *deltas[0][1:])
        assert DeltaLayout.parse(memoryview(deltas[0][0]), 1, 24) is None

        combined.begin_deltas([end - start for _d, start, end in deltas])
        for data, start, end in deltas:
            assert combined.add_delta(memoryview(data), start, end)
        if run_bytes == RUN_BYTES:
            assert combined.n_past == 0  # all staged, not applied yet
        elif not settings.flash_attn:
            assert 0 < combined.n_past < made.n_past  # runs applied as they fill
        assert combined.end_deltas()
        assert combined.n_past == made.n_past

        for data, start, end in deltas:
            assert one_by_one.restore(data, start, end)

        expected = _greedy(made, NEXT)
        reference = made.logits()
        for engine in (combined, one_by_one):
            assert _greedy(engine, NEXT) == expected
            assert np.array_equal(engine.logits(), reference)


def test_fewer_deltas_than_announced_still_restore_exactly(tiny_model, settings):
    # A delta refused midway leaves the ones before it, laid out anew.
    with (
        LlamaEngine(tiny_model, settings) as made,
        LlamaEngine(tiny_model, settings) as restored,
    ):
        deltas = _captured(made)
        kept = deltas[:5]
        restored.begin_deltas([end - start for _d, start, end in deltas])
        for data, start, end in kept:
            assert restored.add_delta(data, start, end)
        data, start, end = deltas[6]  # skips one: does not follow on
        assert not restored.add_delta(data, start, end)
        assert restored.end_deltas()
        assert restored.n_past == kept[-1][2]

        made.truncate(kept[-1][2])
        assert _greedy(restored, NEXT) == _greedy(made, NEXT)
        assert np.array_equal(restored.logits(), made.logits())


def test_a_damaged_delta_is_refused_and_the_ones_before_it_are_held(
    tiny_model, settings
):
    with (
        LlamaEngine(tiny_model, settings) as made,
        LlamaEngine(tiny_model, settings) as restored,
    ):
        deltas = _captured(made)
        restored.begin_deltas([end - start for _d, start, end in deltas])
        for data, start, end in deltas[:3]:
            assert restored.add_delta(data, start, end)
        data, start, end = deltas[3]
        # Cells at the wrong positions: not combined, and llama.cpp's own
        # check (through the single-delta path) refuses them.
        assert not restored.add_delta(deltas[4][0], start, end)
        assert restored.n_past == deltas[2][2]
        assert restored.end_deltas()
        assert restored.n_past == deltas[2][2]


# --- through the service --------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path, tiny_model: Path):
    db = open_database(tmp_path / "restore.sqlite3")
    engine = LlamaEngine(tiny_model, BackendSettings(n_ctx=1024, n_threads=1))
    yield ConversationService(db, engine)
    engine.close()
    db.close()


def _two_branches(service: ConversationService) -> tuple[int, int, int]:
    _conv, root = service.new_conversation("Answer briefly.")
    first = service.send(root, "Tell me about trees.", GREEDY)
    second = service.send(first.assistant_node, "And rivers?", GREEDY)
    other = service.send(first.assistant_node, "And mountains?", GREEDY)
    return first.assistant_node, second.assistant_node, other.assistant_node


def _tracing(service: ConversationService) -> list[str]:
    """Every SQL statement the service's database runs from now on."""
    statements: list[str] = []
    engine = service.db.engine

    @event.listens_for(engine, "before_cursor_execute")
    def _record(_conn, _cursor, statement, *_args) -> None:  # type: ignore[no-untyped-def]
        statements.append(statement)

    return statements


def test_a_switch_reads_only_checkpoints_and_writes_nothing(service):
    _fork, second, other = _two_branches(service)
    for leaf in (other, second):  # both paths seen once: the cache holds them
        service.restore(leaf)
    service.db.flush_deferred()
    statements = _tracing(service)
    version = _data_version(service.db.path)

    stats = service.restore(other)

    assert stats.reprocessed_tokens == 0 and stats.kept_tokens > 0
    assert not any(s.lstrip().upper().startswith("SELECT") for s in statements)
    assert not any(
        s.lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE"))
        for s in statements
    )
    assert _data_version(service.db.path) == version  # nothing committed


def _data_version(path: Path) -> int:
    # A fresh connection each time: data_version counts others' commits.
    with sqlite3.connect(path) as con:
        return int(con.execute("PRAGMA data_version").fetchone()[0])


def test_the_place_is_written_after_the_restore(service, monkeypatch):
    monkeypatch.setattr(write_behind, "IDLE_SECONDS", 3600.0)  # no idle flush here
    _fork, second, other = _two_branches(service)
    conversation = node_rows.get_node(service.db, other).conversation_id
    service.restore(second)
    # Not yet: the restore did not write.
    assert (
        conversation_rows.get_conversation(service.db, conversation).active_node_id
        == other
    )
    service.db.flush_deferred()
    assert (
        conversation_rows.get_conversation(service.db, conversation).active_node_id
        == second
    )


def test_a_later_write_wins_over_the_deferred_place(service, monkeypatch):
    monkeypatch.setattr(write_behind, "IDLE_SECONDS", 3600.0)
    fork, second, _other = _two_branches(service)
    service.restore(second)
    reply = service.send(fork, "And lakes?", GREEDY)  # its write runs the place first
    conversation = node_rows.get_node(service.db, fork).conversation_id
    assert not service.db.deferred
    record = conversation_rows.get_conversation(service.db, conversation)
    assert record.active_node_id == reply.assistant_node


def test_the_place_is_written_at_an_idle_moment(service, monkeypatch):
    monkeypatch.setattr(write_behind, "IDLE_SECONDS", 0.05)
    _fork, second, _other = _two_branches(service)
    service.restore(second)
    conversation = node_rows.get_node(service.db, second).conversation_id
    deadline = time.monotonic() + 10
    while service.db.deferred and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (
        conversation_rows.get_conversation(service.db, conversation).active_node_id
        == second
    )


def test_the_place_is_written_at_close(tmp_path, tiny_model, monkeypatch):
    monkeypatch.setattr(write_behind, "IDLE_SECONDS", 3600.0)
    path = tmp_path / "close.sqlite3"
    db = open_database(path)
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=1024, n_threads=1)) as engine:
        service = ConversationService(db, engine)
        _fork, second, _other = _two_branches(service)
        service.restore(second)
        db.close()
    reopened = open_database(path)
    conversation = node_rows.get_node(reopened, second).conversation_id
    assert (
        conversation_rows.get_conversation(reopened, conversation).active_node_id
        == second
    )
    reopened.close()


def test_used_checkpoints_are_marked_later(service, monkeypatch):
    monkeypatch.setattr(write_behind, "IDLE_SECONDS", 3600.0)
    _fork, second, other = _two_branches(service)
    service.restore(second)
    service.db.flush_deferred()

    def last_used(node: int) -> str:
        with sqlite3.connect(service.db.path) as con:
            return con.execute(
                "SELECT last_used_at FROM checkpoint WHERE node_id = ?", (node,)
            ).fetchone()[0]

    before = last_used(other)
    service.restore(other)
    assert last_used(other) == before
    service.db.flush_deferred()
    assert last_used(other) > before


# --- the tree cache follows every write --------------------------------------------


def test_switching_after_each_kind_of_write_stays_exact(service, tiny_model):
    fork, second, other = _two_branches(service)
    service.send(second, "Why?", GREEDY)
    # Checkpoints cleared: the next move reprocesses, and says so.
    service.clear_checkpoints()
    stats = service.restore(other)
    assert stats.reprocessed_tokens > 0
    assert any("missing" in reason for reason in stats.fallbacks)
    # A branch deleted: it is gone from the cached tree too.
    service.delete_branch(other)
    with pytest.raises(NotFound):
        service.restore(other)
    # The same question again, after all that: the logits of a fresh decode
    # of what is stored (tokens, and the batch sizes recorded for them).
    again = service.send(second, "Why?", GREEDY)
    assert again.stats.logits_digest == replayed_digest(
        tiny_model, service.path(again.assistant_node)
    )
    assert fork in [n.id for n in service.path(second)]


def test_reprocessing_is_exact_where_checkpoints_below_rely_on_it(service, tiny_model):
    fork, second, other = _two_branches(service)
    fork_node = service.path(fork)[-1]
    generated = fork_node.chunks
    assert generated.count(1) > 1  # a reply: decoded one token at a time
    # The fork's own checkpoint goes; the branches below keep theirs, which
    # were made on top of its cells: the replay must be exact, and is.
    with sqlite3.connect(service.db.path) as con:
        con.execute("DELETE FROM checkpoint WHERE node_id = ?", (fork,))
    con.close()
    service.restore(second)
    assert service.path(fork)[-1].chunks == generated
    stats = service.restore(other)  # its checkpoints still fit: no reprocessing
    assert stats.reprocessed_tokens == 0

    # Nothing checkpointed anywhere: full batches, and the sizes are recorded.
    service.clear_checkpoints()
    service.restore(service.path(fork)[0].id)  # only the root stays in memory
    stats = service.restore(second)
    assert stats.reprocessed_tokens > 0
    rebatched = service.path(fork)[-1].chunks
    assert rebatched != generated and rebatched.count(1) <= 1
    # What the new checkpoints hold is what a replay of the record gives.
    service.restore(other)
    again = service.send(second, "Why?", GREEDY)
    assert again.stats.reprocessed_tokens == 0
    assert again.stats.logits_digest == replayed_digest(
        tiny_model, service.path(again.assistant_node)
    )


def test_a_write_by_another_connection_is_noticed(service):
    _fork, second, other = _two_branches(service)
    service.restore(second)
    service.restore(other)
    # Another process drops every checkpoint.
    con = sqlite3.connect(service.db.path)
    with con:
        con.execute("DELETE FROM checkpoint")
    con.close()
    stats = service.restore(second)
    assert stats.reprocessed_tokens > 0
    assert any("missing" in reason for reason in stats.fallbacks)


# --- the file ---------------------------------------------------------------------


def test_new_databases_get_large_pages_and_old_ones_still_restore(
    tmp_path, tiny_model, monkeypatch
):
    db = open_database(tmp_path / "new.sqlite3")
    with db.engine.connect() as connection:
        page = connection.exec_driver_sql("PRAGMA page_size").scalar()
        mapped = connection.exec_driver_sql("PRAGMA mmap_size").scalar()
    assert page == PAGE_SIZE and mapped and mapped > 0
    db.close()

    # A file made with SQLite's default pages, as Arbor made them before.
    monkeypatch.setattr(storage_db, "PAGE_SIZE", 4096)
    old = tmp_path / "old.sqlite3"
    open_database(old).close()
    monkeypatch.undo()
    db = open_database(old)
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=1024, n_threads=1)) as engine:
        service = ConversationService(db, engine)
        _fork, second, other = _two_branches(service)
        fresh = ConversationService(db, engine)  # holds nothing: restores all
        assert fresh.restore(second).reprocessed_tokens == 0
        stats = ConversationService(db, engine).restore(other)
        assert stats.reprocessed_tokens == 0 and stats.restored_tokens > 0
    with db.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA page_size").scalar() == 4096
    db.close()


def test_a_restore_from_the_command_line_saves_the_place(arbor):
    # The process exits right after the restore: its deferred write is made
    # at exit, so the next process finds the conversation where it was left.
    root = arbor("new", "--system", "Be brief.")["node"]
    first = arbor("send", root, "Hello", "--temperature", "0", "--max-tokens", "4")
    second = arbor("send", root, "Hi", "--temperature", "0", "--max-tokens", "4")
    assert arbor("list")["conversations"][0]["active_node"] == second["assistant_node"]
    stats = arbor("restore", first["assistant_node"])["stats"]
    assert stats["reprocessed_tokens"] == 0
    listed = arbor("list")["conversations"][0]
    assert listed["active_node"] == first["assistant_node"]


def test_a_cold_restore_sizes_its_read_buffer_once(tmp_path, tiny_model, monkeypatch):
    """Blobs of different sizes are read into one buffer, sized for the largest
    before the first read, not replaced each time a larger one turns up."""
    path = tmp_path / "sized.sqlite3"
    settings = BackendSettings(n_ctx=1024, n_threads=1)
    with LlamaEngine(tiny_model, settings) as engine:
        db = open_database(path)
        writer = ConversationService(db, engine)
        _conv, root = writer.new_conversation("Answer briefly.")
        short = writer.send(root, "Hi.", GREEDY)
        leaf = writer.send(short.assistant_node, "Tell me a lot about " * 12, GREEDY)
        writer.close()
        db.close()
        engine.truncate(0)
        buffers: list[int] = []
        original = checkpoint_reader.CheckpointReader._blob

        def spying(self, raw, ref):  # type: ignore[no-untyped-def]
            data = original(self, raw, ref)
            buffers.append(id(self._buffer))
            return data

        monkeypatch.setattr(checkpoint_reader.CheckpointReader, "_blob", spying)
        # Growth in small steps, so that a buffer sized per blob would show.
        monkeypatch.setattr(checkpoint_reader, "_GROWTH", 1024)
        db = open_database(path)
        cold = ConversationService(db, engine)
        stats = cold.restore(leaf.assistant_node)
        cold.close()
        db.close()
    assert stats.reprocessed_tokens == 0 and stats.restored_tokens > 0
    assert len(buffers) >= 4 and len(set(buffers)) == 1


def test_a_second_service_on_a_known_profile_writes_nothing(tmp_path, tiny_model):
    """Creating a service for a profile the database knows only reads, so the
    caches of services already open (their trees) stay valid."""
    db = open_database(tmp_path / "profile.sqlite3")
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=1024, n_threads=1)) as engine:
        first = ConversationService(db, engine)
        generation, version = db.generation(), _data_version(db.path)
        second = ConversationService(db, engine)
        assert second.profile_id == first.profile_id
        assert db.generation() == generation
        assert _data_version(db.path) == version
    db.close()
