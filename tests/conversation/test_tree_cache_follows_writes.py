"""The tree cache follows the writes that name what they change (issue 23).

A visit that saves a checkpoint, a reply, a span's batch sizes recorded:
the service's own writes name their nodes (``Database.changing``), and the
cache reads only those again, never the whole tree. Every write that names
nothing (another connection or process, another conversation's title, a
deletion, a block of writes still open) still makes it read everything,
and what it holds is always what a fresh read gives.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.checkpoint_writer import CheckpointWriter
from app.conversation.service import ConversationService
from app.conversation.tree_cache import TreeCache
from storage import checkpoint_rows, conversation_rows, node_rows, tree_reads
from storage import db as storage_db
from storage.db import Database, open_database
from storage.errors import NotFound
from tests.helpers.replay import replayed_digest

GREEDY = SamplingParams(temperature=0, max_tokens=12)
# The whole-tree read itself, for comparing: the tests count calls to it.
_TREE_INDEX = tree_reads.tree_index


class _Reads:
    """Counts ``tree_reads.tree_index`` calls: whole-tree reads."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = tree_reads.tree_index

        def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.count += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(tree_reads, "tree_index", counting)

    def since(self, count: int) -> int:
        return self.count - count


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> _Reads:
    return _Reads(monkeypatch)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "follow.sqlite3")
    yield database
    database.close()


@pytest.fixture
def engine(tiny_model: Path) -> Iterator[LlamaEngine]:
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=1024, n_threads=1)) as loaded:
        yield loaded


def _tree(service: ConversationService) -> tuple[int, int, int, int]:
    """A root with two questions below one reply: (root, fork, first, second)."""
    _conv, root = service.new_conversation("Answer briefly.")
    fork = service.send(root, "Tell me about trees.", GREEDY).assistant_node
    first = service.send(fork, "And rivers?", GREEDY).assistant_node
    second = service.send(fork, "And mountains?", GREEDY).assistant_node
    return root, fork, first, second


def _assert_matches_a_fresh_read(cache: TreeCache, db: Database, node: int) -> None:
    """What ``cache`` holds of ``node``'s conversation is what SQLite holds."""
    profile = cache._profile_id
    fresh = _TREE_INDEX(db, node, profile)
    roots = [n for n, parent in fresh.parents.items() if parent is None]
    below = {n for root in roots for n in [root, *cache.below(root)]}
    assert below == set(fresh.parents)
    stored = tree_reads.get_nodes(db, list(fresh.parents))
    for node_id in fresh.parents:
        assert cache.checkpoint(node_id) == fresh.checkpoints.get(node_id)
        assert cache.path(node_id)[-1] == stored[node_id]
    if fresh.checkpoints:
        assert cache.profile == fresh.profile


# --- the database names what its writes changed -----------------------------------


def _chain(db: Database) -> list[int]:
    _conv, root = conversation_rows.create_conversation(db, "t", None)
    user = node_rows.add_node(db, root.id, "user", "q")
    reply = node_rows.add_node(db, user.id, "assistant", "a")
    return [root.id, user.id, reply.id]


def test_a_named_write_is_told_with_its_nodes(db):
    root, user, _reply = _chain(db)
    seen, nothing = db.changes_since(db.generation())
    assert nothing == frozenset()
    with db.changing([user]):
        node_rows.update_node(db, user, text="q2")
    with db.adding() as new:
        added = node_rows.add_node(db, user, "assistant", "b")
        new.add(added.id)
    now, changed_ids = db.changes_since(seen)
    assert now == seen + 2
    assert changed_ids == {user, added.id}
    assert db.changes_since(now) == (now, frozenset())
    conversation_rows.rename_conversation(db, added.conversation_id, "named nothing")
    assert db.changes_since(seen) == (now + 1, None)
    assert db.changes_since(now + 1) == (now + 1, frozenset())
    assert root


def test_named_writes_are_told_as_they_commit(db):
    """Named up front, a write is told with its commit: a cache on another
    thread (the checkpoint writer's writes) never sees it unnamed."""
    _root, user, reply = _chain(db)
    seen = db.generation()
    with db.changing([user]):
        node_rows.update_node(db, user, text="q2")
        assert db.changes_since(seen)[1] == {user}
        node_rows.update_node(db, user, text="q3")
        assert db.changes_since(seen)[1] == {user}
    # A failure after the write does not take back what it committed.
    seen = db.generation()
    with pytest.raises(RuntimeError), db.changing([reply]):
        node_rows.update_node(db, reply, text="b")
        raise RuntimeError("the block failed after its write")
    assert db.changes_since(seen)[1] == {reply}


