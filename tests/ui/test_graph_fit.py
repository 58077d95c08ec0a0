"""The graph view opens fitted: the whole tree when it can be read so, else
its whole width when that can, else the smallest readable zoom, scrolled to
the active node; labels at least 9 px high, a small tree never magnified, one
branch per column. Through the real window, at a normal size.
"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QFontInfo

from app.qt.views.tree import tree_graph
from app.qt.views.tree.tree_graph import TreeGraphView
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


def _label_px(graph: TreeGraphView) -> float:
    """How high a label's text is on screen, in pixels."""
    font_px = QFontInfo(graph._style.label_font).pixelSize()
    return font_px * graph.transform().m11()


def _check_fitted(graph: TreeGraphView, active_id: int) -> str:
    """Assert the opening zoom: every node in view, or the tree's width, or the
    readable minimum; labels readable, the active node in view. Returns which
    it was."""
    scale = graph.transform().m11()
    assert graph.transform().m22() == pytest.approx(scale)
    assert scale <= 1.0
    assert _label_px(graph) >= tree_graph.READABLE_LABEL_PX - 0.01
    visible = _visible(graph)
    assert visible.contains(_node_rect(graph, active_id))
    if all(visible.contains(_node_rect(graph, nid)) for nid in graph.node_ids()):
        return "whole tree"
    left = min(_node_rect(graph, nid).left() for nid in graph.node_ids())
    right = max(_node_rect(graph, nid).right() for nid in graph.node_ids())
    if visible.left() <= left and right <= visible.right():
        bar = graph.horizontalScrollBar()
        assert bar.maximum() <= bar.minimum()
        return "whole width"
    assert scale == pytest.approx(graph.readable_scale())
    # Centred, as far as the scene's edge allows.
    centre = graph.mapFromScene(_node_rect(graph, active_id).center())
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
    assert graph.readable_scale() <= scale <= 1.0
    assert _check_fitted(graph, chain[1]) == "whole tree"
    _screenshot(graph, "graph-chain")


def test_a_chain_too_tall_to_read_whole_opens_as_wide_as_the_view(qtbot, make_window):
    window = make_window()
    window.resize(*WINDOW_SIZE)
    chain = _grow(window, 40, branches=1)
    conversation_rows.set_active_node(window.db, chain[20])
    window.show_conversation(window.conversation_id)
    wait_idle(qtbot, window)
    graph = _show_graph(qtbot, window)
    # One column fits the panel's width at 100 %: no reason to shrink it
    # into unreadable text to show the whole height; it scrolls instead.
    assert _check_fitted(graph, chain[20]) == "whole width"
    assert graph.transform().m11() == pytest.approx(1.0)
    bar = graph.verticalScrollBar()
    assert bar.maximum() > bar.minimum()
