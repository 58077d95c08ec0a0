"""Naming a value type never loads libllama: the CLI and the window import
without llama_cpp (and the CLI without Qt); the engine loads it when a model is
asked for."""

from __future__ import annotations

import ast
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
        ("app.cli", ("llama_cpp", "numpy", "PySide6", "sqlalchemy", "jinja2")),
        ("app.qt.views.main_window", ("llama_cpp", "numpy")),
        ("app.qt.gui", ("llama_cpp", "numpy")),
        ("app.preferences", ("llama_cpp", "numpy", "PySide6")),
        # The Qt-free window logic really is: its package imports no Qt on
        # the way in (a file-level rule cannot see an __init__ doing it).
        ("app.window.presenter", ("llama_cpp", "numpy", "PySide6")),
        ("app.window.jobs", ("llama_cpp", "numpy", "PySide6")),
        ("app.window.actions", ("llama_cpp", "numpy", "PySide6")),
        ("app.conversation.tree_snapshot", ("llama_cpp", "numpy", "PySide6")),
        ("app.conversation.results", ("llama_cpp", "numpy", "PySide6")),
    ],
)
def test_importing_does_not_load_the_native_library(module, absent):
    assert _loaded_after_import(module, absent) == []


def test_the_engine_still_loads_it():
    assert _loaded_after_import("app.backend.engine", ("llama_cpp",)) == ["llama_cpp"]
