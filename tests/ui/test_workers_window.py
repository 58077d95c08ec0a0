"""A model on two workers in the window (issue 25): its jobs run in the
engine's child process, and a worker killed mid-reply ends that process, not
the window, which names the lost worker and goes on, here, on the user's
word, with every earlier message.

Real parts: two ``arbor worker`` processes on 127.0.0.1, the window's engine
thread and its spawned child on the tiny model, the test's database.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QPushButton

from app import jobs
from app.backend.settings import AUTO_GPU_LAYERS
from app.jobs.results import Failed, JobResult, ModelLoaded
from app.preferences import load_preferences, save_preferences
from app.qt.views.dialogs.gpu_layers import (
    NO_GPU_EXPLANATION,
    ON_WORKERS,
    GpuLayersField,
)
from app.runner.host import NOT_ON_WORKERS
from storage import node_rows
from tests.helpers.workers import free_ports, running_worker
from tests.ui.conftest import WAIT_MS, send, wait_idle


@pytest.fixture
def workers() -> Iterator[list]:
    """Two running workers: (process, address) each."""
    first, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    with running_worker(first) as one, running_worker(second) as two:
        yield [(one[0], first), (two[0], second)]


def _engine_children() -> list[str]:
    return [p.name for p in multiprocessing.active_children() if p.is_alive()]


def _window_on(make_window, addresses: tuple[str, ...]):
    db = make_window.open_db()
    prefs = load_preferences(db)
    save_preferences(
        db, replace(prefs, backend=replace(prefs.backend, workers=addresses))
    )
    db.close()
    return make_window()


def test_a_worker_lost_mid_reply_leaves_the_window_and_the_conversation(
    qtbot, make_window, workers
):
    (_, first), (second_process, second) = workers
    window = _window_on(make_window, (first, second))
    info = window.model_info
    assert info is not None, "the model did not load on the workers"
    assert _engine_children() == ["arbor-engine"]
    # Where the model runs, as the window says it: on the workers, not a GPU
    # and not "this computer".
    assert info.workers == (first, second)
    layers = f"2 workers: all {info.offloadable_layers} layers"
    assert window.status.layers_label.text() == layers
    subtitle = window.transcript.empty_state.subtitle.text()
    assert f"running on workers {first}, {second}." in subtitle
    # Settings' GPU field, with no GPU here, says where the layers are.
    field = GpuLayersField(AUTO_GPU_LAYERS, 4096, info, gpu_supported=False)
    assert field.toolTip() == ON_WORKERS + NO_GPU_EXPLANATION
    results: list[JobResult] = []
    window.engine.finished.connect(results.append)

    # A reply through the child process.
    send(qtbot, window, "Tell me about trees.")
    answered = node_rows.get_path(window.db, window.active_id)
    assert [n.role for n in answered] == ["root", "user", "assistant"]
    assert answered[2].text and window.transcript.cards[1].text == answered[2].text
    before = set(window.presenter.snapshot.nodes)

    # The local server's requests cannot cross to the child: its client hears why.
    future: Future = Future()
    window.engine.submit(jobs.ServeRequest(lambda _service: None, future))
    wait_idle(qtbot, window)
    with pytest.raises(Exception, match="placed on workers") as refused:
        future.result(timeout=0)
    assert str(refused.value) == NOT_ON_WORKERS

    # A worker dies while the next reply streams.
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=400)
    )

    def kill_second(_piece: str) -> None:
        second_process.kill()  # SIGKILL

    window.engine.token_received.connect(kill_second)
    send(qtbot, window, "hi")
    window.engine.token_received.disconnect(kill_second)

    lost = results[-1]
    assert isinstance(lost, Failed) and lost.engine_lost
    assert lost.lost_workers == (second,)
    assert lost.error == (
        f"Worker {second} was lost (it stopped answering). Your messages and "
        "checkpoints are saved."
    )
    assert window.isVisible() and window.model_info is None
    assert window.status.model_label.text() == "No model loaded"
    assert window.status.layers_label.text() == ""
    assert _engine_children() == []
    box = window.findChild(QMessageBox, "EngineLostDialog")
    assert box is not None and box.isVisible()
    assert box.text() == lost.error
    assert first in box.informativeText()
    assert box.findChild(QPushButton, "LoadOnRemainingWorkers") is not None
    takes, says = window.presenter.composer_state()
    assert not takes and "worker was lost" in says
    # The message sent is kept (so it is not given back to send again).
    kept = node_rows.get_children(window.db, answered[2].id)
    assert [n.text for n in kept if n.role == "user"] == ["hi"]
    assert window.composer.text == ""

    # On this computer alone: loaded here, and the conversation goes on.
    qtbot.mouseClick(box.findChild(QPushButton, "LoadHere"), Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=WAIT_MS)
    wait_idle(qtbot, window)
    assert _engine_children() == []
    assert window.presenter.model.after_loss is None
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=12)
    )
    # The window manager gives the window back its focus once the dialog
    # is gone (offscreen has none: done here).
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=WAIT_MS)
    send(qtbot, window, "And rivers?")
    replied = results[-1]
    assert not isinstance(replied, Failed), replied
    path = node_rows.get_path(window.db, window.active_id)
    assert [n.text for n in path[:3]] == [n.text for n in answered]
    assert path[-1].role == "assistant" and path[-1].text
    assert before <= set(window.presenter.snapshot.nodes)


def test_a_worker_lost_between_replies_and_the_model_loaded_on_the_other(
    qtbot, make_window, workers
):
    (_, first), (second_process, second) = workers
    window = _window_on(make_window, (first, second))
    results: list[JobResult] = []
    window.engine.finished.connect(results.append)
    send(qtbot, window, "Tell me about trees.")
    answered = node_rows.get_path(window.db, window.active_id)

    # Gone while the user reads: the next reply finds out.
    second_process.kill()
    second_process.wait()
    send(qtbot, window, "Why?")
    lost = results[-1]
    assert isinstance(lost, Failed) and lost.engine_lost
    assert lost.lost_workers == (second,)
    box = window.findChild(QMessageBox, "EngineLostDialog")
    assert box is not None and second in box.text() and first in box.informativeText()

    # On the worker that still answers: a new engine process, and on we go.
    qtbot.mouseClick(
        box.findChild(QPushButton, "LoadOnRemainingWorkers"), Qt.MouseButton.LeftButton
    )
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=WAIT_MS)
    wait_idle(qtbot, window)
    assert _engine_children() == ["arbor-engine"]
    loads = [r for r in results if isinstance(r, ModelLoaded)]
    assert loads[-1].job.settings.workers == (first,)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=WAIT_MS)
    assert window.composer.text == ""  # "Why?" is in the tree
    send(qtbot, window, "And rivers?")
    assert not isinstance(results[-1], Failed), results[-1]
    path = node_rows.get_path(window.db, window.active_id)
    assert [n.text for n in path[:3]] == [n.text for n in answered]
    assert path[-1].role == "assistant"
