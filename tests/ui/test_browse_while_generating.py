"""Reading while a reply streams: other conversations, search, export, and back.

The reply is slowed on the engine thread (as a big model on a CPU is) and
every step is what a user does: clicks in the list, Ctrl+Shift+F, the export
action, a click back. The reply must come out whole, as stored.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt

from app.qt.models.conversation_list import ProgressRole
from app.qt.views.chrome import exchange_actions
from storage import node_rows
from tests.ui.conftest import WAIT_MS, send, slow_down_generation, wait_idle


def _click_conversation(qtbot, window, conversation_id: int) -> None:
    view = window.sidebar.list_view
    index = window.list_model.index(window.list_model.row_of(conversation_id), 0)
    qtbot.mouseClick(
        view.viewport(), Qt.MouseButton.LeftButton, pos=view.visualRect(index).center()
    )


def _progress(window, conversation_id: int) -> str | None:
    index = window.list_model.index(window.list_model.row_of(conversation_id), 0)
    return index.data(ProgressRole)


def test_other_conversations_can_be_read_searched_and_exported_mid_reply(
    qtbot, make_window, monkeypatch, tmp_path: Path
):
    window = make_window()
    send(qtbot, window, "apple pie recipe")
    first = window.conversation_id
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, window)
    second = window.conversation_id
    # Greedy "hi" from the start makes the tiny model talk for ~250 tokens.
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=400)
    )
    undo = slow_down_generation(window, 0.02)
    pieces: list[str] = []
    window.engine.token_received.connect(pieces.append)

    qtbot.keyClicks(window.composer.edit, "hi")
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )
    qtbot.waitUntil(lambda: len(window.transcript.streamed_text) > 0, timeout=WAIT_MS)
    qtbot.waitUntil(
        lambda: (_progress(window, second) or "").startswith("Writing a reply"),
        timeout=WAIT_MS,
    )

    # Read the other conversation: the list and its transcript respond.
    assert window.sidebar.isEnabled() and window.tree_panel.view.isEnabled()
    _click_conversation(qtbot, window, first)
    assert window.conversation_id == first
    assert window.transcript.cards[0].text == "apple pie recipe"
    assert window.transcript.streaming_card is None
    assert window.composer.edit.isReadOnly()
    assert "elsewhere" in window.composer.edit.placeholderText()
    assert window.generating  # still streaming, out of sight

    # Search all conversations and open a hit.
    window.find_action.trigger()
    dialog = window._search_dialog
    dialog.query_edit.setText("apple")
    dialog.run_search()
    assert dialog.model.rowCount() >= 1
    qtbot.keyClick(dialog.query_edit, Qt.Key.Key_Return)
    assert not dialog.isVisible() and window.conversation_id == first

    # Export what is shown.
    exported = tmp_path / "apple.md"
    monkeypatch.setattr(
        exchange_actions, "ask_export_path", lambda *_: (exported, "markdown")
    )
    window.export_action.trigger()
    assert "apple pie recipe" in exported.read_text(encoding="utf-8")
    # The reply goes on meanwhile, out of sight.
    away_from = len(pieces)
    qtbot.waitUntil(lambda: len(pieces) >= away_from + 10, timeout=WAIT_MS)
    assert window.transcript.streaming_card is None
    assert window.generating, "the reply should still be streaming"

    # Back to the reply: it shows as far as it got and streams on.
    _click_conversation(qtbot, window, second)
    assert window.conversation_id == second
    card = window.transcript.streaming_card
    assert card is not None
    shown_on_return = window.transcript.streamed_text
    assert shown_on_return == "".join(pieces)
    assert not window.composer.edit.isReadOnly()
    qtbot.waitUntil(
        lambda: len(window.transcript.streamed_text) > len(shown_on_return),
        timeout=WAIT_MS,
    )
    undo()
    wait_idle(qtbot, window)

    reply = node_rows.get_node(window.db, window.active_id)
    assert reply.role == "assistant" and reply.text
    assert window.transcript.cards[-1].text == reply.text
    assert reply.text.startswith(shown_on_return)
    assert window.transcript.cards[-2].text == "hi"
    assert len(reply.text) > len(shown_on_return)
    assert _progress(window, second) is None
