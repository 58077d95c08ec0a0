"""The window says what is true now and does what the user typed (issue 22).

Each test is a thing a user met: text typed on a message of theirs, Stop
while a long prompt is read, a conversation too long for the loaded context,
the composer after a model reload.
"""

from __future__ import annotations

import time
from dataclasses import replace

from PySide6.QtCore import QObject, Qt, QTimer, Slot
from PySide6.QtWidgets import QApplication, QMessageBox

from app import jobs
from app.jobs.results import Failed
from storage import conversation_rows, node_rows
from tests.ui.conftest import WAIT_MS, send, wait_idle


def _ctrl_enter(qtbot, window) -> None:
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )


def _reload_with(qtbot, window, **backend) -> None:
    window.apply_preferences(
        replace(window.prefs, backend=replace(window.prefs.backend, **backend))
    )
    wait_idle(qtbot, window)


def test_text_typed_on_your_message_is_sent_not_ignored(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "first question")
    question = window.presenter.last_of_role("user")
    window.activate(question)  # as a click on it in the tree
    wait_idle(qtbot, window)
    assert "new version" in window.composer.edit.placeholderText()

    qtbot.keyClicks(window.composer.edit, "second question")
    _ctrl_enter(qtbot, window)
    wait_idle(qtbot, window)
    assert window.composer.text == ""  # taken
    siblings = window.presenter.snapshot.siblings(question)
    assert len(siblings) == 2
    sent = node_rows.get_node(window.db, siblings[1])
    assert sent.text == "second question"
    assert node_rows.get_node(window.db, window.active_id).parent_id == sent.id
    # And the first question is still there, with its reply.
    assert node_rows.get_children(window.db, question)


class _BatchDelay(QObject):
    """Sleeps on every progress report, on the engine thread: each batch then
    takes as long as on a big model, and the window has time to answer."""

    @Slot(int, int)
    def wait(self, _done: int, _total: int) -> None:
        time.sleep(0.05)


def test_stop_while_a_long_prompt_is_read_returns_within_a_batch(qtbot, make_window):
    window = make_window()
    _reload_with(qtbot, window, n_ctx=4096, n_batch=32)
    worker = window.engine.worker
    delay = _BatchDelay()
    delay.moveToThread(worker.thread())
    worker.progress.connect(delay.wait, Qt.ConnectionType.DirectConnection)
    reports: list[tuple[int, int]] = []
    notes: list[str] = []
    pressed_at: list[int] = []

    def on_progress(done: int, total: int) -> None:
        reports.append((done, total))
        card = window.transcript.streaming_card
        notes.append(card.body.toPlainText() if card is not None else "")
        notes.append(window.status.busy_label.text())
        if len(reports) == 3:
            pressed_at.append(done)
            qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)

    window.engine.progress.connect(on_progress)
    results: list = []
    window.engine.finished.connect(results.append)
    text = " ".join(["a long pasted text about rivers and hills"] * 30)
    window.composer.edit.setPlainText(text)
    _ctrl_enter(qtbot, window)
    wait_idle(qtbot, window)
    worker.progress.disconnect(delay.wait)

    total = reports[0][1]
    assert total > 10 * 32
    # Stopped at the first check after Esc: at most one more batch was read
    # (the one under way when Esc was pressed).
    assert reports[-1][0] <= pressed_at[0] + 32 < total
    # Its role header apart (a batch of its own), then 32 at a time.
    assert f"Reading the prompt… {reports[2][0]} of" in " ".join(notes)
    assert reports[2][0] - reports[1][0] == 32
    sent = next(r for r in results if isinstance(r.job, jobs.Send))
    assert isinstance(sent, Failed) and sent.stopped
    # The message is kept, no error dialog, and the window says how to go on.
    node = node_rows.get_node(window.db, window.active_id)
    assert node.role == "user" and node.text == text
    assert "Your message is kept" in window.status.currentMessage()
    assert not [
        w
        for w in QApplication.topLevelWidgets()
        if isinstance(w, QMessageBox) and w.isVisible()
    ]
    assert window.composer.send_button.text() == "Send"


def test_a_conversation_too_long_for_the_context_says_so_when_opened(
    qtbot, make_window
):
    window = make_window()
    send(qtbot, window, "a short one")
    short = window.conversation_id
    conversation, root = conversation_rows.create_conversation(window.db, "Long", None)
    asked = node_rows.add_node(window.db, root.id, "user", "tell me everything")
    node_rows.add_node(window.db, asked.id, "assistant", "many words here " * 200)
    _reload_with(qtbot, window, n_ctx=256)
    window.presenter.show_conversation(short)
    wait_idle(qtbot, window)

    seen: list[str] = []

    def close_the_dialog() -> None:
        for widget in QApplication.topLevelWidgets():
            if widget.objectName() == "ContextFullDialog" and widget.isVisible():
                seen.append(widget.informativeText())
                widget.close()

    timer = QTimer()
    timer.timeout.connect(close_the_dialog)
    timer.start(20)
    window.sidebar.refresh(short)
    window.presenter.select_conversation(conversation.id)
    qtbot.waitUntil(lambda: bool(seen), timeout=WAIT_MS)
    timer.stop()
    wait_idle(qtbot, window)
    assert "256" in seen[0]
    assert "does not fit" in window.status.context_label.text()
    assert window.status.busy_label.text() == ""


