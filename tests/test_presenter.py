"""The window's state machine without a window: a real database, the real engine
worker run on the test's own thread (one job after another, as on its
thread), and a view that records what it is told."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from pathlib import Path

import pytest

from app.actions import ACTIONS, MENUS, RECENT_MODELS, SHORTCUTS_HELP, When
from app.paths import database_path
from app.preferences import load_preferences
from app.presenter import View, WindowPresenter
from app.values import SamplingParams
from app.workers import jobs
from app.workers.engine_worker import EngineWorker
from app.workers.jobs import JobResult
from storage import repository
from storage.db import Database, open_database
from storage.errors import NotFound

VIEW_METHODS = {name for name in vars(View) if not name.startswith("_")}
WRITABLE_ACTIONS = {spec.name for spec in ACTIONS if spec.when is When.WRITABLE}
IDLE_ACTIONS = {spec.name for spec in ACTIONS if spec.when is When.IDLE}


class RecordingView:
    """A ``View`` that records each call as ``(method, *args)``."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        if name not in VIEW_METHODS:  # the presenter asked for something else
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args))

    def said(self, method: str) -> list[tuple]:
        """The arguments of every call of ``method``, in order."""
        return [tuple(args) for name, *args in self.calls if name == method]


class InlineEngine:
    """The engine thread's queue, run on the test's thread by ``run_jobs``."""

    def __init__(self, db: Database) -> None:
        self.worker = EngineWorker(db)
        self.queue: deque[jobs.Job] = deque()
        self.submitted: list[jobs.Job] = []
        self.results: list[JobResult] = []
        self.worker.finished.connect(self.results.append)

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    def submit(self, job: jobs.Job) -> None:
        self.queue.append(job)
        self.submitted.append(job)

    def stop(self) -> None:
        self.worker.cancel_requested.set()

    def run_jobs(self) -> None:
        while self.queue:
            self.worker.run(self.queue.popleft())


class Session:
    """A presenter on a database, with its view and its engine."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.view = RecordingView()
        self.engine = InlineEngine(db)
        prefs = load_preferences(db)
        prefs = replace(
            prefs,
            backend=replace(prefs.backend, n_threads=1),
            sampling=SamplingParams(temperature=0, max_tokens=12),
        )
        self.presenter = WindowPresenter(db, self.engine, prefs, self.view)
        self.engine.worker.started.connect(self.presenter.on_started)
        self.engine.worker.failed.connect(self.presenter.on_failed)
        self.engine.worker.finished.connect(self.presenter.on_finished)

    def stored_active(self, conversation_id: int) -> int | None:
        return repository.get_conversation(self.db, conversation_id).active_node_id


@pytest.fixture
def open_session(data_dir: Path):
    """Open sessions on the test's database; their models are freed afterwards."""
    opened: list[tuple[Session, Database]] = []

    def open_one() -> Session:
        db = open_database(database_path(data_dir))
        session = Session(db)
        opened.append((session, db))
        return session

    yield open_one
    for session, db in opened:
        session.engine.worker.close()
        db.close()


def _conversation(db: Database, title: str) -> tuple[int, int]:
    conversation, root = repository.create_conversation(db, title, None)
    return conversation.id, root.id


# --- without a model ------------------------------------------------------------


def test_a_first_start_creates_a_conversation_and_asks_for_a_model(open_session):
    s = open_session()
    p = s.presenter
    p.start(None)
    assert s.engine.submitted == [jobs.NewConversation(None, None)]
    assert s.view.said("show_chat") == [(False,)]
    assert p.conversation_id is None

    s.engine.run_jobs()
    assert p.conversation_id is not None and p.active_id == p.snapshot.root_id
    # No model: where to reopen is stored by a job of its own, not by a restore.
    assert isinstance(s.engine.submitted[-1], jobs.SetActiveNode)
    assert s.stored_active(p.conversation_id) == p.active_id
    assert p.composer_state() == (
        False,
        "Choose a model to start chatting (File → Open model file, Ctrl+O).",
    )
    assert all(p.action_states().values())  # idle and writable: all enabled


