"""A conversation made with another model: the window says so, restores
nothing until the user chooses, switches back or goes on, and the tree marks
only the checkpoints that restore under the loaded model.

Real widgets (offscreen), the real engine thread on two tiny models of one
vocabulary (other weights), a real SQLite file.
"""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.ui.conftest import send, wait_idle


def _checkpointed(window) -> list[int]:
    snapshot = window.presenter.snapshot
    return [n.id for n in snapshot.nodes.values() if n.checkpoint_bytes]


def test_switch_back_to_the_model_a_conversation_was_made_with(
    qtbot, make_window, other_tiny_model, tiny_model
):
    window = make_window()
    send(qtbot, window, "Hello")
    made = _checkpointed(window)
    assert len(made) >= 3  # root, message, reply
    assert not window.model_offer.isVisible()

    window.load_model(other_tiny_model)
    wait_idle(qtbot, window)
    offer = window.model_offer
    assert offer.isVisible()
    assert "made with Tiny." in offer.label.text()
    assert offer.switch_button.text() == "Switch to Tiny"
    assert offer.keep_button.text() == "Continue with Tiny Other"
    # Nothing was restored under the other model, and its tree has no marks:
    # none of these checkpoints restores under it.
    assert "restored" not in window.status.restore_label.detail()
    assert _checkpointed(window) == []

    qtbot.mouseClick(offer.switch_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert window.model_info.path == str(tiny_model)
    assert not offer.isVisible()
    assert sorted(_checkpointed(window)) == sorted(made)
    assert "0 reprocessed" in window.status.restore_label.detail()


def test_continue_with_the_loaded_model(qtbot, make_window, other_tiny_model):
    window = make_window()
    send(qtbot, window, "Hello")
    window.load_model(other_tiny_model)
    wait_idle(qtbot, window)
    offer = window.model_offer
    assert offer.isVisible()

    qtbot.mouseClick(offer.keep_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert not offer.isVisible()
    # Restored now, under this model: its own checkpoints are made.
    assert "reprocessed" in window.status.restore_label.detail()
    assert _checkpointed(window)
    send(qtbot, window, "And now?")
    # The conversation is now this model's: no offer when it is shown again.
    conversation = window.presenter.conversation_id
    window.presenter.new_conversation()
    wait_idle(qtbot, window)
    window.presenter.select_conversation(conversation)
    wait_idle(qtbot, window)
    assert not offer.isVisible()


def test_writing_on_chooses_the_loaded_model(qtbot, make_window, other_tiny_model):
    window = make_window()
    send(qtbot, window, "Hello")
    window.load_model(other_tiny_model)
    wait_idle(qtbot, window)
    assert window.model_offer.isVisible()
    send(qtbot, window, "Go on")
    assert not window.model_offer.isVisible()
    record = window.presenter.shown.record
    assert record is not None and record.model_path == str(other_tiny_model)
