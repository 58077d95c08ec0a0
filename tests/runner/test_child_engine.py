"""The window's jobs in a child process (issue 25): what a job streams comes
across, Stop reaches the child, a child that dies ends its job as a lost
engine (never this process), and the workers that no longer answer are named.

Real parts: a spawned interpreter running ``JobRunner`` on the tiny model and
the test's database file. No Qt.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import jobs
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.results import StopReason
from app.jobs.results import Created, Failed, ModelLoaded, Replied
from app.runner import child_process
from app.runner.child_process import (
    ChildEngine,
    lost_message,
    stop_flag,
    unanswering,
)
from app.runner.job_runner import Reports
from app.runner.worker_sockets import TIMEOUT_ENV
from storage import node_rows
from storage.db import Database
from storage.values import Status
from tests.helpers.workers import free_port, running_worker

SHORT = SamplingParams(temperature=0, max_tokens=12)
# Greedy "hi" makes the tiny model talk until its limit: 3,000 tokens take
# the child a second or more, so this process may lag that far behind what
# the child streams and a Stop, a freeze or a kill set at the third or fifth
# token still lands mid-reply (at 400 tokens, a loaded machine's lag of a
# tenth of a second let the reply end first).
LONGEST = SamplingParams(temperature=0, max_tokens=3000)
# Far above any bound here, far below "for good": a job still running after
# this has hung.
HANG_S = 60


class Heard:
    """What the child streamed, and a Stop byte shared with it."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.progress: list[tuple[int, int]] = []
        self.stop = stop_flag()
        # Called with each token as it arrives (a test's hook).
        self.on_token = lambda _piece: None

    def reports(self) -> Reports:
        def token(piece: str) -> None:
            self.tokens.append(piece)
            self.on_token(piece)

        return Reports(
            on_token=token,
            on_thinking=lambda _piece: None,
            on_alternative=lambda _index, _piece: None,
            on_progress=lambda done, total: self.progress.append((done, total)),
            should_stop=lambda: bool(self.stop.value),
        )


@pytest.fixture
def child(db: Database, tiny_model: Path) -> Iterator[tuple[ChildEngine, Heard, int]]:
    """A child with the tiny model loaded and a new conversation: the child,
    what it streams, and the conversation's root."""
    heard = Heard()
    engine = ChildEngine(db.path, (), heard.reports(), heard.stop)
    try:
        loaded = engine.run(jobs.LoadModel(tiny_model, BackendSettings(n_threads=1)))
        assert isinstance(loaded, ModelLoaded), loaded
        assert heard.progress[-1] == (1000, 1000)  # the load's progress came
        created = engine.run(jobs.NewConversation(None))
        assert isinstance(created, Created) and created.node_id is not None
        yield engine, heard, created.node_id
    finally:
        engine.close()


def test_a_reply_streams_across_and_is_stored(child, db):
    engine, heard, root = child
    job = jobs.Send(root, "Tell me about trees.", SHORT)
    result = engine.run(job)
    assert isinstance(result, Replied)
    assert result.job is job  # matched to the job sent, not a copy
    assert heard.tokens, "no token came across"
    assert "".join(heard.tokens) == result.reply.text
    # Written by the child, read here: the same database file.
    path = node_rows.get_path(db, result.node_id)
    assert [n.role for n in path] == ["root", "user", "assistant"]
    assert path[2].text == result.reply.text
    assert result.tree is not None and result.node_id in result.tree


def test_stop_reaches_the_child(child, db):
    engine, heard, root = child

    def stop_after_five(_piece: str) -> None:
        if len(heard.tokens) == 5:
            heard.stop.value = 1

    heard.on_token = stop_after_five
    result = engine.run(jobs.Send(root, "hi", LONGEST))
    heard.stop.value = 0  # used up, as the engine thread does
    assert isinstance(result, Replied)
    # It lands: the reply ended because of it, not at its limit. How many
    # tokens the child wrote before it saw the byte depends on how fast each
    # process runs (46 on a loaded machine), so no count is asserted beyond
    # the five that came before the byte was set.
    reply = result.reply
    assert reply.stats.stop_reason == StopReason.STOPPED
    assert 5 <= reply.stats.generated_tokens < LONGEST.max_tokens
    # Stored whole and marked stopped: every token that streamed here.
    stored = node_rows.get_node(db, result.node_id)
    assert stored.status == Status.STOPPED
    assert stored.text == reply.text == "".join(heard.tokens)
    # The child goes on: the next reply runs to its end.
    heard.on_token = lambda _piece: None
    after = engine.run(jobs.Send(result.node_id, "And then?", SHORT))
    assert isinstance(after, Replied)
    assert after.reply.stats.stop_reason != StopReason.STOPPED
    assert node_rows.get_node(db, after.node_id).status == Status.COMPLETE


