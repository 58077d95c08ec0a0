"""A first message longer than the model can read: said honestly, with both
numbers, and only the ways on that can work (issue 41), through the real
window and engine, and in the CLI's words."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QMessageBox

from app.backend.errors import context_size_for
from storage import conversation_rows
from tests.helpers.tiny_model import write_tiny_model
from tests.ui.conftest import wait_idle

# About 2,000 tokens on the tiny model's byte-level vocabulary.
LONG_MESSAGE = "word " * 400
SHOT = Path("/tmp/arbor-message-too-long.png")
SHOT_NO_RAISE = Path("/tmp/arbor-message-too-long-for-the-model.png")


@pytest.fixture(scope="module")
def short_trained_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, trained (its metadata says) for 1,024 tokens only."""
    return write_tiny_model(
        tmp_path_factory.mktemp("short") / "tiny-1k.gguf", context_length=1024
    )


class _Answer:
    """Clicks ``button`` in the too-long dialog as soon as it shows, after
    noting its texts and buttons."""

    def __init__(self, button: str, shot: Path | None = None) -> None:
        self.button, self.shot = button, shot
        self.text = self.informative = ""
        self.buttons: list[str] = []
        self.other_dialogs: list[str] = []
        self.timer = QTimer()
        self.timer.timeout.connect(self._poll)
        self.timer.start(20)

    def _poll(self) -> None:
        for widget in QApplication.topLevelWidgets():
            if not (isinstance(widget, QMessageBox) and widget.isVisible()):
                continue
            if widget.objectName() != "MessageTooLongDialog":
                self.other_dialogs.append(widget.objectName())
                continue
            self.timer.stop()
            self.text, self.informative = widget.text(), widget.informativeText()
            self.buttons = [b.text() for b in widget.buttons()]
            if self.shot is not None:
                widget.grab().save(str(self.shot))
            for button in widget.buttons():
                if button.text().startswith(self.button):
                    button.click()
                    return

    def wait(self, qtbot) -> None:
        qtbot.waitUntil(lambda: not self.timer.isActive(), timeout=10_000)


def _small_context(qtbot, window, n_ctx: int = 256) -> None:
    window.apply_preferences(
        replace(
            window.prefs,
            backend=replace(window.prefs.backend, n_ctx=n_ctx),
            sampling=replace(window.prefs.sampling, max_tokens=8),
        )
    )
    wait_idle(qtbot, window)


def _send(qtbot, window, text: str) -> None:
    window.composer.edit.setPlainText(text)
    window.send_action.trigger()
    wait_idle(qtbot, window)


def _needed(informative: str) -> int:
    found = re.search(r"needs about ([\d,]+) tokens", informative)
    assert found, informative
    return int(found.group(1).replace(",", ""))


def test_a_first_message_too_long_offers_a_raise_that_holds_it(qtbot, make_window):
    window = make_window()
    _small_context(qtbot, window)
    answer = _Answer("Raise to", shot=SHOT)
    _send(qtbot, window, LONG_MESSAGE)
    answer.wait(qtbot)

    needed = _needed(answer.informative)
    size = context_size_for(needed, 256, window.model_info.n_ctx_train)
    assert size is not None and size >= needed
    assert answer.text == "This message is longer than the context."
    assert "the context holds 256" in answer.informative
    assert "32,768" in answer.informative  # what the model reads
    assert "this conversation's alone" in answer.informative  # where it applies
    assert sorted(answer.buttons) == sorted(
        [f"Raise to {size:,} tokens", "Models…", "Shorten it"]
    )
    assert answer.other_dialogs == []  # not "this branch has filled..."
    # Nothing half-sent: the message is back in the composer.
    assert window.composer.text.strip() == LONG_MESSAGE.strip()
    assert [c.role for c in window.transcript.cards] == []

    wait_idle(qtbot, window)  # the model loads again with the larger context
    assert window.model_info.n_ctx == size
    assert window.prefs.backend.n_ctx == 256  # the others' size is the same
    stored = conversation_rows.get_conversation(window.db, window.conversation_id)
    assert stored.context_size == size
    # The raise was enough: the same message now goes, and is answered.
    window.send_action.trigger()
    wait_idle(qtbot, window)
    assert [c.role for c in window.transcript.cards] == ["user", "assistant"]
    assert window.transcript.cards[0].text.strip() == LONG_MESSAGE.strip()


def test_a_first_message_longer_than_the_model_reads_offers_no_raise(
    qtbot, make_window, short_trained_model
):
    window = make_window(model=short_trained_model)
    _small_context(qtbot, window)
    answer = _Answer("Shorten it", shot=SHOT_NO_RAISE)
    _send(qtbot, window, LONG_MESSAGE)
    answer.wait(qtbot)

    assert answer.text == "This message is longer than this model can read."
    assert _needed(answer.informative) > 1024
    assert "the context holds 256" in answer.informative
    assert "reads at most 1,024, whatever the context size" in answer.informative
    assert sorted(answer.buttons) == ["Models…", "Shorten it"]  # no raise, branch
    assert answer.other_dialogs == []
    wait_idle(qtbot, window)
    assert window.composer.text.strip() == LONG_MESSAGE.strip()
    assert [c.role for c in window.transcript.cards] == []
    assert window.prefs.backend.n_ctx == 256  # nothing raised


def test_a_longer_model_is_one_click_away(qtbot, make_window, short_trained_model):
    window = make_window(model=short_trained_model)
    _small_context(qtbot, window)
    answer = _Answer("Models…")
    _send(qtbot, window, LONG_MESSAGE)
    answer.wait(qtbot)
    qtbot.waitUntil(
        lambda: window._models_dialog is not None and window._models_dialog.isVisible()
    )
    window._models_dialog.close()
