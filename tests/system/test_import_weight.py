"""Naming a value type never loads libllama: the CLI and the window import
without llama_cpp (and the CLI without Qt); the engine loads it when a model is
asked for."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

REPORT = "import sys, {module}; print(sorted(m for m in {watched} if m in sys.modules))"


def _loaded_after_import(module: str, watched: tuple[str, ...]) -> list[str]:
    # A fresh interpreter: this test process has long imported everything.
    result = subprocess.run(
        [sys.executable, "-c", REPORT.format(module=module, watched=watched)],
        capture_output=True,
        text=True,
        check=True,
    )
    return ast.literal_eval(result.stdout)


@pytest.mark.parametrize(
    ("module", "absent"),
    [
        ("app.cli.commands", ("llama_cpp", "numpy", "PySide6", "sqlalchemy", "jinja2")),
        ("app.qt.views.chrome.main_window", ("llama_cpp", "numpy")),
        ("app.qt.gui", ("llama_cpp", "numpy")),
        ("app.preferences", ("llama_cpp", "numpy", "PySide6")),
        # The Qt-free window logic really is: its package imports no Qt on
        # the way in (a file-level rule cannot see an __init__ doing it).
        ("app.window.presenter", ("llama_cpp", "numpy", "PySide6")),
        # The jobs cross to the child process, which starts without Qt.
        ("app.jobs", ("llama_cpp", "numpy", "PySide6")),
        ("app.jobs.results", ("llama_cpp", "numpy", "PySide6")),
        ("app.window.actions", ("llama_cpp", "numpy", "PySide6")),
        ("app.conversation.tree_snapshot", ("llama_cpp", "numpy", "PySide6")),
        ("app.conversation.results", ("llama_cpp", "numpy", "PySide6")),
        # What the engine's child process starts from (issue 25).
        ("app.runner.child_process", ("llama_cpp", "PySide6")),
    ],
)
def test_importing_does_not_load_the_native_library(module, absent):
    assert _loaded_after_import(module, absent) == []


@pytest.mark.parametrize(
    "module",
    [
        "app.backend.values",
        "app.backend.settings",
        "app.backend.offload",
        "app.backend.errors",
    ],
)
def test_the_values_the_window_names_load_no_native_code(module):
    # The window may import these (tests/system/test_layering.py BACKEND_VALUES).
    assert _loaded_after_import(module, ("llama_cpp", "numpy", "PySide6")) == []


def test_the_engine_still_loads_it():
    assert _loaded_after_import("app.backend.engine", ("llama_cpp",)) == ["llama_cpp"]


# Runs the real window start (run_gui) on the tiny model and notes, for each
# first import of llama_cpp, whether the GUI thread made it; closes the window
# once the engine thread has asked llama.cpp for a GPU.
WINDOW_START = """
import sys, threading
from pathlib import Path

on_gui_thread = []


class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "llama_cpp":
            on_gui_thread.append(threading.current_thread() is threading.main_thread())
        return None


sys.meta_path.insert(0, Watch())
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.qt import gui
from app.qt.views.chrome.main_window import MainWindow

qt_app = QApplication([])


def close_once_asked():
    for window in qt_app.topLevelWidgets():
        if isinstance(window, MainWindow) and window.engine.gpu_supported is not None:
            gpu = window.engine.gpu_supported
            print("shown first:", window.isVisible(), "gpu:", gpu)
            window.close()
            return
    QTimer.singleShot(20, close_once_asked)


QTimer.singleShot(0, close_once_asked)
QTimer.singleShot(60_000, qt_app.quit)
status = gui.run_gui(Path(sys.argv[1]), Path(sys.argv[2]))
print("imports on the GUI thread:", on_gui_thread)
sys.exit(status)
"""


def test_the_window_starts_without_loading_libllama_on_its_thread(tmp_path, tiny_model):
    result = subprocess.run(
        [sys.executable, "-c", WINDOW_START, str(tmp_path / "data"), str(tiny_model)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert result.returncode == 0, result.stderr
    assert "shown first: True gpu: False" in result.stdout
    # Loaded once, by the engine thread.
    assert "imports on the GUI thread: [False]" in result.stdout
