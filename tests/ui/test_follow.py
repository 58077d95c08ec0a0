"""Follow mode: the transcript keeps the newest text in sight unless the user
scrolls up, and "Jump to latest" brings it back."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from tests.ui.conftest import WAIT_MS, send, slow_down_generation, wait_idle


def _small_window_with_long_replies(make_window):
    window = make_window()
    # Greedy "hi" makes the tiny model talk for ~250 tokens: more than a
    # short window shows.
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=400)
    )
    window.resize(900, 420)
    return window


def _settle(qtbot) -> None:
    # Cards wrap and grow after they are shown; let the layout finish.
    for _ in range(5):
        QApplication.processEvents()
        qtbot.wait(20)


def test_a_streamed_reply_ends_in_view(qtbot, make_window):
    window = _small_window_with_long_replies(make_window)
    send(qtbot, window, "hi")
    _settle(qtbot)

    bar = window.transcript.verticalScrollBar()
    assert bar.maximum() > 0, "the reply should not fit the window"
    assert bar.value() == bar.maximum()
    assert window.transcript.following
    assert window.transcript._jump_button.isHidden()


def test_scrolling_up_stops_following_and_jump_brings_it_back(qtbot, make_window):
    window = _small_window_with_long_replies(make_window)
    send(qtbot, window, "hi")
    slow_down_generation(window, 0.004)
    transcript = window.transcript
    bar = transcript.verticalScrollBar()
    qtbot.keyClicks(window.composer.edit, "hi")
    with qtbot.waitSignal(window.engine.token_received, timeout=WAIT_MS):
        qtbot.keyClick(
            window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
        )
    _settle(qtbot)
    bar.setValue(0)  # the user scrolls up to reread the first answer
    wait_idle(qtbot, window)
    _settle(qtbot)

    assert bar.maximum() > 0
    assert bar.value() == 0, "the view moved while the user was reading"
    assert not transcript.following
    assert transcript._jump_button.isVisible()

    qtbot.mouseClick(transcript._jump_button, Qt.MouseButton.LeftButton)
    _settle(qtbot)
    assert bar.value() == bar.maximum()
    assert transcript.following
    assert transcript._jump_button.isHidden()


def test_opening_a_conversation_shows_its_latest_message(qtbot, make_window):
    window = _small_window_with_long_replies(make_window)
    send(qtbot, window, "hi")
    first = window.conversation_id
    window.new_action.trigger()
    wait_idle(qtbot, window)
    assert window.conversation_id != first

    window.show_conversation(first)
    wait_idle(qtbot, window)
    _settle(qtbot)
    bar = window.transcript.verticalScrollBar()
    assert bar.maximum() > 0
    assert bar.value() == bar.maximum()
