"""Chatting through the real stack: stream, stop, edit, regenerate, switch siblings."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QLabel

from app import jobs
from app.preferences import load_preferences, save_preferences
from storage import conversation_rows, node_rows
from tests.ui.conftest import WAIT_MS, send, slow_down_generation, wait_idle


def _long_replies(window) -> None:
    # Greedy "hi" from the start makes the tiny model talk for ~250 tokens.
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=400)
    )


def test_send_streams_the_reply_into_the_transcript(qtbot, make_window):
    window = make_window()
    pieces: list[str] = []
    shown_while_streaming: list[str] = []
    window.engine.token_received.connect(pieces.append)
    window.engine.token_received.connect(
        lambda _p: shown_while_streaming.append(window.transcript.streamed_text)
    )

    send(qtbot, window, "Tell me about trees.")

    path = node_rows.get_path(window.db, window.active_id)
    assert [n.role for n in path] == ["root", "user", "assistant"]
    assert path[1].text == "Tell me about trees."
    assert pieces, "no token was streamed"
    assert "".join(pieces) == path[2].text
    # The transcript showed the reply growing, before it was complete.
    assert shown_while_streaming[0] == pieces[0]
    cards = window.transcript.cards
    assert [c.role for c in cards] == ["user", "assistant"]
    assert cards[1].text == path[2].text and cards[1].node_id == path[2].id
    assert "tok/s" in window.status.speed_label.text()
    assert window.status.context_label.text().endswith("/ 4,096")
    assert window.composer.text == ""


def test_enter_inserts_a_newline_and_ctrl_enter_sends(qtbot, make_window):
    window = make_window()
    qtbot.keyClicks(window.composer.edit, "line one")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Return)
    qtbot.keyClicks(window.composer.edit, "line two")
    assert window.composer.text == "line one\nline two"
    assert not window.generating
    assert "Ctrl+Enter to send" in window.composer.hint.text()
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )
    wait_idle(qtbot, window)
    assert (
        node_rows.get_path(window.db, window.active_id)[1].text == "line one\nline two"
    )


def test_escape_stops_generation_and_keeps_the_partial_reply(qtbot, make_window):
    window = make_window()
    _long_replies(window)
    slow_down_generation(window, 0.01)
    results = []
    window.engine.finished.connect(results.append)
    qtbot.keyClicks(window.composer.edit, "hi")
    with qtbot.waitSignal(window.engine.token_received, timeout=WAIT_MS):
        qtbot.keyClick(
            window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
        )
    assert window.composer.send_button.text() == "Stop"
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)
    wait_idle(qtbot, window)

    reply = next(r for r in results if isinstance(r.job, jobs.Send)).reply
    assert reply.stats.stop_reason == "stopped"
    node = node_rows.get_node(window.db, window.active_id)
    assert node.status == "stopped" and node.text == reply.text and node.text
    assert reply.stats.generated_tokens < 200  # stopped long before it would have ended
    assert window.composer.send_button.text() == "Send"
    card = window.transcript.cards[-1]
    assert card.node_id == node.id and card.text == node.text


def test_stop_button_stops_generation(qtbot, make_window):
    window = make_window()
    _long_replies(window)
    slow_down_generation(window, 0.01)
    qtbot.keyClicks(window.composer.edit, "hi")
    with qtbot.waitSignal(window.engine.token_received, timeout=WAIT_MS):
        qtbot.mouseClick(window.composer.send_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(
        window.composer.send_button, Qt.MouseButton.LeftButton
    )  # now "Stop"
    wait_idle(qtbot, window)
    assert node_rows.get_node(window.db, window.active_id).status == "stopped"


def test_gui_thread_keeps_running_while_a_reply_streams(qtbot, make_window):
    window = make_window()
    _long_replies(window)
    slow_down_generation(window, 0.004)  # about a second of generation
    ticks: list[float] = []
    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    qtbot.keyClicks(window.composer.edit, "hi")
    window.engine.started.connect(lambda _job: timer.start())
    window.engine.finished.connect(lambda _result: timer.stop())
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )
    wait_idle(qtbot, window)

    generated = node_rows.get_node(window.db, window.active_id).generation[
        "generated_tokens"
    ]
    assert generated > 100
    # Had generation run on the GUI thread, the timer could not have fired at all.
    assert len(ticks) >= 10
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 0.5, f"the GUI thread was blocked for {max(gaps):.2f} s"


def test_edit_creates_a_sibling_branch_and_erases_nothing(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "first question")
    original_user = window.transcript.cards[0].node_id
    original_reply = window.active_id

    qtbot.mouseClick(window.transcript.cards[0].edit_button, Qt.MouseButton.LeftButton)
    assert window.composer.editing_node == original_user
    assert window.composer.text == "first question"
    assert window.composer.edit_banner.isVisibleTo(window)
    window.composer.edit.selectAll()
    qtbot.keyClicks(window.composer.edit, "edited question")
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )
    wait_idle(qtbot, window)

    root = window.tree_model.snapshot.root_id
    users = node_rows.get_children(window.db, root)
    assert [u.text for u in users] == ["first question", "edited question"]
    assert node_rows.get_node(window.db, original_reply).id == original_reply  # kept
    user_card = window.transcript.cards[0]
    assert user_card.text == "edited question"
    assert user_card.sibling_label.text() == "2/2"
    assert window.composer.editing_node is None


def test_escape_cancels_an_edit(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "question")
    qtbot.mouseClick(window.transcript.cards[0].edit_button, Qt.MouseButton.LeftButton)
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)
    assert window.composer.editing_node is None
    assert window.composer.text == ""


def test_regenerate_adds_a_sibling_reply_and_the_navigator_switches(qtbot, make_window):
    window = make_window()
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, temperature=0.9, seed=3)
    )
    send(qtbot, window, "Pick a colour.")
    first = window.active_id
    first_text = window.transcript.cards[-1].text

    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, seed=4)
    )
    qtbot.mouseClick(
        window.transcript.cards[-1].regenerate_button, Qt.MouseButton.LeftButton
    )
    wait_idle(qtbot, window)
    second = window.active_id
    assert second != first
    assert (
        node_rows.get_node(window.db, second).parent_id
        == node_rows.get_node(window.db, first).parent_id
    )
    card = window.transcript.cards[-1]
    assert card.sibling_label.text() == "2/2" and card.node_id == second

    qtbot.mouseClick(card.previous_button, Qt.MouseButton.LeftButton)
    assert window.active_id == first
    card = window.transcript.cards[-1]
    assert card.sibling_label.text() == "1/2" and card.text == first_text
    assert not card.previous_button.isEnabled() and card.next_button.isEnabled()
    assert window.tree_panel.selected_node() == first
    wait_idle(qtbot, window)  # the background restore
    assert (
        conversation_rows.get_conversation(
            window.db, window.conversation_id
        ).active_node_id
        == first
    )

    qtbot.mouseClick(card.next_button, Qt.MouseButton.LeftButton)
    assert window.active_id == second
    wait_idle(qtbot, window)


def test_sibling_navigation_follows_the_branch_to_its_latest_message(
    qtbot, make_window
):
    window = make_window()
    send(qtbot, window, "one")
    send(qtbot, window, "two")
    deep_leaf = window.active_id
    first_user = window.transcript.cards[0]
    qtbot.mouseClick(first_user.edit_button, Qt.MouseButton.LeftButton)
    window.composer.edit.selectAll()
    qtbot.keyClicks(window.composer.edit, "one, edited")
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )
    wait_idle(qtbot, window)

    qtbot.mouseClick(
        window.transcript.cards[0].previous_button, Qt.MouseButton.LeftButton
    )
    assert window.active_id == deep_leaf
    assert [c.text for c in window.transcript.cards][::2] == ["one", "two"]
    wait_idle(qtbot, window)


def test_a_reply_cut_off_by_the_context_says_so(qtbot, make_window):
    db = make_window.open_db()
    prefs = load_preferences(db)
    save_preferences(
        db,
        replace(
            prefs,
            backend=replace(prefs.backend, n_ctx=128),
            sampling=replace(prefs.sampling, max_tokens=1000),
        ),
    )
    db.close()
    window = make_window()

    send(qtbot, window, "Hi")

    reply = node_rows.get_node(window.db, window.active_id)
    assert reply.status == "truncated"
    card = window.transcript.cards[-1]
    note = card.findChild(QLabel, "MessageNote")
    assert note is not None and "the context is full" in note.text()
    assert card.findChild(QLabel, "MessageStatus").text() == "cut off"
