"""Fixtures for the window tests: real engine thread, real SQLite, real widgets.

Every test gets its own data folder; windows are built by ``build_window``
(the composition root minus the event loop) on the tiny generated model.
Tests fail on Qt warnings and on QThreads left running.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QObject, Qt, QThread, Slot

from app.backend.values import SamplingParams
from app.platform.paths import database_path
from app.preferences import load_preferences, save_preferences
from app.qt.gui import build_window
from app.qt.views.chrome.main_window import MainWindow
from storage.db import Database, open_database

UI_DIR = Path(__file__).resolve().parent

# Greedy and short: deterministic replies that keep the suite fast. One thread:
# llama.cpp's worker threads spin-wait, which is very slow on a busy 2-core box.
TEST_SAMPLING = SamplingParams(temperature=0, max_tokens=48)

# How long any single wait may take on a loaded machine before a test fails.
WAIT_MS = 30_000


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Fail the window tests on Qt warnings (the offscreen platform's own excepted)."""
    for item in items:
        if UI_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
            # The offscreen platform's own notes, and fonts lacking a script the
            # tiny model's random bytes happen to use.
            item.add_marker(
                pytest.mark.qt_log_ignore(
                    "propagateSizeHints",
                    "does not support raise",
                    "OpenType support missing",
                )
            )


@pytest.fixture(autouse=True)
def _app_style_restored(qapp) -> Iterator[None]:
    """Put the application's style, style sheet, font and palette back after a test:
    a test that runs the real start-up (the theme) would leave them to the
    tests after it, whose sizes then depend on the order they run in."""
    sheet, font, palette = qapp.styleSheet(), qapp.font(), qapp.palette()
    style = qapp.style().name()
    yield
    if qapp.style().name() != style:
        qapp.setStyle(style)
    qapp.setStyleSheet(sheet)
    qapp.setFont(font)
    qapp.setPalette(palette)


@pytest.fixture(autouse=True)
def _no_dangling_qthreads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail a test that leaves a QThread running."""
    started: list[QThread] = []
    original = QThread.start

    def start(self: QThread, *args: object) -> None:
        started.append(self)
        original(self, *args)

    monkeypatch.setattr(QThread, "start", start)
    yield
    running = [t.objectName() or repr(t) for t in started if t.isRunning()]
    assert running == [], f"QThreads still running after the test: {running}"


class WindowFactory:
    """Builds windows on the test's data folder and closes them afterwards."""

    def __init__(self, qtbot, data_dir: Path, tiny_model: Path) -> None:
        self._qtbot = qtbot
        self.data_dir = data_dir
        self.tiny_model = tiny_model
        self._opened: list[tuple[MainWindow, Database]] = []

    def open_db(self) -> Database:
        """Open the test's database (with the test preferences on first use)."""
        db = open_database(database_path(self.data_dir))
        prefs = load_preferences(db)
        if prefs.backend.n_threads != 1:
            save_preferences(
                db,
                replace(
                    prefs,
                    backend=replace(prefs.backend, n_threads=1),
                    sampling=TEST_SAMPLING,
                ),
            )
        return db

    def __call__(
        self,
        model: Path | bool | None = True,
        wait: bool = True,
        hub_endpoint: str | None = None,
    ) -> MainWindow:
        """A shown window on the tiny model (``model=True``), a given one, or None:
        the remembered or starter model; ``hub_endpoint`` is a test Hub's."""
        db = self.open_db()
        window = build_window(
            db,
            self.tiny_model if model is True else model or None,
            gpu_supported=False,
            hub_endpoint=hub_endpoint,
        )
        self._qtbot.addWidget(window)
        window.show()
        self._opened.append((window, db))
        if wait:
            wait_idle(self._qtbot, window)
        return window

    def close_all(self) -> None:
        for window, db in self._opened:
            window.close()
            db.close()
        # Collect the closed windows' cycles here, on the GUI thread. Left to
        # chance, the collection can fall on the next test's engine thread,
        # where PySide6 disconnects a dead receiver's connection holding one
        # of Qt's connection mutexes and then waits for the GIL, while the GUI
        # thread holds the GIL and waits for that mutex: a hang (seen in
        # test_models_dialog, gdb: QObject::disconnect from handle_weakrefs).
        gc.collect()


@pytest.fixture
def make_window(qtbot, data_dir: Path, tiny_model: Path) -> Iterator[WindowFactory]:
    """Build a window through the real stack; threads are stopped at teardown."""
    factory = WindowFactory(qtbot, data_dir, tiny_model)
    yield factory
    factory.close_all()


def wait_idle(qtbot, window: MainWindow) -> None:
    """Wait until no job is queued or running (model loaded, reply done)."""
    qtbot.waitUntil(
        lambda: not window.engine.busy and not window.generating, timeout=WAIT_MS
    )


def send(qtbot, window: MainWindow, text: str) -> None:
    """Type ``text`` in the composer, press Ctrl+Enter, wait for the reply."""
    from PySide6.QtCore import Qt

    window.composer.edit.setFocus()
    qtbot.keyClicks(window.composer.edit, text)
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )
    assert window.generating or window.engine.busy, "Ctrl+Enter did not send"
    wait_idle(qtbot, window)


class _TokenDelay(QObject):
    """Sleeps a while on every streamed piece, on the engine thread.

    A QObject of that thread with a declared slot, rather than a plain Python
    function: PySide6 calls a plain callable connected to a signal of another
    thread through a receiver made for it on the fly, a path with known
    cross-thread crashes (PYSIDE-3124); a slot of an object of the emitting
    thread is a plain direct call.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    @Slot(str)
    def wait(self, _piece: str) -> None:
        time.sleep(self.seconds)


def slow_down_generation(
    window: MainWindow, seconds_per_token: float
) -> Callable[[], None]:
    """Make each streamed token take a while, as with a big model on a slow CPU.

    Both the answer's and the reasoning's tokens are slowed. The delay runs on
    the engine thread, so the GUI thread stays free. Returns a function that
    undoes it.
    """
    worker = window.engine.worker
    delay = _TokenDelay(seconds_per_token)
    delay.moveToThread(worker.thread())
    # Kept alive as long as the window: a connection does not keep it.
    window.test_token_delays = [*getattr(window, "test_token_delays", []), delay]
    signals = (worker.token_received, worker.thinking_received)
    for signal in signals:
        signal.connect(delay.wait, Qt.ConnectionType.DirectConnection)

    def undo() -> None:
        for signal in signals:
            signal.disconnect(delay.wait)

    return undo
