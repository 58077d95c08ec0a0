"""The window's state machine without a window: a real database, the real engine
worker run on the test's own thread (one job after another, as on its
thread), and a view that records what it is told."""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from pathlib import Path

import pytest

from app import jobs
from app.conversation.batches import Batches
from app.jobs.results import Deleted, Failed, ModelLoaded
from app.platform.paths import database_path
from app.preferences import load_preferences
from app.window.actions import ACTIONS, MENUS, RECENT_MODELS, SHORTCUTS_HELP, When
from storage import conversation_rows, node_rows
from storage.db import Database, open_database
from storage.errors import NotFound
from tests.helpers.presenter_session import Session
from tests.helpers.workers import free_ports

WRITABLE_ACTIONS = {spec.name for spec in ACTIONS if spec.when is When.WRITABLE}
GO_ACTIONS = {"previous_branch", "next_branch", "parent_message", "child_message"}


def _conversation(db: Database, title: str) -> tuple[int, int]:
    conversation, root = conversation_rows.create_conversation(db, title, None)
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
    assert conversation_rows.get_conversation(s.db, conversation).title == "Untitled"
    s.engine.run_jobs()
    assert conversation_rows.get_conversation(s.db, conversation).title == "Oaks"

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
    assert conversation_rows.get_conversation(s.db, newer).title == "Newer"
    s.engine.run_jobs()
    with pytest.raises(NotFound):
        conversation_rows.get_conversation(s.db, newer)
    assert s.view.said("refresh_list")[-1] == (older,)

    p.delete_conversation(older)  # the last one: a new conversation replaces it
    assert p.conversation_id is None and p.active_id is None
    s.engine.run_jobs()
    assert [c.id for c in conversation_rows.list_conversations(s.db)] == [
        p.conversation_id
    ]


def test_deleting_another_conversation_keeps_the_shown_one(open_session):
    s = open_session()
    other, _ = _conversation(s.db, "Other")
    shown, _ = _conversation(s.db, "Shown")
    s.presenter.start(None)
    s.engine.run_jobs()
    s.presenter.delete_conversation(other)
    s.engine.run_jobs()
    assert s.presenter.conversation_id == shown
    assert [c.id for c in conversation_rows.list_conversations(s.db)] == [shown]


def test_a_read_only_database_is_browsed_without_a_single_job(
    open_session, data_dir, tiny_model, monkeypatch
):
    db = open_database(database_path(data_dir))
    conversation, root = _conversation(db, "Notes")
    user = node_rows.add_node(db, root, "user", "Where to?")
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
    assert all(states[name] for name in GO_ACTIONS)
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
    assert not any(states[name] for name in WRITABLE_ACTIONS)
    # Reading goes on while the reply streams: finding, walking the tree.
    assert states["stop"] and states["find"]
    assert all(states[name] for name in GO_ACTIONS)
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
    gone = node_rows.add_node(s.db, root, "user", "soon deleted")
    reply = node_rows.add_node(s.db, gone.id, "assistant", "an answer")
    p.reload_tree()
    p.activate(reply.id)
    s.engine.run_jobs()
    node_rows.delete_subtree(s.db, gone.id)  # behind the window's back

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
    assert isinstance(deleted, Deleted) and deleted.context_tokens == 0
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


# --- typing on a message of yours, reading while a reply streams, Stop -----------


def _loaded(open_session, model: Path, **backend) -> Session:
    s = open_session()
    p = s.presenter
    if backend:
        p.prefs = replace(p.prefs, backend=replace(p.prefs.backend, **backend))
    p.start(model)
    s.engine.run_jobs()
    assert p.model_info is not None
    return s


