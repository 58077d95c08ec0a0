"""System prompt and sampling per conversation, with presets, in the real
window: the dialog through Conversation → System prompt and sampling, a new
start in the tree, the preset's sampling on the next reply, presets kept."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.conversation.presets import STARTER_PRESETS
from app.preferences import load_preferences
from app.qt.views.dialogs.conversation_settings import ConversationSettingsDialog
from app.qt.views.dialogs.new_conversation import NewConversationDialog
from storage import conversation_rows, node_rows
from tests.ui.conftest import send, wait_idle

CREATIVE = next(p for p in STARTER_PRESETS if p.name == "Creative")


def _pick(combo, name: str) -> None:
    """Choose ``name`` in a preset list as a user does (``activated``)."""
    at = combo.findText(name)
    assert at >= 0, f"{name} is not offered"
    combo.setCurrentIndex(at)
    combo.activated.emit(at)


def test_a_new_system_prompt_from_a_preset_is_a_new_start(
    qtbot, make_window, monkeypatch
):
    window = make_window()
    send(qtbot, window, "Tell me about owls")
    first_reply = window.presenter.active_id
    seen: list[ConversationSettingsDialog] = []

    def fill_in(dialog: ConversationSettingsDialog) -> int:
        seen.append(dialog)
        assert dialog.system_prompt == ""  # the branch's prompt: none yet
        _pick(dialog.preset_combo, "Creative")
        assert dialog.system_prompt == CREATIVE.system_prompt
        assert dialog.sampling_form.params() == CREATIVE.sampling
        # A preset of one's own, saved from what the dialog shows.
        dialog.sampling_form.max_tokens.setValue(40)
        dialog.save_as_preset("Owls")
        assert dialog.preset_combo.currentText() == "Owls"
        dialog._on_buttons_accepted()
        return dialog.result()

    monkeypatch.setattr(ConversationSettingsDialog, "exec", fill_in)
    window.conversation_settings_action.trigger()
    wait_idle(qtbot, window)
    assert seen

    presenter = window.presenter
    roots = presenter.snapshot.roots
    assert len(roots) == 2 and presenter.active_id == roots[1]
    # The transcript shows the new start; the tree shows both, each holding
    # its own rows.
    assert window.transcript.cards[0].text == CREATIVE.system_prompt
    model = window.tree_panel.model
    assert model.rowCount() == 2
    assert model.index_of(first_reply).parent() == model.index_of(roots[0])

    # Saved presets are preferences; the conversation keeps its sampling.
    assert "Owls" in [p.name for p in load_preferences(window.db).presets]
    stored = conversation_rows.get_conversation(window.db, presenter.conversation_id)
    assert stored.sampling is not None and stored.sampling["preset"] == "Owls"
    assert stored.sampling["max_tokens"] == 40

    send(qtbot, window, "And about larks?")
    reply = node_rows.get_node(window.db, presenter.active_id)
    assert reply.generation is not None
    params = reply.generation["params"]
    assert params["temperature"] == pytest.approx(CREATIVE.sampling.temperature)
    assert params["max_tokens"] == 40
    path = node_rows.get_path(window.db, reply.id)
    assert path[0].id == roots[1]
    # The first branch is as it was, under the first start.
    assert node_rows.get_node(window.db, first_reply).parent_id is not None

    # Back on it, its start (no system prompt) has a card, to switch from
    # one start to the other as between any siblings.
    presenter.choose_node(first_reply)
    wait_idle(qtbot, window)
    start = window.transcript.cards[0]
    assert start.role == "root" and start.sibling_position == (1, 2)
    assert "default" in start.body.toPlainText()
    qtbot.mouseClick(start.next_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert presenter.snapshot.path(presenter.active_id)[0] == roots[1]


def test_a_new_conversation_can_start_from_a_preset(qtbot, make_window, monkeypatch):
    window = make_window()

    def fill_in(dialog: NewConversationDialog) -> int:
        _pick(dialog.preset_combo, "Creative")
        return NewConversationDialog.DialogCode.Accepted

    monkeypatch.setattr(NewConversationDialog, "exec", fill_in)
    window.new_with_prompt_action.trigger()
    wait_idle(qtbot, window)
    stored = conversation_rows.get_conversation(
        window.db, window.presenter.conversation_id
    )
    assert stored.system_prompt == CREATIVE.system_prompt
    assert stored.sampling is not None and stored.sampling["preset"] == "Creative"
    assert window.presenter.conversation_sampling() == (CREATIVE.sampling, "Creative")
