"""Keyboard navigation through the tree, regenerate and edit, on the real stack."""

from __future__ import annotations

from datetime import UTC

from PySide6.QtCore import Qt

from app.conversation.tree_snapshot import TreeSnapshot
from storage import conversation_rows, node_rows
from tests.ui.conftest import send, wait_idle

ALT = Qt.KeyboardModifier.AltModifier
CTRL = Qt.KeyboardModifier.ControlModifier


def _key(qtbot, window, key, modifiers=Qt.KeyboardModifier.NoModifier) -> None:
    qtbot.keyClick(window.composer.edit, key, modifiers)
    wait_idle(qtbot, window)


def test_ctrl_r_regenerates_and_alt_arrows_walk_the_tree(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "first question")
    first_reply = window.active_id
    user = node_rows.get_node(window.db, first_reply).parent_id

    _key(qtbot, window, Qt.Key.Key_R, CTRL)
    second_reply = window.active_id
    assert second_reply != first_reply
    assert [c.id for c in node_rows.get_children(window.db, user)] == [
        first_reply,
        second_reply,
    ]

    _key(qtbot, window, Qt.Key.Key_Left, ALT)
    assert window.active_id == first_reply
    assert window.transcript.cards[-1].node_id == first_reply
    _key(qtbot, window, Qt.Key.Key_Left, ALT)  # no sibling further left
    assert window.active_id == first_reply
    _key(qtbot, window, Qt.Key.Key_Right, ALT)
    assert window.active_id == second_reply

    _key(qtbot, window, Qt.Key.Key_Up, ALT)
    assert window.active_id == user
    _key(qtbot, window, Qt.Key.Key_Down, ALT)
    assert window.active_id == second_reply  # the newest child
    assert (
        conversation_rows.get_conversation(
            window.db, window.conversation_id
        ).active_node_id
        == second_reply
    )


def test_ctrl_e_edits_the_last_message(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "question one")
    send(qtbot, window, "question two")
    _key(qtbot, window, Qt.Key.Key_E, CTRL)
    editing = window.composer.editing_node
    assert editing is not None
    assert node_rows.get_node(window.db, editing).text == "question two"
    assert window.composer.text == "question two"


def test_ctrl_shift_t_focuses_the_tree(qtbot, make_window):
    window = make_window()
    # Wide enough for the tree (in a narrower window it gives way to the
    # transcript by itself, test_narrow_window).
    window.resize(1280, 800)
    window.tree_action.trigger()  # hidden first: the shortcut shows it again
    assert not window.tree_panel.isVisible()
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_T, CTRL | Qt.KeyboardModifier.ShiftModifier
    )
    assert window.tree_panel.isVisible() and window.tree_action.isChecked()
    assert window.tree_panel.view.hasFocus()


def test_the_shortcuts_are_listed_in_help():
    from app.window.actions import SHORTCUTS_HELP

    for key in ("Alt+Left", "Alt+Up", "Ctrl+R", "Ctrl+E", "Ctrl+Shift+T"):
        assert key in SHORTCUTS_HELP


def _summary(node_id, parent_id, role):
    from datetime import datetime

    from storage.records import NodeSummary

    return NodeSummary(
        node_id, parent_id, role, "", 1, "complete", 0, datetime.now(UTC)
    )


def test_sibling_step_uses_the_deepest_fork():
    # root 1 → user 2 → replies 3, 4; reply 3 → user 5 → reply 6 (no siblings).
    tree = TreeSnapshot(
        1,
        [
            _summary(1, None, "root"),
            _summary(2, 1, "user"),
            _summary(3, 2, "assistant"),
            _summary(4, 2, "assistant"),
            _summary(5, 3, "user"),
            _summary(6, 5, "assistant"),
        ],
    )
    assert tree.sibling_step(6, 1) == 4  # the fork is 3/4, above 6
    assert tree.sibling_step(4, -1) == 6  # back to where branch 3 was extended
    assert tree.sibling_step(6, -1) is None
    assert tree.parent_of(1) is None and tree.newest_child(2) == 4
    assert tree.last_of_role(6, "user") == 5
