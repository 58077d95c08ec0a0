"""The first screen of a conversation: what is loaded, what to try, what the
tree means; and the tree's first row in plain words (issue 22)."""

from __future__ import annotations

from datetime import UTC, datetime

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from app.conversation.tree_snapshot import TreeSnapshot
from app.qt.models.conversation_tree import ConversationTreeModel
from app.qt.views.transcript.empty_state import EXAMPLE_PROMPTS
from storage.records import NodeSummary
from tests.ui.conftest import send, wait_idle

LEFT = Qt.MouseButton.LeftButton


def _root_texts(model: ConversationTreeModel) -> list[str]:
    """What the root row shows, column by column."""
    return [model.index(0, column).data() for column in range(model.columnCount())]


def test_a_new_conversation_says_which_model_and_what_to_try(qtbot, make_window):
    window = make_window()
    empty = window.transcript.empty_state
    assert window.center.currentWidget() is window.chat_page
    assert empty.isVisibleTo(window)
    # The readable name the status bar shows, not the file's general.name.
    assert window.status.model_label.text() == "Tiny"
    assert "Tiny" in empty.subtitle.text()
    assert window.model_info is not None
    assert window.model_info.name not in empty.subtitle.text()
    assert "Start" in empty.title.text()
    # What the tree and its checkpoint marks mean, in plain words.
    assert "click any earlier message" in empty.tree_tip.text()
    assert "nothing is ever lost" in empty.tree_tip.text()
    # And where the system prompt and the presets are.
    assert empty.prompt_box.isVisibleTo(window)
    assert "Ctrl+Shift+P" in empty.prompt_tip.text()
    assert "new branch" in empty.prompt_tip.text()
    assert len(empty.example_buttons) == len(EXAMPLE_PROMPTS) >= 2
    assert all(b.isVisibleTo(window) for b in empty.example_buttons)


def test_clicking_an_example_puts_it_in_the_composer_without_sending(
    qtbot, make_window
):
    window = make_window()
    button = window.transcript.empty_state.example_buttons[1]
    qtbot.mouseClick(button, LEFT)
    assert window.composer.text == EXAMPLE_PROMPTS[1]
    assert window.composer.edit.hasFocus()
    assert not window.generating and not window.engine.busy
    assert window.transcript.cards == []
    # The user may change it before sending: the cursor is at its end.
    assert window.composer.edit.textCursor().atEnd()


def test_the_empty_state_goes_with_the_first_message(qtbot, make_window):
    window = make_window()
    empty = window.transcript.empty_state
    send(qtbot, window, "hello")
    assert not empty.isVisibleTo(window)
    # A new conversation shows it again.
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, window)
    assert window.transcript.cards == []
    assert empty.isVisibleTo(window)


def test_a_system_prompt_keeps_the_empty_state_below_it(qtbot, make_window):
    window = make_window()
    window.presenter.new_conversation("Be brief.", "Brief")
    wait_idle(qtbot, window)
    cards = window.transcript.cards
    assert [c.role for c in cards] == ["root"]
    empty = window.transcript.empty_state
    assert empty.isVisibleTo(window)
    assert empty.y() > cards[0].y()


def test_without_a_model_it_says_so_and_where_to_get_one(qtbot, make_window, tmp_path):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(make_window.tiny_model.read_bytes())
    window = make_window(model=copy)
    empty = window.transcript.empty_state
    assert "Copy" in empty.subtitle.text()
    copy.unlink()  # the loaded model cannot come back after a failed load
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(make_window.tiny_model.read_bytes()[:4096])  # a broken GGUF
    window.presenter.load_model(bad)
    wait_idle(qtbot, window)
    for box in window.findChildren(QMessageBox):
        box.close()  # the error the failed load showed
    assert window.model_info is None
    assert window.center.currentWidget() is window.welcome
    assert "could not be loaded" in window.welcome.message.text()
    # Should the chat page show (a read-only database), it says so too.
    window.show_chat(True)
    assert empty.isVisibleTo(window)
    assert "No model" in empty.title.text()
    said = empty.subtitle.text().replace("\u00a0", " ")
    assert "copy" not in said
    assert "File → Open model file" in said and "File → Models…" in said
    assert not any(b.isVisibleTo(window) for b in empty.example_buttons)


def test_the_empty_state_wraps_rather_than_widening_the_window(qtbot, make_window):
    window = make_window()
    empty = window.transcript.empty_state
    assert empty.minimumSizeHint().width() < 200
    window.transcript.resize(260, 500)
    assert empty.heightForWidth(220) > empty.heightForWidth(560)


# --- the tree's first row -------------------------------------------------------


def _node(
    node_id: int, parent: int | None, role: str, text: str, size: int
) -> NodeSummary:
    return NodeSummary(
        id=node_id,
        parent_id=parent,
        role=role,
        text=text,
        n_tokens=21,
        status="complete",
        checkpoint_bytes=size,
        created_at=datetime.now(UTC),
    )


def test_the_root_row_is_in_plain_words_and_its_figures_in_the_tooltip(qtbot):
    model = ConversationTreeModel()
    model.set_snapshot(TreeSnapshot(1, [_node(1, None, "root", "", 484_800)]))
    texts = _root_texts(model)
    assert texts[0] == "Start"
    assert not any("conversation start" in t for t in texts)
    assert not any("kB" in t or "MB" in t for t in texts)
    assert "✓" in texts[2]  # the compact mark stays
    tooltip = model.index(0, 0).data(Qt.ItemDataRole.ToolTipRole)
    assert "21 tokens" in tooltip
    assert "485 kB" in tooltip and "restores instantly" in tooltip

    model.set_snapshot(
        TreeSnapshot(2, [_node(2, None, "root", "You are a pirate. Arr.", 0)])
    )
    assert _root_texts(model)[0] == "System prompt: You are a pirate. Arr."
    tooltip = model.index(0, 0).data(Qt.ItemDataRole.ToolTipRole)
    assert "not saved" in tooltip


def test_the_real_root_row_has_no_jargon(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "hi")
    texts = _root_texts(window.tree_model)
    assert texts[0] == "Start"
    assert not any("(conversation start)" in t for t in texts)
    assert not any(" kB" in t or " MB" in t or " B" in t for t in texts)