def test_text_typed_on_a_message_of_yours_is_sent_as_its_new_version(
    open_session, tiny_model
):
    s = _loaded(open_session, tiny_model)
    p = s.presenter
    p.send("first question", None)
    s.engine.run_jobs()
    question = p.last_of_role("user")
    p.activate(question)
    s.engine.run_jobs()
    available, placeholder = p.composer_state()
    assert available and "new version" in placeholder and "reply" in placeholder

    # Typed text: a sibling of the selected message, and the text is taken.
    assert p.send("second question", None) is True
    job = s.engine.submitted[-1]
    assert isinstance(job, jobs.Edit) and job.node_id == question
    s.engine.run_jobs()
    assert len(p.snapshot.siblings(question)) == 2
    assert p.snapshot.nodes[p.last_of_role("user")].text == "second question"

    # An empty box on a message of yours: its reply, as its own action does.
    p.activate(question)
    s.engine.run_jobs()
    assert p.send("   ", None) is False
    assert isinstance(s.engine.submitted[-1], jobs.GenerateReply)
    s.engine.run_jobs()
    p.activate(question)
    s.engine.run_jobs()
    p.reply_to_active()
    assert s.engine.submitted[-1] == jobs.GenerateReply(
        question, p.prefs.sampling, p.prefs.checkpoint_budget_bytes
    )
    s.engine.run_jobs()
    assert len(p.snapshot.children[question]) == 3


def test_reading_elsewhere_while_a_reply_streams_and_coming_back(
    open_session, tiny_model
):
    s = _loaded(open_session, tiny_model)
    p = s.presenter
    p.prefs = replace(p.prefs, sampling=replace(p.prefs.sampling, max_tokens=24))
    streaming = p.conversation_id
    other, other_root = _conversation(s.db, "Other")
    asked = node_rows.add_node(s.db, other_root, "user", "elsewhere")
    node_rows.add_node(s.db, asked.id, "assistant", "an old answer")

    seen: list[str] = []
    s.engine.worker.token_received.connect(seen.append)

    def wander(_piece: str) -> None:
        # Mid-reply, as a user would: read the other conversation, walk its
        # tree, then come back to the reply as it streams.
        if len(seen) == 3:
            p.select_conversation(other)
            p.parent_message()
        elif len(seen) == 8:
            p.select_conversation(streaming)

    s.engine.worker.token_received.connect(wander)
    assert p.send("tell me a story", None) is True
    s.engine.run_jobs()

    reply = s.engine.results[-1].reply
    assert len(seen) > 9, "the reply must stream on after the user came back"
    assert reply is not None and "".join(seen) == reply.text
    # While away nothing streamed into the transcript; coming back showed the
    # reply as far as it got (one piece), then it streamed on.
    appended = [args[0] for args in s.view.said("append_stream")]
    assert appended[:3] == seen[:3]
    assert appended[3] == "".join(seen[:8]) and appended[4:] == seen[8:]
    assert [args[:2] for args in s.view.said("begin_reply")] == [
        (p.snapshot.root_id, "tell me a story"),
        (p.snapshot.root_id, "tell me a story"),
    ]
    # The list said a reply was being written there, then no longer.
    said = s.view.said("show_generating")
    assert said[0] == (streaming, "Writing a reply…") and said[-1] == (streaming, None)
    assert p.conversation_id == streaming and p.active_id == reply_node(s)
    # Reading asked nothing of the engine while it generated.
    assert isinstance(s.engine.submitted[-1], jobs.Send)


def reply_node(s: Session) -> int:
    node = s.engine.results[-1].node_id
    assert node is not None
    return node


