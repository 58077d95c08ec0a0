"""Find in all conversations: typed words, hits, Enter jumps and restores."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.qt.models.search_results import HtmlRole, NodeIdRole
from storage import conversation_rows, node_rows
from tests.ui.conftest import WAIT_MS, send, wait_idle

CTRL_SHIFT = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier


def test_typed_words_find_a_message_and_enter_jumps_to_it(
    qtbot, make_window, qtmodeltester
):
    window = make_window()
    send(qtbot, window, "Tell me about lighthouses")
    first_conversation = window.conversation_id
    question = node_rows.get_node(window.db, window.active_id).parent_id
    window.new_action.trigger()
    wait_idle(qtbot, window)
    send(qtbot, window, "Something else entirely")
    assert window.conversation_id != first_conversation

    qtbot.keyClick(window.composer.edit, Qt.Key.Key_F, CTRL_SHIFT)
    dialog = window._search_dialog
    assert dialog is not None and dialog.isVisible()
    qtbot.keyClicks(dialog.query_edit, "lightho")  # a word still being typed
    qtbot.waitUntil(lambda: dialog.model.rowCount() == 1, timeout=WAIT_MS)
    qtmodeltester.check(dialog.model)
    index = dialog.model.index(0, 0)
    assert index.data(NodeIdRole) == question
    assert "<b>lighthouses</b>" in index.data(HtmlRole)
    assert "Tell me about lighthouses" in index.data(HtmlRole)  # the title
    assert dialog.status_label.text().startswith("1 message")

    qtbot.keyClick(dialog.query_edit, Qt.Key.Key_Return)
    # The window switched conversations and shows the message at once...
    assert not dialog.isVisible()
    assert window.conversation_id == first_conversation
    assert window.active_id == question
    assert window.transcript.cards[-1].node_id == question
    assert window.sidebar.current_conversation() == first_conversation
    # ...and the engine restores it in the background, as a click in the tree.
    wait_idle(qtbot, window)
    assert window.status.restore_label.detail().startswith("restored ")
    stored = conversation_rows.get_conversation(window.db, first_conversation)
    assert stored.active_node_id == question


def test_no_hits_and_hostile_input_say_so(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "plain words")
    window.find_action.trigger()
    dialog = window._search_dialog
    for text in ['"(', "AND OR", "zzzz"]:
        dialog.query_edit.setText(text)
        dialog.run_search()
        assert dialog.model.rowCount() == 0
        assert dialog.status_label.text()
    # Enter with nothing found does nothing.
    active = window.active_id
    qtbot.keyClick(dialog.query_edit, Qt.Key.Key_Return)
    assert dialog.isVisible() and window.active_id == active
    dialog.close()


def test_arrows_choose_among_hits_and_enter_opens_one(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "apple one")
    send(qtbot, window, "apple two")
    window.find_action.trigger()
    dialog = window._search_dialog
    dialog.query_edit.setText("apple")
    dialog.run_search()
    assert dialog.model.rowCount() == 2
    qtbot.keyClick(dialog.query_edit, Qt.Key.Key_Down)
    chosen = dialog.results.currentIndex().data(NodeIdRole)
    assert chosen == dialog.model.hit(1).node_id

    qtbot.keyClick(dialog.query_edit, Qt.Key.Key_Return)
    assert window.active_id == chosen
    wait_idle(qtbot, window)
