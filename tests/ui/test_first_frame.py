"""A start paints the window before anything that can wait (issue 41).

A shown window is black until its first frame is painted (X11 and Wayland
map it with no background). A restart showed it black for 0.4-0.8 s on an
idle machine and over a second beside two busy programs: between ``show()``
and the event loop, ``run_gui`` imported the local server (aiohttp, and the
certificates its import loads) to find that it was not asked for, and built
the last run's crash report. The first frame then offered models to download
while the conversation was right there, its model loading.

These tests check the order of things, not times (machines are noisy); the
longest GUI-thread gap before the first frame is printed, as
``tools/first_frame.py`` measures it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QWidget

from app.qt.gui import after_first_frame
from tests.ui.conftest import wait_idle
from tools.window_timing import insert_path

ROOT = Path(__file__).resolve().parents[2]


class _Paints(QObject):
    """Counts the paint events a widget receives."""

    def __init__(self, widget: QWidget) -> None:
        super().__init__(widget)
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.count += 1
        return False


def test_work_after_the_first_frame_runs_once_it_is_painted(qtbot):
    widget = QWidget()
    qtbot.addWidget(widget)
    paints = _Paints(widget)
    painted_when_run: list[int] = []
    widget.show()
    after_first_frame(widget, lambda: painted_when_run.append(paints.count))
    assert painted_when_run == []  # not before the event loop has painted
    qtbot.waitUntil(lambda: painted_when_run != [], timeout=5000)
    assert painted_when_run[0] >= 1
    widget.update()
    qtbot.waitUntil(lambda: paints.count >= 2, timeout=5000)
    assert len(painted_when_run) == 1  # once, not on every paint


def test_work_after_the_first_frame_runs_even_if_none_comes(qtbot):
    widget = QWidget()  # never shown: no frame
    qtbot.addWidget(widget)
    ran: list[bool] = []
    after_first_frame(widget, lambda: ran.append(True), wait_ms=50)
    qtbot.waitUntil(lambda: ran == [True], timeout=5000)


def test_a_restart_shows_the_conversation_while_its_model_loads(qtbot, make_window):
    db = make_window.open_db()
    insert_path(db, 12)
    db.close()
    window = make_window(wait=False)
    assert window.presenter.loading_model is not None  # still loading
    assert window.center.currentWidget() is window.chat_page
    assert "Loading" in window.composer.edit.placeholderText()
    wait_idle(qtbot, window)
    assert window.model_info is not None
    assert window.center.currentWidget() is window.chat_page


# The real start (run_gui) on a data folder with a conversation and the last
# run's crash report, offscreen; notes the state of things at the window's
# first paint and when run_gui's deferred work runs, then closes the window
# once the model is loaded.
WINDOW_START = """
import json, sys, time
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication

from app.qt import gui
from app.qt.views.chrome.main_window import MainWindow

qt_app = QApplication([])
seen = {}
gaps = {"longest": 0.0}
last = [time.perf_counter()]


def tick():
    now = time.perf_counter()
    if "shown" in seen and "first paint" not in seen:
        gaps["longest"] = max(gaps["longest"], (now - last[0]) * 1000)
    last[0] = now


probe = QTimer()
probe.setTimerType(Qt.TimerType.PreciseTimer)
probe.timeout.connect(tick)
probe.start(10)


class FirstPaint(QObject):
    def eventFilter(self, watched, event):
        if (
            isinstance(watched, MainWindow)
            and event.type() == QEvent.Type.Paint
            and "first paint" not in seen
        ):
            seen["first paint"] = {
                "page": watched.center.currentWidget().objectName()
                or type(watched.center.currentWidget()).__name__,
                "chat": watched.center.currentWidget() is watched.chat_page,
                "server imported": "app.server.serve" in sys.modules,
            }
        return False


first_paint = FirstPaint()
qt_app.installEventFilter(first_paint)
start_server = MainWindow.start_local_server_if_asked


def start_local_server_if_asked(self):
    seen["server asked after paint"] = "first paint" in seen
    start_server(self)


MainWindow.start_local_server_if_asked = start_local_server_if_asked
crash_dialog = gui.CrashDialog


def crash_dialog_made(*args):
    seen["crash report after paint"] = "first paint" in seen
    return crash_dialog(*args)


gui.CrashDialog = crash_dialog_made
show = MainWindow.show


def shown(self):
    show(self)
    seen["shown"] = True
    last[0] = time.perf_counter()


MainWindow.show = shown


def close_once_loaded():
    for window in qt_app.topLevelWidgets():
        if (
            isinstance(window, MainWindow)
            and window.model_info is not None
            and "first paint" in seen
        ):
            window.close()
            qt_app.quit()  # the crash report's window too
            return
    QTimer.singleShot(20, close_once_loaded)


QTimer.singleShot(0, close_once_loaded)
QTimer.singleShot(60_000, qt_app.quit)
status = gui.run_gui(Path(sys.argv[1]), Path(sys.argv[2]))
print("seen:", json.dumps(seen))
print("server imported at the end:", "app.server.serve" in sys.modules)
print(f"longest GUI-thread gap before the first frame: {gaps['longest']:.0f} ms")
sys.exit(status)
"""


def test_a_restart_paints_the_conversation_before_the_rest_of_the_start(
    tmp_path, tiny_model
):
    from app.platform.paths import database_path
    from storage.db import open_database

    data = tmp_path / "data"
    data.mkdir()
    db = open_database(database_path(data))
    insert_path(db, 12)
    db.close()
    (data / "crash.log").write_text("Fatal Python error: a test\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-c", WINDOW_START, str(data), str(tiny_model)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    print(result.stdout)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.split("seen:", 1)[1].splitlines()[0])
    first = seen["first paint"]
    # The first frame is the conversation (its model loading), not the page
    # that offers models to a first start.
    assert first["chat"], first
    # Nothing that can wait ran before it: the local server was not asked
    # for, so its modules were never imported; the crash report came after.
    assert not first["server imported"]
    assert seen["server asked after paint"] is True
    assert seen["crash report after paint"] is True
    assert "server imported at the end: False" in result.stdout
