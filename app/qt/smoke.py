"""A window that answers one message by itself, for checking a frozen bundle.

A bundled app has no test hooks to reach, so the bundle test starts it with
``ARBOR_SMOKE_MESSAGE`` set: once the model is ready the window sends that
message as if typed, prints ``{"reply": text}`` (or ``{"error": message}``)
as one JSON line, and closes. Nothing here runs unless the variable is set.
"""

from __future__ import annotations

import json

from PySide6.QtCore import QTimer

from app.jobs import Generating
from app.jobs.results import Failed, JobResult, Replied
from app.qt.views.chrome.main_window import MainWindow

ENV_VAR = "ARBOR_SMOKE_MESSAGE"


def run_smoke_test(window: MainWindow, text: str, timeout_ms: int = 120_000) -> None:
    """Send ``text`` once the model is loaded, print the outcome, close."""
    sent = False

    def finish(outcome: dict[str, str | None]) -> None:
        print(json.dumps(outcome), flush=True)
        window.close()

    def send_when_ready() -> None:
        nonlocal sent
        idle = not (window.engine.busy or window.generating)
        if sent or not idle or window.model_info is None or window.active_id is None:
            return
        sent = True
        poller.stop()
        window.composer.edit.setPlainText(text)
        window.actions_by_name["send"].trigger()

    def on_finished(result: JobResult) -> None:
        if sent and isinstance(result.job, Generating):
            if isinstance(result, Replied):
                finish({"reply": result.reply.text})
            elif isinstance(result, Failed):
                finish({"error": result.error or "no reply"})

    window.engine.finished.connect(on_finished)
    poller = QTimer(window)
    poller.timeout.connect(send_when_ready)
    poller.start(100)
    QTimer.singleShot(timeout_ms, lambda: finish({"error": "timed out"}))
