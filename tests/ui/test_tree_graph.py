"""The tree panel's graph view, through the real window: shows the snapshot,
clicks and keys switch nodes, a 500-node tree builds fast and stays clickable."""

from __future__ import annotations

import random
import time

from PySide6.QtCore import Qt

from app.qt.views.tree.tree_graph import TreeGraphView, node_tooltip
from storage import node_rows
from tests.ui.conftest import send, wait_idle


def _graph(qtbot, window) -> TreeGraphView:
    panel = window.tree_panel
    with qtbot.waitSignal(panel.mode_changed) as changed:
        qtbot.mouseClick(panel.graph_button, Qt.MouseButton.LeftButton)
    assert changed.args == ["graph"]
    assert panel.mode == "graph" and panel.stack.currentWidget() is panel.graph
    return panel.graph


def _click_node(qtbot, graph: TreeGraphView, node_id: int) -> None:
    qtbot.mouseClick(
        graph.viewport(), Qt.MouseButton.LeftButton, pos=graph.node_point(node_id)
    )


def test_graph_shows_the_tree_and_a_click_or_keys_switch_nodes(
    qtbot, make_window, monkeypatch
):
    window = make_window()
    send(qtbot, window, "first")
    first_reply = window.active_id
    send(qtbot, window, "second")
    graph = _graph(qtbot, window)
    snapshot = window.tree_model.snapshot
    assert graph.node_ids() == set(snapshot.nodes)
    assert graph.active_id == window.active_id
    rebuilds = graph.rebuilds

    first_user = snapshot.nodes[first_reply].parent_id
    assert first_user is not None
    _click_node(qtbot, graph, first_user)
    assert window.active_id == first_user  # the window follows at once
    assert graph.active_id == first_user and graph.cursor_id == first_user
    wait_idle(qtbot, window)
    assert window.transcript.cards[-1].node_id == first_user
    assert graph.rebuilds == rebuilds  # a new active node only restyles

    # Down goes towards the newest child, Up to the parent; Enter switches.
    graph.setFocus()
    qtbot.keyClick(graph, Qt.Key.Key_Down)
    assert graph.cursor_id == first_reply and window.active_id == first_user
    qtbot.keyClick(graph, Qt.Key.Key_Up)
    qtbot.keyClick(graph, Qt.Key.Key_Up)
    assert graph.cursor_id == snapshot.root_id
    qtbot.keyClick(graph, Qt.Key.Key_Down)
    assert graph.cursor_id == first_user  # the child on the active path
    qtbot.keyClick(graph, Qt.Key.Key_Up)
    qtbot.keyClick(graph, Qt.Key.Key_Return)
    assert window.active_id == snapshot.root_id
    wait_idle(qtbot, window)

    # Sending from the root adds a branch: the graph rebuilds and shows it.
    send(qtbot, window, "another branch")
    qtbot.waitUntil(lambda: graph.node_ids() == set(window.tree_model.snapshot.nodes))
    assert graph.active_id == window.active_id
    assert graph.rebuilds > rebuilds
    root_children = window.tree_model.snapshot.children[snapshot.root_id]
    assert len(root_children) == 2

    # Left/Right walk the siblings; Del asks the window to delete (not the root).
    graph.setFocus()
    qtbot.keyClick(graph, Qt.Key.Key_Up)
    assert graph.cursor_id == root_children[1]
    qtbot.keyClick(graph, Qt.Key.Key_Left)
    assert graph.cursor_id == root_children[0]
    qtbot.keyClick(graph, Qt.Key.Key_Left)
    assert graph.cursor_id == root_children[0]  # no wrap-around
    asked: list[str] = []
    monkeypatch.setattr(
        "app.qt.views.chrome.main_window.confirm",
        lambda _p, _t, text, _a: asked.append(text) or False,
    )
    qtbot.keyClick(graph, Qt.Key.Key_Delete)
    assert asked and "3 messages below it" in asked[0]
    qtbot.keyClick(graph, Qt.Key.Key_Up)
    qtbot.keyClick(graph, Qt.Key.Key_Delete)
    assert len(asked) == 1  # the root cannot be deleted

    # Switching back to the list keeps the window's view of things.
    qtbot.mouseClick(window.tree_panel.list_button, Qt.MouseButton.LeftButton)
    assert window.tree_panel.mode == "list"
    assert window.tree_panel.selected_node() == window.active_id


