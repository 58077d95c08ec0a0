"""A message sent, or edited into a new branch, shows in the tree as soon as
it is stored, with its reply being written under it (issue 41): not only
once the reply has ended."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt

from app.qt.models.conversation_tree import WRITING
from storage.values import Role, Status
from tests.ui.conftest import WAIT_MS, send, slow_down_generation, wait_idle


def _in_tree(window, role: str, text: str) -> int | None:
    """The id of the tree's message of ``role`` with ``text``, if it shows."""
    model = window.tree_model
    for node in model.snapshot.nodes.values():
        if node.role == role and node.text == text:
            return node.id if model.index_of(node.id).isValid() else None
    return None


def _writing_under(window, parent_id: int) -> int | None:
    """The reply being written under ``parent_id``, if the tree shows it."""
    model = window.tree_model
    for node in model.snapshot.nodes.values():
        if node.parent_id == parent_id and node.status == Status.GENERATING:
            return node.id if model.index_of(node.id).isValid() else None
    return None


def _send_slowly(qtbot, window, text: str) -> None:
    qtbot.keyClicks(window.composer.edit, text)
    with qtbot.waitSignal(window.engine.token_received, timeout=WAIT_MS):
        qtbot.keyClick(
            window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
        )


def _shows_while_writing(qtbot, window, text: str) -> None:
    """The tree shows the user's ``text`` and a reply being written under
    it while the reply is still being written; then Esc stops it."""
    qtbot.waitUntil(
        lambda: _in_tree(window, Role.USER, text) is not None or not window.generating,
        timeout=WAIT_MS,
    )
    message = _in_tree(window, Role.USER, text)
    assert message is not None and window.generating
    qtbot.waitUntil(
        lambda: _writing_under(window, message) is not None or not window.generating,
        timeout=WAIT_MS,
    )
    reply = _writing_under(window, message)
    assert reply is not None and window.generating  # long before the reply ends
    label = window.tree_model.index_of(reply).data()
    assert label == f"Assistant: {WRITING}" or not label.endswith("(empty)")
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_Escape)
    wait_idle(qtbot, window)
    # Stopped: the same rows, the reply now as it was kept.
    assert window.tree_model.index_of(reply).isValid()
    assert window.tree_model.snapshot.nodes[reply].status == Status.STOPPED


def test_a_sent_message_and_its_reply_show_in_the_tree_while_it_is_written(
    qtbot, make_window
):
    window = make_window()
    send(qtbot, window, "first")
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=400)
    )
    slow_down_generation(window, 0.05)
    _send_slowly(qtbot, window, "hi")
    _shows_while_writing(qtbot, window, "hi")

    # An edit: the new version shows beside the old one at once.
    first = _in_tree(window, Role.USER, "first")
    assert first is not None
    qtbot.mouseClick(window.transcript.cards[0].edit_button, Qt.MouseButton.LeftButton)
    window.composer.edit.selectAll()
    _send_slowly(qtbot, window, "hi again")
    _shows_while_writing(qtbot, window, "hi again")
    edited = _in_tree(window, Role.USER, "hi again")
    assert window.tree_model.snapshot.siblings(edited) == [first, edited]
    assert window.tree_model.branch_of(edited) == (2, 2)