def test_a_reply_that_ends_while_the_user_reads_elsewhere_leaves_them_there(
    open_session, tiny_model
):
    s = _loaded(open_session, tiny_model)
    p = s.presenter
    streaming = p.conversation_id
    other, other_root = _conversation(s.db, "Other")
    asked = node_rows.add_node(s.db, other_root, "user", "elsewhere")
    p.send("hello", None)
    p.select_conversation(other)
    p.activate(asked.id)
    # Browsing asked nothing of the engine, which is generating.
    assert isinstance(s.engine.submitted[-1], jobs.Send)
    assert p.composer_state()[0] is False
    assert "being written elsewhere" in p.composer_state()[1]
    s.engine.run_jobs()
    assert not p.generating
    assert p.conversation_id == other and p.active_id == asked.id
    # Now the engine goes where the user is.
    assert s.engine.submitted[-1] == jobs.Restore(asked.id)
    assert s.view.said("append_stream") == []
    s.engine.run_jobs()
    assert s.stored_active(other) == asked.id
    stored = conversation_rows.get_conversation(s.db, streaming).active_node_id
    assert node_rows.get_node(s.db, stored).role == "assistant"


def test_stop_while_a_long_prompt_is_read_ends_within_a_batch(open_session, tiny_model):
    s = _loaded(open_session, tiny_model, n_ctx=2048, n_batch=32)
    p = s.presenter
    reports: list[tuple[int, int]] = []

    def stop_at_the_third_batch(done: int, total: int) -> None:
        reports.append((done, total))
        if len(reports) == 3:
            p.stop()

    s.engine.worker.progress.connect(stop_at_the_third_batch)
    text = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)
    assert p.send(text, None) is True
    s.engine.run_jobs()

    # Reported batch by batch (its role header first, in a batch of its own),
    # and stopped before the fourth batch was read.
    node = p.snapshot.nodes[p.active_id]
    header, first, *_rest = Batches.of(node_rows.get_node(s.db, node.id).chunks).sizes
    assert first == 32
    total = reports[0][1]
    assert total > 4 * 32
    assert [done for done, _ in reports] == [0, header, header + 32]
    result = s.engine.results[-1]
    assert isinstance(result, Failed) and result.stopped
    assert s.view.said("show_error") == [] and s.view.said("give_back_text") == []
    busy = [args[0] for args in s.view.said("set_busy") if args[0]]
    assert f"Reading the prompt… {header + 32} of {total:,} tokens" in busy
    # The message is kept, unanswered, and is where the conversation stands.
    assert node.role == "user" and node.text == text
    assert p.snapshot.children[p.active_id] == []
    assert "empty box" in s.view.said("show_message")[-1][0]

    # Its reply can be asked for at once, and the prompt is read in full.
    s.engine.worker.progress.disconnect(stop_at_the_third_batch)
    assert p.send("", None) is False
    s.engine.run_jobs()
    assert s.engine.results[-1].reply is not None


def test_stop_pressed_before_a_queued_reply_starts_stops_it(open_session, tiny_model):
    s = _loaded(open_session, tiny_model)
    p = s.presenter
    assert p.send("hello there", None) is True
    # The window shows the reply as coming; the engine thread has not begun it.
    assert p.generating and s.engine.queue
    assert p.stop() is True
    s.engine.run_jobs()
    result = s.engine.results[-1]
    # Stopped before its first token, as a Stop at once would have.
    assert result.reply is not None
    assert result.reply.stats.stop_reason == "stopped"
    assert result.reply.stats.generated_tokens == 0
    # The Stop is used up: the next reply runs its course.
    assert p.send("and again", None) is True
    s.engine.run_jobs()
    reply = s.engine.results[-1].reply
    assert reply is not None and reply.stats.stop_reason != "stopped"
    assert reply.stats.generated_tokens > 0


def test_stop_while_a_model_loads_keeps_the_model_there_was(
    open_session, tiny_model, other_tiny_model
):
    s = _loaded(open_session, tiny_model)
    p = s.presenter
    loaded = p.model_info
    reports: list[int] = []

    def stop_at_once(done: int, _total: int) -> None:
        reports.append(done)
        p.stop()

    s.engine.worker.progress.connect(stop_at_once)
    p.load_model(other_tiny_model)
    s.engine.run_jobs()
    result = s.engine.results[-1]
    assert isinstance(result, Failed) and result.stopped
    assert reports == [0]  # stopped at its first report
    assert p.model_info == loaded and s.view.said("show_error") == []
    assert "Loading stopped" in s.view.said("show_message")[-1][0]
    assert s.engine.worker._service.engine is not None
    assert s.engine.worker._service.engine.path == Path(loaded.path)