def test_the_composer_says_what_it_takes_after_a_reload(qtbot, make_window):
    window = make_window()
    placeholder = window.composer.edit.placeholderText()
    _reload_with(qtbot, window, n_ctx=1024)
    assert window.composer.edit.placeholderText() == placeholder
    assert not window.composer.edit.isReadOnly()
    assert window.status.busy_label.text() == ""


def test_stop_while_a_model_loads_keeps_the_model_there_was(
    qtbot, make_window, other_tiny_model
):
    window = make_window()
    loaded = window.model_info
    worker = window.engine.worker
    delay = _BatchDelay()
    delay.moveToThread(worker.thread())
    worker.progress.connect(delay.wait, Qt.ConnectionType.DirectConnection)
    clicked: list[str] = []

    def on_progress(_done: int, _total: int) -> None:
        if not clicked:
            button = window.composer.send_button
            clicked.append(button.text())
            qtbot.mouseClick(button, Qt.MouseButton.LeftButton)

    window.engine.progress.connect(on_progress)
    window.load_model(other_tiny_model)
    wait_idle(qtbot, window)
    worker.progress.disconnect(delay.wait)

    assert clicked == ["Stop"]  # the composer's button stops a load too
    assert window.model_info == loaded
    assert "Loading stopped" in window.status.currentMessage()
    assert window.composer.send_button.text() == "Send"
    assert not window.composer.edit.isReadOnly()


def test_a_reply_at_the_length_limit_says_so_and_shows_its_figures(qtbot, make_window):
    window = make_window()
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=3)
    )
    send(qtbot, window, "hi")  # greedy "hi" talks for far longer than 3 tokens
    card = window.transcript.cards[-1]
    reply = node_rows.get_node(window.db, window.active_id)
    assert reply.generation["stop_reason"] == "max_tokens"
    assert card.length_badge is not None and card.length_badge.isVisibleTo(card)
    figures = card.toolTip()
    assert figures.startswith("3 tokens · ") and "tokens/s" in figures
    assert "first token after" in figures and "length limit" in figures
    # A message of the user's has neither.
    question = window.transcript.cards[-2]
    assert question.toolTip() == "" and question.length_badge is None


def test_the_status_bar_speaks_of_the_conversation_shown(qtbot, make_window):
    window = make_window()
    status = window.status
    assert status.speed_label.text() == ""  # no reply yet: no "0.0 tok/s"
    send(qtbot, window, "hello")
    assert status.speed_label.text().endswith("tok/s")
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, window)
    # The reply's speed was the other conversation's; the move is this one's.
    assert status.speed_label.text() == ""
    assert status.restore_label.text().startswith(("Read ", "Resumed ", "Already"))


def test_the_restore_figures_leave_once_they_are_no_longer_true(qtbot, make_window):
    """A move's figures ("Resumed instantly · 4 ms") describe how the shown
    place was reached: a reply since, or another model, makes them stale."""
    window = make_window()
    status = window.status
    send(qtbot, window, "hello")
    first = window.active_id
    send(qtbot, window, "again")
    window.presenter.choose_node(first)
    wait_idle(qtbot, window)
    assert status.restore_label.text() != ""
    send(qtbot, window, "on from here")  # goes on from the context as it is
    assert status.restore_label.text() == ""
    window.presenter.choose_node(first)
    wait_idle(qtbot, window)
    assert status.restore_label.text() != ""
    # Another model: the figures go with the old one; a restore on the new
    # one may then say its own.
    said: list[str] = []
    clear, set_restore = status.clear_restore, status.set_restore
    status.clear_restore = lambda: (said.append("cleared"), clear())
    status.set_restore = lambda stats: (said.append("restored"), set_restore(stats))
    _reload_with(qtbot, window, n_batch=64)
    assert said[:1] == ["cleared"]


def test_continue_goes_on_from_a_reply_at_the_length_limit(qtbot, make_window):
    window = make_window()
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=3)
    )
    send(qtbot, window, "hi")
    cut_card = window.transcript.cards[-1]
    cut = cut_card.node_id
    assert cut_card.continue_button is not None
    assert cut_card.continue_button.isVisibleTo(cut_card)
    qtbot.mouseClick(cut_card.continue_button, Qt.MouseButton.LeftButton)
    assert window.generating
    wait_idle(qtbot, window)
    longer = node_rows.get_node(window.db, window.active_id)
    assert (
        longer.id != cut
        and longer.parent_id == node_rows.get_node(window.db, cut).parent_id
    )
    assert longer.text.startswith(node_rows.get_node(window.db, cut).text)
    card = window.transcript.cards[-1]
    assert card.node_id == longer.id and card.text == longer.text
    assert card.sibling_position == (2, 2)  # beside the cut one, which stays


def test_after_send_the_keyboard_is_back_in_the_message_box(qtbot, make_window):
    window = make_window()
    window.activateWindow()
    qtbot.keyClicks(window.composer.edit, "hello")
    button = window.composer.send_button
    button.setFocus()  # as a click gives it
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert window.composer.edit.hasFocus() or (
        QApplication.focusWidget() is window.composer.edit
    )
