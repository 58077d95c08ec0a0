"""Render the main window with a branched conversation to a PNG.

Drives the real app (engine thread, SQLite in a temporary folder) like a user:
two questions, a regenerated reply, and a branch from the first answer, then
grabs the window. By default it uses the starter model, so the text is real::

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/screenshot.py
    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/screenshot.py --dark \
        --out docs/screenshot-dark.png
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PySide6.QtCore import QEventLoop, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.backend.sampling import SamplingParams  # noqa: E402
from app.platform.paths import database_path  # noqa: E402
from app.platform.starter_model import starter_model_path  # noqa: E402
from app.preferences import load_preferences, save_preferences  # noqa: E402
from app.qt.gui import build_window  # noqa: E402
from app.qt.views.chrome.main_window import MainWindow  # noqa: E402
from app.qt.views.theme import ThemeManager  # noqa: E402
from storage.db import open_database  # noqa: E402

SYSTEM_PROMPT = "You are a concise, friendly assistant."


def wait_until(condition: Callable[[], bool], timeout_s: float = 300) -> None:
    """Run the event loop until ``condition()`` holds (polling every 20 ms)."""
    deadline = time.monotonic() + timeout_s
    loop = QEventLoop()
    timer = QTimer()
    timer.setInterval(20)
    timer.timeout.connect(
        lambda: loop.quit() if condition() or time.monotonic() > deadline else None
    )
    timer.start()
    if not condition():
        loop.exec()
    timer.stop()
    if not condition():
        raise TimeoutError("the window did not get there in time")


def settle(milliseconds: int = 500) -> None:
    """Let pending layout passes run (message heights follow their text)."""
    loop = QEventLoop()
    QTimer.singleShot(milliseconds, loop.quit)
    loop.exec()


def idle(window: MainWindow) -> bool:
    """Whether the engine has nothing queued or running."""
    return not window.engine.busy and not window.generating


def send(window: MainWindow, text: str) -> None:
    """Type a message and send it, as a user would."""
    window.composer.edit.setPlainText(text)
    window.send_action.trigger()
    wait_until(lambda: idle(window))


def build_conversation(window: MainWindow) -> None:
    """Two questions, a regenerated answer, and a branch from the first answer."""
    send(window, "What is a binary tree? Answer in two sentences.")
    first_answer = window.active_id
    send(window, "Show a tiny Python example of one.")
    window.transcript.cards[-1].regenerate_button.click()
    wait_until(lambda: idle(window))
    window.activate(first_answer)  # "Branch from here" on the first answer
    wait_until(lambda: idle(window))
    send(window, "How is it different from a linked list?")


def main(argv: list[str] | None = None) -> int:
    """Render the screenshot; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", type=Path, help="GGUF model (default: the starter model)"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshot.png")
    parser.add_argument("--dark", action="store_true", help="use the dark palette")
    parser.add_argument("--max-tokens", type=int, default=90)
    args = parser.parse_args(argv)
    model = args.model or starter_model_path()
    if model is None:
        parser.error("no --model given and the starter model is not installed")

    app = QApplication.instance() or QApplication([])
    ThemeManager(app, Qt.ColorScheme.Dark if args.dark else Qt.ColorScheme.Light)
    with tempfile.TemporaryDirectory() as folder:
        db = open_database(database_path(Path(folder)))
        prefs = load_preferences(db)
        save_preferences(
            db,
            replace(
                prefs,
                system_prompt=SYSTEM_PROMPT,
                backend=replace(prefs.backend, n_ctx=2048, n_threads=1),
                # No fixed seed: a regenerated reply should differ from the first.
                sampling=SamplingParams(temperature=0.7, max_tokens=args.max_tokens),
            ),
        )
        window = build_window(db, model, gpu_supported=False)
        window.resize(1360, 860)
        window.show()
        wait_until(lambda: window.model_info is not None and idle(window))
        build_conversation(window)
        window.rename_conversation(window.conversation_id, "Binary trees")
        settle()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        if not window.grab().save(str(args.out)):
            print(f"could not write {args.out}", file=sys.stderr)
            return 1
        window.close()
        db.close()
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