def test_a_conversation_that_does_not_fit_says_so_when_it_opens(
    open_session, tiny_model
):
    s = _loaded(open_session, tiny_model, n_ctx=256)
    p = s.presenter
    big, root = _conversation(s.db, "Too long")
    asked = node_rows.add_node(s.db, root, "user", "tell me everything")
    long_answer = " ".join(["a long answer with many words"] * 80)
    node_rows.add_node(s.db, asked.id, "assistant", long_answer)

    p.select_conversation(big)
    s.engine.run_jobs()
    assert isinstance(s.engine.results[-1].job, jobs.Restore)
    assert isinstance(s.engine.results[-1], Failed)
    assert s.engine.results[-1].context_full
    # Said at once, with the ways on (branch, a larger context, a summary).
    assert s.view.said("show_context_full") == [()]
    ((message, n_ctx, _n_ctx_train, needed),) = s.view.said("offer_ways_on")
    assert n_ctx == p.model_info.n_ctx and "256" in message and needed is None
    assert s.view.said("show_error") == []


def test_new_conversations_left_unused_are_not_kept(open_session):
    s = open_session()
    p = s.presenter
    p.start(None)
    s.engine.run_jobs()
    first = p.conversation_id
    # New conversation on a new one: nothing is added.
    p.new_conversation()
    assert s.engine.queue == deque() and "new" in s.view.said("show_message")[-1][0]
    used, root = _conversation(s.db, "Used")
    node_rows.add_node(s.db, root, "user", "kept")
    # Leaving an unused one deletes it; one with a message stays.
    p.select_conversation(used)
    s.engine.run_jobs()
    assert s.view.said("conversation_removed") == [(first,)]
    titles = [c.title for c in conversation_rows.list_conversations(s.db)]
    assert titles == ["Used"]
    # A conversation with a system prompt is the user's: it stays.
    p.new_conversation(system_prompt="Answer in French.")
    s.engine.run_jobs()
    prompted = p.conversation_id
    p.select_conversation(used)
    s.engine.run_jobs()
    assert {c.id for c in conversation_rows.list_conversations(s.db)} == {
        used,
        prompted,
    }


def test_conversations_can_be_read_without_a_model(open_session):
    s = open_session()
    conversation, root = _conversation(s.db, "Read me")
    node_rows.add_node(s.db, root, "user", "an old question")
    p = s.presenter
    p.start(None)
    s.engine.run_jobs()
    # The transcript, not the page that asks for a model; the composer says why
    # it cannot send.
    assert s.view.said("show_chat") == [(True,)]
    assert p.conversation_id == conversation
    assert p.composer_state()[0] is False
    assert "Choose a model" in p.composer_state()[1]


def test_a_first_message_names_the_conversation_as_it_is_sent(open_session, tiny_model):
    s = _loaded(open_session, tiny_model)
    p = s.presenter
    p.send("Which trees grow by rivers?", None)
    # Before the reply: the list and the window show the name already.
    assert s.view.said("show_title")[-1] == (
        p.conversation_id,
        "Which trees grow by rivers?",
    )
    s.engine.run_jobs()
    stored = conversation_rows.get_conversation(s.db, p.conversation_id).title
    assert stored == "Which trees grow by rivers?"