def test_added_nodes_are_told_when_their_block_ends_well(db):
    _root, user, _reply = _chain(db)
    seen = db.generation()
    with db.adding() as new:
        added = node_rows.add_node(db, user, "assistant", "b").id
        # Committed, but its id is not known to the block yet: not told.
        assert db.changes_since(seen)[1] is None
        new.add(added)
    assert db.changes_since(seen)[1] == {added}

    seen = db.generation()
    with pytest.raises(RuntimeError), db.adding() as new:
        new.add(node_rows.add_node(db, user, "assistant", "c").id)
        raise RuntimeError("the block failed after its write")
    assert db.changes_since(seen)[1] is None


def test_nested_blocks_name_every_write_inside(db):
    _root, user, reply = _chain(db)
    seen = db.generation()
    with db.adding() as new:
        with db.changing([user]), db.changing([reply]):
            node_rows.update_node(db, reply, text="b")
        added = node_rows.add_node(db, reply, "user", "c").id
        new.add(added)
        assert db.changes_since(seen)[1] is None  # the addition: not yet
    assert db.changes_since(seen)[1] == {user, reply, added}


def test_another_threads_block_does_not_name_this_threads_writes(db):
    _root, user, reply = _chain(db)
    seen = db.generation()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with db.changing([reply]):
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    inside.wait(10)
    node_rows.update_node(db, user, text="q2")  # named by nobody
    release.set()
    thread.join()
    assert db.changes_since(seen)[1] is None


def test_another_connections_commit_names_nothing(db):
    _root, user, _reply = _chain(db)
    seen = db.generation()
    other = open_database(db.path)
    try:
        node_rows.update_node(other, user, text="elsewhere")
    finally:
        other.close()
    assert db.changes_since(seen)[1] is None


def test_a_commit_right_after_ours_is_not_taken_for_ours(db, monkeypatch):
    """Another process's commit landing between our commit and our look at
    ``data_version`` passed for ours (the gap ``generation`` named); the
    connection that committed tells them apart, so it names nothing."""
    _root, user, reply = _chain(db)
    original = storage_db.Database._committed
    interleave = [True]

    def committed(self: Database, *args: object) -> int:
        if interleave and interleave.pop():
            with sqlite3.connect(self.path) as other:
                other.execute(
                    "UPDATE node SET text = 'elsewhere' WHERE id = ?", (reply,)
                )
            other.close()
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(storage_db.Database, "_committed", committed)
    seen = db.generation()
    with db.changing([user]):
        node_rows.update_node(db, user, text="q2")
    assert db.changes_since(seen)[1] is None
    seen = db.generation()
    with db.changing([user]):
        node_rows.update_node(db, user, text="q3")  # nothing in between now
    assert db.changes_since(seen)[1] == {user}
    # Bookkeeping alone moves nothing, unless someone's commit came with it.
    conversation_rows.defer_active_node(
        db, node_rows.get_node(db, user).conversation_id, user
    )
    interleave.append(True)
    seen = db.generation()
    db.flush_deferred()
    assert db.generation() != seen


def test_changes_too_long_ago_are_not_kept(db, monkeypatch):
    monkeypatch.setattr(storage_db, "CHANGES_KEPT", 4)
    monkeypatch.setattr(storage_db, "CHANGED_IDS_KEPT", 8)
    root, user, reply = _chain(db)
    seen = db.generation()
    for n in range(5):
        with db.changing([user]):
            node_rows.update_node(db, user, text=f"q{n}")
    assert db.changes_since(seen)[1] is None
    assert db.changes_since(db.generation() - 1)[1] == {user}
    # A move names its whole path: ids count too.
    seen = db.generation()
    for n in range(3):
        with db.changing([root, user, reply]):
            node_rows.update_node(db, reply, text=f"a{n}")
    assert db.changes_since(seen)[1] is None
    assert db.changes_since(db.generation() - 1)[1] == {root, user, reply}


# --- the cache follows them -----------------------------------------------------


