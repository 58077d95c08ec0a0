"""The tree panel: clicking a node restores it, branches, deletion; the Qt model."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from PySide6.QtCore import Qt

from app.conversation.tree_snapshot import TreeSnapshot
from app.qt.models.conversation_tree import (
    ConversationTreeModel,
    HasCheckpointRole,
    IsActiveRole,
    NodeIdRole,
    OnActivePathRole,
)
from storage import checkpoint_rows, conversation_rows, node_rows
from storage.records import NodeSummary
from tests.ui.conftest import send, wait_idle


def _click_node(qtbot, window, node_id: int) -> None:
    view = window.tree_panel.view
    index = window.tree_model.index_of(node_id)
    view.scrollTo(index)
    qtbot.mouseClick(
        view.viewport(), Qt.MouseButton.LeftButton, pos=view.visualRect(index).center()
    )


def _edit_first_message(qtbot, window, text: str) -> None:
    qtbot.mouseClick(window.transcript.cards[0].edit_button, Qt.MouseButton.LeftButton)
    window.composer.edit.selectAll()
    qtbot.keyClicks(window.composer.edit, text)
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )
    wait_idle(qtbot, window)


def test_clicking_an_earlier_node_restores_from_checkpoints_and_sending_branches(
    qtbot, make_window, qtmodeltester
):
    window = make_window()
    send(qtbot, window, "first")
    first_reply = window.active_id
    send(qtbot, window, "second")
    _edit_first_message(
        qtbot, window, "first, edited"
    )  # the engine now holds the other branch
    assert window.active_id not in node_rows.get_path(window.db, first_reply)

    _click_node(qtbot, window, first_reply)
    # The transcript follows at once, before the background restore is done.
    assert window.active_id == first_reply
    assert window.transcript.cards[0].text == "first"
    assert window.transcript.cards[-1].node_id == first_reply
    wait_idle(qtbot, window)
    restore = window.status.restore_label.detail()
    assert restore.startswith("restored ") and "from checkpoints" in restore
    assert "0 reprocessed" in restore
    # In plain words on the bar itself.
    assert window.status.restore_label.text().startswith("Resumed instantly · ")

    send(qtbot, window, "a new branch")
    children = node_rows.get_children(window.db, first_reply)
    assert [c.text for c in children] == ["second", "a new branch"]
    # Two children: the reply is a fork, both branches are rows under it.
    fork = window.tree_model.index_of(first_reply)
    assert [window.tree_model.index_of(c.id).parent() for c in children] == [
        fork,
        fork,
    ]
    new_user = window.tree_model.index_of(children[1].id)
    assert new_user.data(OnActivePathRole) and not window.tree_model.index_of(
        children[0].id
    ).data(OnActivePathRole)
    assert window.tree_model.index_of(window.active_id).data(IsActiveRole)
    assert window.tree_model.index_of(window.active_id).data(HasCheckpointRole)
    assert window.tree_model.index_of(window.active_id, 2).data().startswith("✓")
    qtmodeltester.check(window.tree_model)


def test_delete_a_branch_from_the_tree_after_confirmation(
    qtbot, make_window, monkeypatch
):
    window = make_window()
    window.resize(1280, 800)  # wide enough that the tree panel stays shown
    send(qtbot, window, "keep me")
    kept_reply = window.active_id
    send(qtbot, window, "delete me")
    doomed_user = node_rows.get_children(window.db, kept_reply)[0].id

    asked: list[str] = []
    monkeypatch.setattr(
        "app.qt.views.chrome.main_window.confirm",
        lambda _p, _t, text, _a: asked.append(text) or False,
    )
    _click_node(qtbot, window, doomed_user)
    wait_idle(qtbot, window)
    qtbot.keyClick(window.tree_panel.view, Qt.Key.Key_Delete)
    wait_idle(qtbot, window)
    assert asked and "1 message below it" in asked[0]
    assert doomed_user in window.tree_model.snapshot  # cancelled: nothing deleted

    monkeypatch.setattr("app.qt.views.chrome.main_window.confirm", lambda *_: True)
    qtbot.mouseClick(window.tree_panel.delete_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert doomed_user not in window.tree_model.snapshot
    assert node_rows.get_children(window.db, kept_reply) == []
    assert window.active_id == kept_reply
    assert window.transcript.cards[-1].node_id == kept_reply


def test_close_and_reopen_continues_where_it_was(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "remember this")
    conversation, reply = window.conversation_id, window.active_id
    texts = [c.text for c in window.transcript.cards]
    window.close()
    assert not window.engine.busy

    again = make_window()
    assert again.conversation_id == conversation and again.active_id == reply
    assert [c.text for c in again.transcript.cards] == texts
    restore = again.status.restore_label.detail()
    assert restore.startswith("restored ") and "0 reprocessed" in restore

    send(qtbot, again, "and continue")
    path = node_rows.get_path(again.db, again.active_id)
    assert [n.id for n in path][:3] == [path[0].id, path[1].id, reply]
    assert path[3].text == "and continue"


def test_closing_during_generation_stops_cleanly_and_keeps_the_partial_reply(
    qtbot, make_window
):
    from dataclasses import replace

    from tests.ui.conftest import WAIT_MS, slow_down_generation

    window = make_window()
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=400)
    )
    slow_down_generation(window, 0.01)
    qtbot.keyClicks(window.composer.edit, "hi")
    with qtbot.waitSignal(window.engine.token_received, timeout=WAIT_MS):
        qtbot.keyClick(
            window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
        )
    conversation = window.conversation_id
    window.close()

    active = conversation_rows.get_conversation(window.db, conversation).active_node_id
    node = node_rows.get_node(window.db, active)
    assert node.role == "assistant" and node.status == "stopped" and node.text


# --- the model alone ------------------------------------------------------------


def _summary(
    node_id: int, parent: int | None, role: str, text: str = "x", size: int = 0
) -> NodeSummary:
    return NodeSummary(
        id=node_id,
        parent_id=parent,
        role=role,
        text=text,
        n_tokens=node_id * 3,
        status="complete",
        checkpoint_bytes=size,
        created_at=datetime.now(UTC),
    )


def test_tree_model_turns_snapshots_into_row_changes(qtbot, qtmodeltester):
    model = ConversationTreeModel()
    qtmodeltester.check(model)
    base = [
        _summary(1, None, "root", ""),
        _summary(2, 1, "user"),
        _summary(3, 2, "assistant"),
    ]
    model.set_snapshot(TreeSnapshot(7, base))
    model.set_active(3)
    qtmodeltester.check(model)

    grown = [
        *base,
        _summary(4, 1, "user", "sibling"),
        _summary(5, 4, "assistant", size=2048),
    ]
    with qtbot.waitSignals([model.rowsInserted, model.rowsInserted], order="strict"):
        model.set_snapshot(TreeSnapshot(7, grown))
    # Node 1 is a fork now: its two branches (2, 3 and 4, 5) are rows under it.
    assert model.index_of(2).parent() == model.index_of(4).parent() == model.index_of(1)
    assert model.rowCount(model.index_of(1)) == 4
    # A mark in the row; the size, in words, in the tooltip.
    assert model.index_of(5, 2).data() == "✓"
    assert "saved (2.0 kB)" in model.index_of(5).data(Qt.ItemDataRole.ToolTipRole)
    qtmodeltester.check(model)

    changed = [
        *base[:2],
        _summary(3, 2, "assistant", "longer now", size=10),
        *grown[3:],
    ]
    with qtbot.waitSignal(model.dataChanged):
        model.set_snapshot(TreeSnapshot(7, changed))
    assert model.index_of(3).data() == "Assistant: longer now"

    with qtbot.waitSignal(model.rowsRemoved):
        model.set_snapshot(TreeSnapshot(7, changed[:1] + changed[3:]))
    assert 2 not in model.snapshot and model.active_id is None
    assert model.index_of(2).isValid() is False
    qtmodeltester.check(model)

    with qtbot.waitSignal(model.modelReset):
        model.set_snapshot(TreeSnapshot(8, [_summary(9, None, "root", "Be brief.")]))
    assert model.index(0, 0).data(NodeIdRole) == 9
    assert model.index(0, 0).data() == "System prompt: Be brief."
    qtmodeltester.check(model)


def test_the_window_writes_behind_its_database_on_one_thread(
    qtbot, make_window, monkeypatch
):
    # Issue 24: one background writer per database, for the checkpoints of
    # the replies and the bookkeeping of a restore alike.
    writers: set[threading.Thread] = set()
    real = checkpoint_rows.save_checkpoint

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        writers.add(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoint_rows, "save_checkpoint", recording)
    window = make_window()
    send(qtbot, window, "first")
    first_reply = window.active_id
    send(qtbot, window, "second")
    _click_node(qtbot, window, first_reply)
    wait_idle(qtbot, window)
    assert (
        conversation_rows.get_conversation(
            window.db, window.conversation_id
        ).active_node_id
        == first_reply
    )
    assert [t.name for t in writers] == ["arbor-write-behind"]
    names = {t.name for t in threading.enumerate()}
    assert not names & {"arbor-checkpoint-writer", "arbor-deferred-writes"}
