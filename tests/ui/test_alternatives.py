"""Regenerate N times in the window: N replies stream side by side, then siblings."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt

from app.qt.views.alternatives import AlternativesRow
from app.window import jobs
from app.window.actions import TIMES
from storage import conversation_rows, node_rows
from tests.ui.conftest import send, wait_idle


def test_regenerate_x3_streams_side_by_side_and_adds_three_siblings(qtbot, make_window):
    window = make_window()
    window.prefs = replace(
        window.prefs,
        sampling=replace(window.prefs.sampling, temperature=0.9, seed=5, max_tokens=24),
    )
    send(qtbot, window, "Pick a colour.")
    first = window.active_id
    card = window.transcript.cards[-1]
    menu = card.regenerate_button.menu()
    assert [a.text() for a in menu.actions()] == [
        f"Regenerate {TIMES}{n} (side by side)" for n in (2, 3, 4)
    ]
    rows: list[tuple[int, int]] = []  # (cards in the row, alternative index)

    def seen(index: int, _piece: str) -> None:
        row = window.transcript.alternatives
        assert isinstance(row, AlternativesRow)
        rows.append((len(row.cards), index))

    window.engine.alternative_received.connect(seen)
    menu.actions()[1].trigger()
    assert window.generating
    wait_idle(qtbot, window)

    assert {count for count, _index in rows} == {3}
    assert {index for _count, index in rows} == {0, 1, 2}
    assert window.transcript.alternatives is None  # the row is gone
    parent = node_rows.get_node(window.db, first).parent_id
    siblings = node_rows.get_children(window.db, parent)
    assert len(siblings) == 4 and siblings[0].id == first
    new = [s.id for s in siblings[1:]]
    assert len({s.text for s in siblings[1:]}) == 3
    assert window.active_id == new[0]
    # Where the conversation reopens: the one shown, though the last was added last.
    conversation = conversation_rows.get_conversation(window.db, window.conversation_id)
    assert conversation.active_node_id == new[0]
    # The three stay side by side, to keep one; going on keeps the first.
    choices = window.transcript.choices
    assert choices is not None and choices.isVisible()
    assert [c.text for c in choices.cards] == [s.text for s in siblings[1:]]
    assert not window.transcript.cards[-1].isVisible()
    qtbot.mouseClick(choices.buttons[2], Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert window.transcript.choices is None and window.active_id == new[2]
    assert window.transcript.cards[-1].text == siblings[3].text
    window.activate(new[0])
    wait_idle(qtbot, window)
    last = window.transcript.cards[-1]
    assert last.node_id == new[0] and last.sibling_label.text() == "2/4"

    # Each alternative is one click away and restores without reprocessing.
    results = []
    window.engine.finished.connect(results.append)
    for position, node in enumerate(new[1:], start=3):
        qtbot.mouseClick(
            window.transcript.cards[-1].next_button, Qt.MouseButton.LeftButton
        )
        wait_idle(qtbot, window)
        assert window.active_id == node
        card = window.transcript.cards[-1]
        assert card.sibling_label.text() == f"{position}/4"
        assert card.text == node_rows.get_node(window.db, node).text
    restores = [r for r in results if isinstance(r.job, jobs.Restore)]
    assert len(restores) == 2
    assert all(r.sync.reprocessed_tokens == 0 for r in restores)


def test_conversation_menu_regenerates_the_last_reply_x3(qtbot, make_window):
    window = make_window()
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=8)
    )
    send(qtbot, window, "Hello")
    first = window.active_id
    assert window.alternatives_action.shortcut().toString() == "Ctrl+Shift+R"
    window.alternatives_action.trigger()
    wait_idle(qtbot, window)
    parent = node_rows.get_node(window.db, first).parent_id
    assert len(node_rows.get_children(window.db, parent)) == 4
    assert window.transcript.cards[-1].sibling_label.text() == "2/4"