def test_a_visit_that_saves_checkpoints_is_followed(db, engine, tiny_model, reads):
    service = ConversationService(db, engine)
    _root, fork, first, second = _tree(service)
    service.clear_checkpoints()  # a deletion: names nothing
    before = reads.count
    # First visits: each reprocesses, records its batch sizes, saves checkpoints.
    assert service.restore(first).reprocessed_tokens > 0
    assert reads.since(before) == 1  # read once, after the deletion
    assert service.restore(second).reprocessed_tokens > 0
    stats = service.restore(first)  # the checkpoints the first visit saved
    assert stats.reprocessed_tokens == 0 and stats.restored_tokens > 0
    assert service.path(fork)[-1].chunks == node_rows.get_node(db, fork).chunks
    assert reads.since(before) == 1
    _assert_matches_a_fresh_read(service._tree, db, first)

    # A reply (two nodes added, their checkpoints, the reply's text) too.
    reply = service.send(first, "Why?", GREEDY)
    assert reads.since(before) == 1
    assert service.restore(second).reprocessed_tokens == 0
    assert reads.since(before) == 1
    _assert_matches_a_fresh_read(service._tree, db, first)
    # And what was followed restores exactly: the logits of a fresh decode.
    again = service.send(reply.assistant_node, "Sure?", GREEDY)
    assert again.stats.reprocessed_tokens == 0
    assert again.stats.logits_digest == replayed_digest(
        tiny_model, service.path(again.assistant_node)
    )
    assert reads.since(before) == 1


def test_the_queued_writers_checkpoints_are_followed(db, engine, reads):
    with ConversationService(db, engine, CheckpointWriter(db)) as service:
        _root, _fork, first, second = _tree(service)
        service.clear_checkpoints()
        service.restore(first)
        service.restore(second)
        # Written on the writer's thread; once written, followed, not read.
        service.flush_checkpoints()
        before = reads.count
        stats = service.restore(first)
        assert stats.reprocessed_tokens == 0 and stats.restored_tokens > 0
        assert reads.since(before) == 0
        _assert_matches_a_fresh_read(service._tree, db, first)


def test_another_connections_write_is_read_again(db, engine, reads):
    service = ConversationService(db, engine)
    _root, fork, first, second = _tree(service)
    service.restore(first)
    other = open_database(db.path)
    try:
        added = node_rows.add_node(other, fork, "user", "from elsewhere").id
        checkpoint_rows.delete_checkpoints(other, node_ids=[second])
    finally:
        other.close()
    before = reads.count
    assert [n.id for n in service.path(added)][-2:] == [fork, added]
    assert reads.since(before) == 1
    assert service._tree.checkpoint(second) is None
    _assert_matches_a_fresh_read(service._tree, db, first)


def test_writes_that_name_nothing_are_read_again(db, engine, reads):
    service = ConversationService(db, engine)
    root, fork, first, second = _tree(service)
    service.restore(first)
    conversation = node_rows.get_node(db, root).conversation_id
    other, _other_root = conversation_rows.create_conversation(db, "another", None)

    cases = [
        # Another conversation's write through the same Database.
        lambda: conversation_rows.rename_conversation(db, other.id, "renamed"),
        # This conversation's, outside the service.
        lambda: node_rows.update_node(db, second, text="edited elsewhere"),
        lambda: conversation_rows.set_reasoning(db, conversation, "off"),
    ]
    for write in cases:
        service.path(first)
        before = reads.count
        write()
        service.path(first)
        assert reads.since(before) == 1
        _assert_matches_a_fresh_read(service._tree, db, first)
    assert service._tree.conversation(conversation).reasoning == "off"

    # A named write between unnamed ones does not hide them.
    service.path(first)
    before = reads.count
    node_rows.update_node(db, fork, text="unnamed")
    with db.changing([first]):
        node_rows.update_node(db, first, text="named")
    assert service.path(first)[-3].text == "unnamed"
    assert reads.since(before) == 1


def test_a_deleted_branch_is_gone_from_the_cache(db, engine, reads):
    service = ConversationService(db, engine)
    _root, fork, first, second = _tree(service)
    service.restore(first)
    service.delete_branch(second)
    with pytest.raises(NotFound):
        service.path(second)
    assert second not in service._tree.below(fork)
    # Even where a deletion names its node (it must not vanish unseen).
    question = service.path(first)[-2].id
    with db.changing([question, first]):
        node_rows.delete_subtree(db, question)
    with pytest.raises(NotFound):
        service.path(first)
    assert question not in service._tree.below(fork)


def test_another_conversations_named_write_is_left_alone(db, engine, reads):
    service = ConversationService(db, engine)
    _root, _fork, first, _second = _tree(service)
    other, other_root = conversation_rows.create_conversation(db, "another", None)
    service.path(first)
    before = reads.count
    with db.adding() as changed:
        changed.add(node_rows.add_node(db, other_root.id, "user", "q").id)
    tree = service._tree
    service.path(first)
    assert reads.since(before) == 0
    assert not set(changed) & set(tree.below(service.path(first)[0].id))
    _assert_matches_a_fresh_read(tree, db, first)
    assert other.id != service.path(first)[0].conversation_id
