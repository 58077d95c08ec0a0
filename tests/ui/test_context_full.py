"""A full context is a fork in the road: branch, raise the context, or continue
from a summary, through the real window and engine."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QMessageBox

from app.qt.views.dialogs.context_full import raised_context_size
from app.qt.views.dialogs.conversation_settings import ConversationSettingsDialog
from app.window.presenter import WayOn
from storage import conversation_rows, node_rows
from tests.ui.conftest import wait_idle

LONG_MESSAGE = "word " * 400


def _answer_when_asked(button_text: str, seen: list[str]) -> QTimer:
    """Click ``button_text`` in the context-full dialog as soon as it shows."""

    def poll() -> None:
        for widget in QApplication.topLevelWidgets():
            if isinstance(widget, QMessageBox) and widget.isVisible():
                if widget.objectName() != "ContextFullDialog":
                    continue
                seen.append(widget.informativeText())
                for button in widget.buttons():
                    if button.text().startswith(button_text):
                        timer.stop()
                        button.click()
                        return

    timer = QTimer()
    timer.timeout.connect(poll)
    timer.start(20)
    return timer


def _small_context(qtbot, window, n_ctx: int = 256, max_tokens: int = 64) -> None:
    window.apply_preferences(
        replace(
            window.prefs,
            backend=replace(window.prefs.backend, n_ctx=n_ctx),
            sampling=replace(window.prefs.sampling, max_tokens=max_tokens),
        )
    )
    wait_idle(qtbot, window)


def _send_text(qtbot, window, text: str) -> None:
    window.composer.edit.setPlainText(text)
    window.send_action.trigger()
    wait_idle(qtbot, window)


def _send_and_answer(qtbot, window, text: str, button_text: str) -> list[str]:
    """Send ``text`` and click ``button_text`` in the context-full dialog that
    follows; returns the dialog's texts. The dialog opens without blocking,
    once the job is over, so this waits for the click, not for an idle engine."""
    seen: list[str] = []
    timer = _answer_when_asked(button_text, seen)
    _send_text(qtbot, window, text)
    qtbot.waitUntil(lambda: not timer.isActive(), timeout=10_000)
    return seen


def test_sizes_offered():
    assert raised_context_size(256, 32768) == 512
    assert raised_context_size(4096, 6000) == 6000
    assert raised_context_size(8192, 8192) is None
    # With what a message needs: a size that holds it and a reply, or none.
    assert raised_context_size(4096, 32768, needed=8819) == 10240
    assert raised_context_size(4096, 8192, needed=8819) is None
    assert raised_context_size(4096, 9000, needed=8819) == 9000


def test_a_message_too_long_offers_a_larger_context(qtbot, make_window):
    window = make_window()
    _small_context(qtbot, window)
    _send_text(qtbot, window, "hi")  # an earlier message: a branch to fill
    seen = _send_and_answer(qtbot, window, LONG_MESSAGE, "Raise to")

    assert seen and "this conversation's alone" in seen[0]
    assert window.composer.text.strip() == LONG_MESSAGE.strip()  # given back
    assert [c.role for c in window.transcript.cards] == ["user", "assistant"]
    wait_idle(qtbot, window)  # the model reloads with the larger context
    raised = window.model_info.n_ctx
    # Large enough for the message this time, not merely double; for this
    # conversation alone: the Settings keep their size.
    assert raised > 512
    assert window.prefs.backend.n_ctx == 256
    long_one = window.conversation_id
    assert conversation_rows.get_conversation(window.db, long_one).context_size == (
        raised
    )
    window.send_action.trigger()
    wait_idle(qtbot, window)
    assert [c.role for c in window.transcript.cards] == ["user", "assistant"] * 2

    # Another conversation has the Settings' size, and back here the raised one.
    window.presenter.new_conversation()
    wait_idle(qtbot, window)
    assert window.model_info.n_ctx == 256
    window.presenter.select_conversation(long_one)
    wait_idle(qtbot, window)
    assert window.model_info.n_ctx == raised
    assert "Resumed" in window.status.restore_label.text()
    window.close()

    # After a restart, the conversation shown loads with its own size at once.
    again = make_window()
    wait_idle(qtbot, again)
    assert again.conversation_id == long_one
    assert again.model_info.n_ctx == raised


def test_a_cut_off_reply_can_continue_from_a_summary(qtbot, make_window):
    window = make_window()
    _small_context(qtbot, window, max_tokens=400)  # the tiny model talks on
    first = window.conversation_id
    seen: list[str] = []
    timer = _answer_when_asked("Continue from a summary", seen)
    _send_text(qtbot, window, "hi")
    wait_idle(qtbot, window)
    qtbot.waitUntil(lambda: window.conversation_id != first, timeout=30_000)
    timer.stop()

    cut = node_rows.get_path(
        window.db, conversation_rows.get_conversation(window.db, first).active_node_id
    )[-1]
    assert cut.status == "truncated" and seen
    new = conversation_rows.get_conversation(window.db, window.conversation_id)
    assert new.title.endswith("(continued)")
    assert "Summary of an earlier conversation:" in (new.system_prompt or "")
    summary = new.system_prompt.split("Summary of an earlier conversation:")[1]
    assert summary.strip()
    assert window.transcript.cards[0].role == "root"  # the summary is shown


def test_branching_from_earlier_focuses_the_tree(qtbot, make_window):
    window = make_window()
    _small_context(qtbot, window)
    _send_text(qtbot, window, "hi")
    _send_and_answer(qtbot, window, LONG_MESSAGE, "Branch from earlier")
    assert window.tree_panel.isVisible()
    assert "branch" in window.status.currentMessage().lower()


def test_the_conversation_settings_give_a_raised_size_back(qtbot, make_window):
    window = make_window()
    _small_context(qtbot, window)
    _send_text(qtbot, window, "hi")
    shown = window.conversation_id
    window.presenter.way_on_chosen(WayOn.RAISE, 1024)
    wait_idle(qtbot, window)
    assert window.model_info.n_ctx == 1024

    def untick_and_accept() -> None:
        dialog = window.findChild(ConversationSettingsDialog)
        assert dialog is not None and dialog.own_context_box.isVisible()
        assert "1,024 tokens" in dialog.own_context_box.text()
        dialog.own_context_box.setChecked(False)
        ok = QDialogButtonBox.StandardButton.Ok
        dialog.findChild(QDialogButtonBox).button(ok).click()

    QTimer.singleShot(200, untick_and_accept)
    window.ask_conversation_settings()
    wait_idle(qtbot, window)
    assert window.model_info.n_ctx == 256
    assert conversation_rows.get_conversation(window.db, shown).context_size is None
