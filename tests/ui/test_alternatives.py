"""Regenerate N times in the window: N replies stream side by side, then siblings."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from PySide6.QtCore import QObject, Qt, Slot
from PySide6.QtWidgets import QApplication

from app import jobs
from app.qt.views.transcript.alternatives import AlternativesRow
from app.qt.views.tree.tree_panel import GRAPH_MODE, LIST_MODE
from app.window.actions import TIMES
from storage import conversation_rows, node_rows
from tests.ui.conftest import WAIT_MS, send, wait_idle


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


class _AlternativeDelay(QObject):
    """Sleeps on every piece of an alternative, on the engine thread (a slot
    of that thread's object: see ``tests.ui.conftest._TokenDelay``)."""

    @Slot(int, str)
    def wait(self, _index: int, _piece: str) -> None:
        time.sleep(0.02)


@pytest.mark.parametrize(
    "where", ["composer", "tree", "graph", "list", "filter", "transcript"]
)
def test_escape_stops_alternatives_wherever_the_focus_is(qtbot, make_window, where):
    window = make_window()
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=8)
    )
    send(qtbot, window, "Hello")
    window.prefs = replace(
        window.prefs,
        sampling=replace(window.prefs.sampling, max_tokens=2000, temperature=0.9),
    )
    worker = window.engine.worker
    delay = _AlternativeDelay()
    delay.moveToThread(worker.thread())
    window.test_token_delays = [delay]  # kept as long as the window
    worker.alternative_received.connect(delay.wait, Qt.ConnectionType.DirectConnection)
    if where == "graph":
        window.tree_panel.set_mode(GRAPH_MODE)
    target = {
        "composer": window.composer.edit,
        "tree": window.tree_panel.view,
        "graph": window.tree_panel.graph,
        "list": window.sidebar.list_view,
        "filter": window.sidebar.filter_edit,
        "transcript": window.transcript.cards[0].body,
    }[where]
    menu = window.transcript.cards[-1].regenerate_button.menu()
    with qtbot.waitSignal(window.engine.alternative_received, timeout=WAIT_MS):
        menu.actions()[1].trigger()
    target.setFocus()
    assert QApplication.focusWidget() is target
    qtbot.keyClick(target, Qt.Key.Key_Escape)
    # Stopped at once, long before 2,000 tokens each.
    qtbot.waitUntil(lambda: not window.generating, timeout=5_000)
    wait_idle(qtbot, window)
    choices = window.transcript.choices
    assert choices is not None
    assert all(len(card.text) < 2_000 for card in choices.cards)
    window.tree_panel.set_mode(LIST_MODE)