def test_renaming_shows_the_title_at_once_and_the_worker_stores_it(open_session):
    s = open_session()
    conversation, _root = _conversation(s.db, "Untitled")
    s.presenter.start(None)
    s.engine.run_jobs()

    s.presenter.rename_conversation(conversation, "Oaks")
    assert s.view.said("show_title")[-1] == (conversation, "Oaks")
    assert repository.get_conversation(s.db, conversation).title == "Untitled"
    s.engine.run_jobs()
    assert repository.get_conversation(s.db, conversation).title == "Oaks"

    # A title the database cannot take: an error, and the stored title again.
    s.presenter.rename_conversation(conversation, "bad \udc80 title")
    s.engine.run_jobs()
    title, text = s.view.said("show_error")[-1]
    assert title == "Could not rename the conversation" and "UTF-8" in text
    assert s.view.said("show_title")[-1] == (conversation, "Oaks")


def test_deleting_the_shown_conversation_moves_to_the_most_recent_other(
    open_session,
):
    s = open_session()
    p = s.presenter
    older, _ = _conversation(s.db, "Older")
    newer, _ = _conversation(s.db, "Newer")
    p.start(None)
    s.engine.run_jobs()
    assert p.conversation_id == newer

    p.delete_conversation(newer)
    # The list and the window move on at once; the worker deletes in order.
    assert s.view.said("conversation_removed") == [(newer,)]
    assert p.conversation_id == older
    assert repository.get_conversation(s.db, newer).title == "Newer"
    s.engine.run_jobs()
    with pytest.raises(NotFound):
        repository.get_conversation(s.db, newer)
    assert s.view.said("refresh_list")[-1] == (older,)

    p.delete_conversation(older)  # the last one: a new conversation replaces it
    assert p.conversation_id is None and p.active_id is None
    s.engine.run_jobs()
    assert [c.id for c in repository.list_conversations(s.db)] == [p.conversation_id]


def test_deleting_another_conversation_keeps_the_shown_one(open_session):
    s = open_session()
    other, _ = _conversation(s.db, "Other")
    shown, _ = _conversation(s.db, "Shown")
    s.presenter.start(None)
    s.engine.run_jobs()
    s.presenter.delete_conversation(other)
    s.engine.run_jobs()
    assert s.presenter.conversation_id == shown
    assert [c.id for c in repository.list_conversations(s.db)] == [shown]


def test_a_read_only_database_is_browsed_without_a_single_job(
    open_session, data_dir, tiny_model, monkeypatch
):
    db = open_database(database_path(data_dir))
    conversation, root = _conversation(db, "Notes")
    user = repository.add_node(db, root, "user", "Where to?")
    db.close()
    monkeypatch.setattr(
        "storage.db._read_only_reason", lambda *_a, **_k: "a test says so"
    )
    s = open_session()
    p = s.presenter
    assert s.db.read_only

    p.start(tiny_model)  # no model is loaded: nothing could be written
    assert s.view.said("show_chat") == [(True,)]
    assert p.conversation_id == conversation
    p.activate(user.id)
    p.parent_message()
    p.save_preferences(replace(p.prefs, tree_view="graph"))  # kept, not stored
    assert p.active_id == root and p.prefs.tree_view == "graph"
    assert s.engine.submitted == []
    states = p.action_states()
    assert not any(states[name] for name in WRITABLE_ACTIONS)
    assert all(states[name] for name in IDLE_ACTIONS)
    assert p.composer_state() == (False, "Read-only: you can read, not write.")

    # Asked anyway (the sidebar's menu): the worker refuses and says why.
    p.rename_conversation(conversation, "Other")
    assert s.view.said("show_title") == []
    s.engine.run_jobs()
    assert s.view.said("show_error")[-1][0] == "Could not rename the conversation"


# --- with a model ---------------------------------------------------------------