def test_graph_tooltip_names_role_tokens_and_checkpoint(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "**hello** `there`")
    _graph(qtbot, window)
    user = window.tree_model.snapshot.nodes[window.active_id].parent_id
    node = window.tree_model.snapshot.nodes[user]
    tip = node_tooltip(node)
    assert "<b>You</b>" in tip and "hello there" in tip and "**" not in tip
    assert f"{node.n_tokens:,} tokens" in tip
    reply = window.tree_model.snapshot.nodes[window.active_id]
    assert reply.checkpoint_bytes > 0 and "checkpoint " in node_tooltip(reply)


def _grow_tree(window, count: int, seed: int = 5) -> list[int]:
    """Add messages under the window's conversation until it has ``count`` nodes:
    chains of a few turns that branch from earlier messages."""
    rng = random.Random(seed)
    snapshot = window.tree_model.snapshot
    root = snapshot.root_id
    ids = [*snapshot.nodes]  # parents before children
    roles = {nid: snapshot.nodes[nid].role for nid in ids}
    depth = {root: 0}
    for nid in ids[1:]:
        depth[nid] = depth[snapshot.nodes[nid].parent_id] + 1
    while len(ids) < count:
        parent = rng.choice([n for n in ids[-60:] if depth[n] < 24] or [root])
        for _ in range(rng.randint(1, 6)):
            if len(ids) >= count:
                break
            role = "assistant" if roles[parent] == "user" else "user"
            text = f"**{role}** message {len(ids)}: " + "words " * rng.randint(1, 12)
            node = node_rows.add_node(window.db, parent, role, text)
            roles[node.id], depth[node.id] = role, depth[parent] + 1
            ids.append(node.id)
            parent = node.id
    return ids


def test_a_500_node_tree_builds_fast_and_a_deep_click_activates(qtbot, make_window):
    window = make_window()
    graph = _graph(qtbot, window)
    ids = _grow_tree(window, 500)
    window.show_conversation(window.conversation_id)
    snapshot = window.tree_model.snapshot
    assert len(snapshot.nodes) == 500
    assert graph.node_ids() == set(snapshot.nodes)
    graph.fit()
    started = time.perf_counter()
    graph.viewport().repaint()
    paint_ms = (time.perf_counter() - started) * 1000
    print(
        f"\ngraph, 500 nodes: layout {graph.layout_ms:.1f} ms, "
        f"scene build {graph.build_ms:.1f} ms, full repaint (fit) {paint_ms:.1f} ms"
    )
    assert graph.layout_ms + graph.build_ms < 1000
    wait_idle(qtbot, window)

    deepest = max(ids, key=lambda n: len(snapshot.path(n)))
    assert len(snapshot.path(deepest)) > 10
    graph.resetTransform()
    _click_node(qtbot, graph, deepest)
    assert window.active_id == deepest and graph.active_id == deepest
    wait_idle(qtbot, window)
    assert window.transcript.cards[-1].node_id == deepest


def test_the_list_or_graph_choice_is_remembered(qtbot, make_window):
    window = make_window()
    assert window.tree_panel.mode == "list"
    qtbot.mouseClick(window.tree_panel.graph_button, Qt.MouseButton.LeftButton)
    assert window.tree_panel.mode == "graph"
    window.close()

    reopened = make_window()
    assert reopened.tree_panel.mode == "graph"
    assert reopened.tree_panel.stack.currentWidget() is reopened.tree_panel.graph