def test_a_child_that_dies_mid_reply_ends_the_job_not_this_process(child, db):
    engine, heard, root = child

    def die(_piece: str) -> None:
        if len(heard.tokens) == 3:
            assert engine.pid is not None
            os.kill(engine.pid, signal.SIGKILL)

    heard.on_token = die
    result = engine.run(jobs.Send(root, "hi", LONGEST))
    assert isinstance(result, Failed) and result.engine_lost
    assert not result.for_dialog and result.lost_workers == ()
    assert "ended by SIGKILL" in result.error
    assert "Your messages and checkpoints are saved." in result.error
    # The message sent was stored before the reply began.
    messages = [n for n in node_rows.get_children(db, root) if n.role == "user"]
    assert [m.text for m in messages] == ["hi"]


def test_a_worker_that_does_not_answer_is_named():
    nobody = f"127.0.0.1:{free_port()}"
    assert unanswering([nobody]) == (nobody,)
    assert lost_message([nobody], -6) == (
        f"Worker {nobody} was lost (it stopped answering). Your messages and "
        "checkpoints are saved."
    )
    assert lost_message(["a:1", "b:2"], -6).startswith("Workers a:1 and b:2 were lost")


def test_stop_ends_a_child_stuck_on_a_frozen_worker(
    db, tiny_model, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(child_process, "STOP_GRACE_S", 0.5)
    address = f"127.0.0.1:{free_port()}"
    with running_worker(address) as (worker, _serving, _said):
        heard = Heard()
        engine = ChildEngine(db.path, (address,), heard.reports(), heard.stop)
        # The user stops a while after the worker froze: the child is stuck
        # on it by then, however fast it runs. (A Stop at the very moment of
        # the freeze could be seen between two tokens, before the child waits
        # for the worker, and end the reply as stopped.)
        user = threading.Timer(1.0, lambda: setattr(heard.stop, "value", 1))
        try:
            settings = BackendSettings(n_threads=1, workers=(address,))
            assert isinstance(
                engine.run(jobs.LoadModel(tiny_model, settings)), ModelLoaded
            )
            created = engine.run(jobs.NewConversation(None))
            assert isinstance(created, Created) and created.node_id is not None

            def freeze(_piece: str) -> None:
                if len(heard.tokens) == 3:
                    # Its connection stays open, and nothing answers on it:
                    # a machine gone from the network. Then the user stops.
                    os.kill(worker.pid, signal.SIGSTOP)
                    user.start()

            heard.on_token = freeze
            result = engine.run(jobs.Send(created.node_id, "hi", LONGEST))
        finally:
            user.cancel()
            engine.close()
            os.kill(worker.pid, signal.SIGCONT)
    assert isinstance(result, Failed) and result.engine_lost
    assert result.lost_workers == (address,)
    assert result.error.startswith(f"Worker {address} was lost")


def test_a_child_stuck_on_a_frozen_worker_is_lost_without_a_stop(
    db, tiny_model, monkeypatch: pytest.MonkeyPatch
):
    # The bound on one answer of a worker, short here; the child reads it
    # as it starts.
    monkeypatch.setenv(TIMEOUT_ENV, "2")
    monkeypatch.setattr(child_process, "STOP_GRACE_S", 0.5)
    address = f"127.0.0.1:{free_port()}"
    with running_worker(address) as (worker, _serving, _said):
        heard = Heard()
        engine = ChildEngine(db.path, (address,), heard.reports(), heard.stop)
        # Before the bound, nothing ended such a child but a Stop: this one
        # comes only if it hangs (the test then fails below).
        rescue = threading.Timer(HANG_S, lambda: setattr(heard.stop, "value", 1))
        try:
            settings = BackendSettings(n_threads=1, workers=(address,))
            assert isinstance(
                engine.run(jobs.LoadModel(tiny_model, settings)), ModelLoaded
            )
            created = engine.run(jobs.NewConversation(None))
            assert isinstance(created, Created) and created.node_id is not None

            def freeze(_piece: str) -> None:
                if len(heard.tokens) == 3:
                    # Its connection stays open and nothing answers on it,
                    # and nobody presses Stop.
                    os.kill(worker.pid, signal.SIGSTOP)

            heard.on_token = freeze
            rescue.start()
            result = engine.run(jobs.Send(created.node_id, "hi", LONGEST))
        finally:
            rescue.cancel()
            engine.close()
            os.kill(worker.pid, signal.SIGCONT)
    assert not heard.stop.value, "it took a Stop"
    assert isinstance(result, Failed) and result.engine_lost
    assert result.lost_workers == (address,)
    assert result.error.startswith(f"Worker {address} was lost")
    # The message sent is kept.
    children = node_rows.get_children(db, created.node_id)
    assert [m.text for m in children if m.role == "user"] == ["hi"]
