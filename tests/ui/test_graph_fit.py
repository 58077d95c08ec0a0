"""The graph view opens fitted: the whole tree when it can be read so, else the
active node's neighbourhood at the smallest readable zoom, centred on it; a
small tree is never magnified. Through the real window, at a normal size.
"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QRectF, Qt

from app.qt.views import tree_graph
from app.qt.views.tree_graph import TreeGraphView
from storage import conversation_rows, node_rows
from tests.ui.conftest import wait_idle

WINDOW_SIZE = (1280, 800)


def _grow(window, count: int, branches: int) -> list[int]:
    """Give the shown conversation ``count`` nodes: ``branches`` chains of
    alternating turns under the root, round-robin; the last one added is
    active."""
    db = window.db
    snapshot = window.tree_model.snapshot
    root = snapshot.root_id
    tips = [root] * branches
    ids = list(snapshot.nodes)
    roles = {root: "root"}
    while len(ids) < count:
        branch = len(ids) % branches
        parent = tips[branch]
        role = "assistant" if roles[parent] == "user" else "user"
        node = node_rows.add_node(db, parent, role, f"{role} message {len(ids)}")
        roles[node.id] = role
        tips[branch] = node.id
        ids.append(node.id)
    conversation_rows.set_active_node(db, ids[-1])
    return ids


def _show_graph(qtbot, window) -> TreeGraphView:
    panel = window.tree_panel
    if panel.mode != "graph":
        qtbot.mouseClick(panel.graph_button, Qt.MouseButton.LeftButton)
    assert panel.mode == "graph"
    return panel.graph


def _visible(graph: TreeGraphView) -> QRectF:
    return graph.mapToScene(graph.viewport().rect()).boundingRect()


def _node_rect(graph: TreeGraphView, node_id: int) -> QRectF:
    return graph._items[node_id].sceneBoundingRect()


def _check_fitted(graph: TreeGraphView, active_id: int) -> str:
    """Assert the opening zoom: every node in view, or the readable minimum
    centred on the active node. Returns which it was."""
    scale = graph.transform().m11()
    assert graph.transform().m22() == pytest.approx(scale)
    assert scale <= 1.0
    visible = _visible(graph)
    if all(visible.contains(_node_rect(graph, nid)) for nid in graph.node_ids()):
        return "whole tree"
    assert scale == pytest.approx(tree_graph.READABLE_SCALE)
    active = _node_rect(graph, active_id)
    assert visible.contains(active)
    # Centred, as far as the scene's edge allows.
    centre = graph.mapFromScene(active.center())
    middle = graph.viewport().rect().center()
    assert abs(centre.x() - middle.x()) <= graph.viewport().width() / 4
    return "readable minimum"


def _screenshot(graph: TreeGraphView, name: str) -> None:
    """Save the window as NAME.png in $ARBOR_TEST_SCREENSHOTS, when set: to
    look at what the test checks."""
    folder = os.environ.get("ARBOR_TEST_SCREENSHOTS")
    if folder:
        graph.window().grab().save(os.path.join(folder, f"{name}.png"))


def test_a_big_tree_opens_readable_around_the_active_node(qtbot, make_window):
    window = make_window()
    window.resize(*WINDOW_SIZE)
    ids = _grow(window, 40, branches=6)
    window.show_conversation(window.conversation_id)
    wait_idle(qtbot, window)
    # Switched to the graph: fitted.
    graph = _show_graph(qtbot, window)
    assert graph.node_ids() == set(ids)
    assert graph.active_id == ids[-1]
    assert graph.transform().m11() < 1.0  # 40 nodes do not fit a panel at 100 %
    assert _check_fitted(graph, ids[-1]) == "readable minimum"
    _screenshot(graph, "graph-40")
    # Zoomed in by hand, then the list and back: fitted again.
    graph.zoom(2.0)
    qtbot.mouseClick(window.tree_panel.list_button, Qt.MouseButton.LeftButton)
    graph = _show_graph(qtbot, window)
    assert _check_fitted(graph, ids[-1]) == "readable minimum"


def test_opening_a_conversation_in_the_graph_fits_it(qtbot, make_window):
    window = make_window()
    window.resize(*WINDOW_SIZE)
    graph = _show_graph(qtbot, window)
    # A chain of 16 messages: too tall for the panel at 100 %, readable smaller.
    first = window.conversation_id
    chain = _grow(window, 16, branches=1)
    # Active near the top: a short transcript beside the tall tree. (A long
    # one, under Arbor's style sheet, draws its cards' icons at a negative
    # height: Qt warns, and the warning would fail this test.)
    conversation_rows.set_active_node(window.db, chain[1])
    window.show_conversation(first)  # read again: it is not an unused one now
    wait_idle(qtbot, window)
    other, root = conversation_rows.create_conversation(window.db, "Three", None)
    question = node_rows.add_node(window.db, root.id, "user", "Hello?")
    answer = node_rows.add_node(window.db, question.id, "assistant", "Hello.")
    three = [root.id, question.id, answer.id]
    conversation_rows.set_active_node(window.db, answer.id)

    # Three nodes: in view, and not magnified beyond 100 %.
    graph.zoom(0.5)
    window.show_conversation(other.id)
    wait_idle(qtbot, window)
    assert graph.node_ids() == set(three)
    assert graph.transform().m11() == pytest.approx(1.0)
    assert _check_fitted(graph, answer.id) == "whole tree"
    _screenshot(graph, "graph-3")

    window.show_conversation(first)
    wait_idle(qtbot, window)
    assert graph.node_ids() == set(chain)
    scale = graph.transform().m11()
    assert scale < 1.0
    assert scale > tree_graph.READABLE_SCALE
    assert _check_fitted(graph, chain[1]) == "whole tree"
    _screenshot(graph, "graph-chain")