def test_a_new_system_prompt_is_a_new_start_and_the_sampling_is_the_conversations(
    open_session, tiny_model
):
    s = _loaded(open_session, tiny_model)
    p = s.presenter
    p.send("Which birds sing at night?", None)
    s.engine.run_jobs()
    old_reply = p.active_id
    first_root = p.snapshot.root_id
    assert p.branch_system_prompt() == ""
    assert p.conversation_sampling() == (p.prefs.sampling, None)

    precise = next(x for x in p.prefs.presets if x.name == "Precise")
    p.change_conversation_settings(
        precise.system_prompt, precise.sampling, precise.name
    )
    s.engine.run_jobs()
    # A second start, shown and active; the first one's branch is kept.
    assert p.snapshot.roots == [first_root, p.active_id]
    assert p.branch_system_prompt() == precise.system_prompt
    assert old_reply in p.snapshot
    assert p.conversation_sampling() == (precise.sampling, "Precise")

    # The next message goes under the new start, with the preset's sampling.
    p.send("Which birds sing at night?", None)
    job = s.engine.submitted[-1]
    assert isinstance(job, jobs.Send) and job.params == precise.sampling
    assert job.parent_id == p.snapshot.roots[1]
    s.engine.run_jobs()
    assert p.snapshot.path(p.active_id)[0] == p.snapshot.roots[1]

    # Back on the old branch: its own prompt; the same text again changes
    # nothing, and the Settings' sampling comes back with None.
    p.activate(old_reply)
    s.engine.run_jobs()
    assert p.branch_system_prompt() == ""
    submitted = len(s.engine.submitted)
    p.change_conversation_settings("", None, None)
    assert [type(j) for j in s.engine.submitted[submitted:]] == [jobs.SetSampling]
    s.engine.run_jobs()
    assert conversation_rows.get_conversation(s.db, p.conversation_id).sampling is None
    assert p.conversation_sampling() == (p.prefs.sampling, None)


def test_freeing_space_shows_how_far_it_got_in_bytes(open_session):
    s = open_session()
    p = s.presenter
    job = jobs.EvictCheckpoints(1 << 20)
    p.on_started(job)
    p.on_progress(512 << 20, 3 << 30)  # past what a 32-bit progress bar counts
    text = s.view.said("set_busy")[-1][0]
    assert text.startswith("Freeing space… ") and " of " in text
    assert s.view.said("show_progress")[-1] == (166, 1000)


def test_a_lost_engine_offers_to_load_again_on_the_remaining_workers(
    open_session, tiny_model
):
    # The window's side of a worker lost (issue 25); the child process and
    # real workers are tests/ui/test_workers_window.py's.
    s = _loaded(open_session, tiny_model)
    p = s.presenter
    # Neither answers: nothing listens on these ports.
    alive, gone = (f"127.0.0.1:{port}" for port in free_ports(2))
    loaded = next(r for r in s.engine.results if isinstance(r, ModelLoaded))
    # Split by hand: the lost worker's count goes with it.
    on_workers = replace(p.prefs.backend, workers=(alive, gone), worker_layers=(1, 2))
    p.on_finished(replace(loaded, job=jobs.LoadModel(loaded.job.path, on_workers)))
    said = f"Worker {gone} was lost (it stopped answering)."
    p.on_finished(
        Failed(jobs.Restore(p.active_id), said, engine_lost=True, lost_workers=(gone,))
    )
    assert p.model_info is None and p.model.after_loss is not None
    assert s.view.said("offer_reload") == [(said, (alive,))]
    assert s.view.said("show_error") == [] and s.view.said("model_missing") == []
    assert "worker was lost" in p.composer_state()[1]

    p.reload_after_loss(on_workers=True)
    job = s.engine.submitted[-1]
    remaining = replace(on_workers, workers=(alive,), worker_layers=())
    assert job == jobs.LoadModel(loaded.job.path, remaining)
    s.engine.run_jobs()  # that one does not answer either: said, nothing loaded
    assert f"Worker {alive}: nothing listens there" in s.view.said("show_error")[-1][1]
    assert p.model_info is None and p.model.after_loss is not None

    p.reload_after_loss(on_workers=False)  # this computer alone
    assert s.engine.submitted[-1].settings.workers == ()
    s.engine.run_jobs()
    assert p.model_info is not None and p.model.after_loss is None