def test_replies_regenerate_and_branch_switches_through_jobs(open_session, tiny_model):
    s = open_session()
    p = s.presenter
    p.start(tiny_model)
    assert p.loading_model == str(tiny_model)
    assert p.composer_state() == (False, "Loading the model…")
    s.engine.run_jobs()
    assert p.model_info is not None and s.view.said("model_loaded")
    # The worker stored the model as the one to open next time.
    assert load_preferences(s.db).recent_models == (str(tiny_model),)

    assert p.send("  hello  ", None) is True  # the composer's text was taken
    job = s.engine.submitted[-1]
    assert isinstance(job, jobs.Send) and job.text == "hello"
    assert p.generating and s.view.said("begin_reply")[-1] == (p.active_id, "hello", 0)
    states = p.action_states()
    assert not any(states[name] for name in WRITABLE_ACTIONS | IDLE_ACTIONS)
    assert states["stop"] and states["find"]
    s.engine.run_jobs()
    assert not p.generating and s.view.said("show_reply_stats")
    first = p.active_id
    assert p.snapshot.nodes[first].role == "assistant"
    assert s.stored_active(p.conversation_id) == first  # stored by the reply itself
    assert s.engine.submitted[-1] is job  # so nothing is written after it
    # The tree was read by the engine after the reply's checkpoints were
    # written, and shown as it came: the GUI thread did not read it again.
    assert p.snapshot is s.engine.results[-1].tree
    assert p.snapshot.nodes[first].checkpoint_bytes > 0

    p.regenerate_last()
    assert isinstance(s.engine.submitted[-1], jobs.Regenerate)
    s.engine.run_jobs()
    second = p.active_id
    assert second != first and p.snapshot.siblings(first) == [first, second]

    p.previous_branch()
    # With a model, going to a node is a restore, which also stores the place.
    assert s.engine.submitted[-1] == jobs.Restore(first) and p.active_id == first
    s.engine.run_jobs()
    assert s.stored_active(p.conversation_id) == first
    assert s.view.said("show_restore")

    user = p.last_of_role("user")
    assert p.send("hello again", editing=user) is True
    edit = s.engine.submitted[-1]
    assert isinstance(edit, jobs.Edit) and edit.node_id == user
    s.engine.run_jobs()
    assert len(p.snapshot.siblings(user)) == 2


def test_a_failed_reply_gives_the_text_back(open_session, tiny_model):
    s = open_session()
    p = s.presenter
    p.start(tiny_model)
    s.engine.run_jobs()
    root = p.active_id
    gone = repository.add_node(s.db, root, "user", "soon deleted")
    reply = repository.add_node(s.db, gone.id, "assistant", "an answer")
    p.reload_tree()
    p.activate(reply.id)
    s.engine.run_jobs()
    repository.delete_subtree(s.db, gone.id)  # behind the window's back

    assert p.send("lost?", None) is True
    s.engine.run_jobs()
    assert s.view.said("show_error")[-1][0] == "Could not generate a reply"
    assert s.view.said("give_back_text") == [("lost?",)]
    assert not p.generating and p.active_id == root  # where the conversation stands


def test_deleting_the_conversation_the_engine_holds_empties_its_context(
    open_session, tiny_model
):
    s = open_session()
    p = s.presenter
    p.start(tiny_model)
    s.engine.run_jobs()
    held = p.conversation_id
    p.send("hello", None)
    s.engine.run_jobs()

    p.delete_conversation(held)  # the engine holds its path
    s.engine.run_jobs()
    deleted = next(
        r for r in s.engine.results if isinstance(r.job, jobs.DeleteConversation)
    )
    assert deleted.error is None and deleted.context_tokens == 0
    assert deleted.n_ctx > 0  # a model is loaded: its context is empty, not absent

    shown = p.conversation_id  # the new conversation, now held by the engine
    p.send("hello", None)
    s.engine.run_jobs()
    other, _ = _conversation(s.db, "Not held")
    p.delete_conversation(other)
    s.engine.run_jobs()
    assert s.engine.results[-1].job == jobs.DeleteConversation(other)
    assert s.engine.results[-1].context_tokens > 0  # what it held stays
    assert p.conversation_id == shown


# --- the action table -----------------------------------------------------------


def test_the_action_table_is_consistent():
    names = [spec.name for spec in ACTIONS]
    assert len(names) == len(set(names))
    in_menus = [e for _title, entries in MENUS for e in entries if e]
    assert set(in_menus) - {RECENT_MODELS} == set(names)  # each action, once
    assert len(in_menus) == len(set(in_menus))
    for spec in ACTIONS:
        keys = [k for k in spec.shortcuts if not k.startswith("Standard:")]
        assert not keys or any(k in SHORTCUTS_HELP for k in keys), spec.name
