"""The tree's list is indented at forks only, not one level per message."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from PySide6.QtCore import QModelIndex

from app.conversation.tree_snapshot import TreeSnapshot
from app.qt.models.conversation_tree import ConversationTreeModel, NodeIdRole
from app.qt.views.tree.tree_panel import TreePanel
from storage.records import NodeSummary

ROLES = ("user", "assistant")


def _summary(node_id: int, parent: int | None) -> NodeSummary:
    role = "root" if parent is None else ROLES[node_id % 2]
    return NodeSummary(
        id=node_id,
        parent_id=parent,
        role=role,
        text=f"message {node_id}",
        n_tokens=node_id,
        status="complete",
        checkpoint_bytes=0,
        created_at=datetime.now(UTC),
    )


def _snapshot(parents: dict[int, int | None]) -> TreeSnapshot:
    """A snapshot of conversation 1 from ``{node: parent}`` (ids grow down)."""
    return TreeSnapshot(1, [_summary(n, parents[n]) for n in sorted(parents)])


def _chain(first: int, last: int, parent: int | None) -> dict[int, int | None]:
    """Nodes ``first``..``last``, each the only child of the one before."""
    return {n: (parent if n == first else n - 1) for n in range(first, last + 1)}


def _rows(model: ConversationTreeModel, parent: QModelIndex | None = None):
    """(depth, node id) of every row, in the order a view shows them."""
    parent = parent or QModelIndex()
    depth = 0
    up = parent
    while up.isValid():
        depth, up = depth + 1, up.parent()
    rows = []
    for row in range(model.rowCount(parent)):
        index = model.index(row, 0, parent)
        rows.append((depth, index.data(NodeIdRole)))
        rows.extend(_rows(model, index))
    return rows


def _expected(parents: dict[int, int | None]) -> list[tuple[int, int]]:
    """The rows the list should show: a level deeper only below a fork."""
    children: dict[int | None, list[int]] = {}
    for node in sorted(parents):
        children.setdefault(parents[node], []).append(node)
    rows: list[tuple[int, int]] = []

    def branch(node: int, depth: int) -> None:
        while True:
            rows.append((depth, node))
            below = children.get(node, [])
            # A start of several (one per system prompt) holds its rows too.
            nests = parents[node] is None and len(children[None]) > 1
            if len(below) != 1 or nests:
                for child in below:
                    branch(child, depth + 1)
                return
            node = below[0]

    for root in children.get(None, []):
        branch(root, 0)
    return rows


def test_a_linear_conversation_is_one_level(qtmodeltester):
    model = ConversationTreeModel()
    model.set_snapshot(_snapshot(_chain(1, 13, None)))
    assert model.rowCount() == 13
    assert _rows(model) == [(0, n) for n in range(1, 14)]
    assert not model.index_of(13).parent().isValid()
    qtmodeltester.check(model)


def test_a_growing_chain_stays_at_its_level(qtbot, qtmodeltester):
    model = ConversationTreeModel()
    parents = _chain(1, 3, None)
    model.set_snapshot(_snapshot(parents))
    qtmodeltester.check(model)
    for node in range(4, 10):
        parents[node] = node - 1
        with qtbot.waitSignal(model.rowsInserted) as inserted:
            model.set_snapshot(_snapshot(parents))
        # The new message is the next row of the top level.
        assert inserted.args[0] == QModelIndex()
        assert inserted.args[1:] == [node - 1, node - 1]
    assert _rows(model) == [(0, n) for n in range(1, 10)]


def test_only_the_branches_of_a_fork_go_one_level_deeper(qtbot, qtmodeltester):
    model = ConversationTreeModel()
    parents = _chain(1, 7, None)  # Start, then three turns
    model.set_snapshot(_snapshot(parents))
    model.set_active(7)
    qtmodeltester.check(model)

    # Message 3 gets a second child: the branch it had (4..7) moves under it,
    # the new one (8, 9) follows it there.
    parents |= {8: 3, 9: 8}
    with qtbot.waitSignals(
        [model.rowsMoved, model.rowsInserted, model.rowsInserted], order="strict"
    ):
        model.set_snapshot(_snapshot(parents))
    assert _rows(model) == [
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 4),
        (1, 5),
        (1, 6),
        (1, 7),
        (1, 8),
        (1, 9),
    ]
    assert model.index_of(7).parent() == model.index_of(3)
    assert model.index_of(9).parent() == model.index_of(3)
    # The active path's roles moved with its rows.
    assert model.index_of(7).data(NodeIdRole) == 7 and model.active_id == 7
    qtmodeltester.check(model)

    # A fork inside a branch: one level more, for its branches only.
    parents |= {10: 5, 11: 10, 12: 9}
    model.set_snapshot(_snapshot(parents))
    assert _rows(model) == _expected(parents)
    assert (2, 6) in _rows(model) and (2, 11) in _rows(model)
    assert (1, 12) in _rows(model)
    qtmodeltester.check(model)


def test_a_fork_left_with_one_branch_is_a_chain_again(qtbot, qtmodeltester):
    model = ConversationTreeModel()
    parents = _chain(1, 5, None) | {6: 3, 7: 6}
    model.set_snapshot(_snapshot(parents))
    assert _rows(model) == _expected(parents)
    qtmodeltester.check(model)

    # Deleting the second branch: its rows go, the first branch moves back up.
    del parents[6], parents[7]
    with qtbot.waitSignals([model.rowsRemoved, model.rowsMoved], order="strict"):
        model.set_snapshot(_snapshot(parents))
    assert _rows(model) == [(0, n) for n in range(1, 6)]
    qtmodeltester.check(model)

    # Deleting the first branch of a fork leaves the second one, moved up.
    parents |= {8: 3, 9: 8}
    model.set_snapshot(_snapshot(parents))
    for node in (4, 5):
        del parents[node]
    model.set_snapshot(_snapshot(parents))
    assert _rows(model) == [(0, 1), (0, 2), (0, 3), (0, 8), (0, 9)]
    qtmodeltester.check(model)


def test_any_growth_and_pruning_gives_the_rows_a_fresh_model_has(qtmodeltester):
    # Random trees, grown and pruned snapshot by snapshot: the rows always are
    # those a model built from the snapshot at once shows.
    chance = random.Random(22)
    model = ConversationTreeModel()
    qtmodeltester.check(model)
    parents: dict[int, int | None] = {1: None}
    next_id = 2
    for _step in range(60):
        for _new in range(chance.randint(1, 4)):
            # Mostly the newest message (a chain), sometimes an older one.
            newest = max(parents)
            parents[next_id] = (
                newest if chance.random() < 0.6 else chance.choice(sorted(parents))
            )
            next_id += 1
        # Now and then one or two branches are deleted at once.
        cuts = chance.choice([0, 0, 0, 1, 2])
        doomed = set(chance.sample(sorted(parents)[1:], min(cuts, len(parents) - 1)))
        for node in sorted(parents):
            if parents[node] in doomed:
                doomed.add(node)
        parents = {n: p for n, p in parents.items() if n not in doomed}
        model.set_snapshot(_snapshot(parents))
        assert _rows(model) == _expected(parents)
        fresh = ConversationTreeModel()
        fresh.set_snapshot(_snapshot(parents))
        assert _rows(fresh) == _rows(model)
        for node in parents:
            index = model.index_of(node)
            assert index.data(NodeIdRole) == node
            assert model.index(index.row(), 0, index.parent()) == index


def test_the_list_view_indents_forks_only_and_shows_every_branch(qtbot):
    model = ConversationTreeModel()
    panel = TreePanel(model)
    qtbot.addWidget(panel)
    panel.resize(320, 600)
    panel.show()
    parents = _chain(1, 3, None)
    model.set_snapshot(_snapshot(parents))
    # The conversation grows as in the window: a snapshot per message.
    for node, parent in [*_chain(4, 9, 3).items(), (10, 5), (11, 10)]:
        parents[node] = parent
        model.set_snapshot(_snapshot(parents))
    panel.show_active(11)
    view = panel.view

    def left(node: int) -> int:
        rect = view.visualRect(model.index_of(node))
        assert rect.isValid(), f"row {node} is not shown (collapsed?)"
        return rect.left()

    assert {left(n) for n in range(1, 6)} == {left(1)}
    # The fork's two branches, one level deeper, each at one level.
    assert {left(n) for n in (6, 7, 8, 9, 10, 11)} == {left(1) + view.indentation()}
    # In view order, the first branch then the second.
    tops = [view.visualRect(model.index_of(n)).top() for n in range(1, 12)]
    assert tops == sorted(tops)
    assert view.currentIndex() == model.index_of(11)


def test_each_start_holds_its_branch_once_there_are_two(qtbot, qtmodeltester):
    model = ConversationTreeModel()
    parents = _chain(1, 5, None)
    model.set_snapshot(_snapshot(parents))
    model.set_active(5)
    assert _rows(model) == [(0, n) for n in range(1, 6)]

    # A second start (a changed system prompt): both hold their rows.
    parents |= {6: None, 7: 6}
    model.set_snapshot(_snapshot(parents))
    assert _rows(model) == [(0, 1), *((1, n) for n in range(2, 6)), (0, 6), (1, 7)]
    assert model.index_of(5).parent() == model.index_of(1)
    qtmodeltester.check(model)

    # Growing a start's branch, and a fork in it, row by row.
    parents |= {8: 7, 9: 8, 10: 7}
    for node in (8, 9, 10):
        model.set_active(node)
        model.set_snapshot(_snapshot({n: p for n, p in parents.items() if n <= node}))
    assert _rows(model) == _expected(parents)
    assert model.index_of(7).parent() == model.index_of(6)
    qtmodeltester.check(model)

    # The second start deleted: one start, one level again.
    model.set_snapshot(_snapshot(_chain(1, 5, None)))
    assert _rows(model) == [(0, n) for n in range(1, 6)]
    qtmodeltester.check(model)


def test_a_conversation_opened_with_forks_shows_them_expanded(qtbot):
    model = ConversationTreeModel()
    panel = TreePanel(model)
    qtbot.addWidget(panel)
    panel.show()
    # Another conversation (a reset): a chain with no fork needs no expanding,
    # one with forks shows every branch open.
    flat = _chain(1, 6, None)
    model.set_snapshot(TreeSnapshot(2, [_summary(n, flat[n]) for n in sorted(flat)]))
    assert not model.has_nested_rows()
    forked = _chain(1, 5, None) | {6: 3, 7: 6, 8: 7, 9: 7}
    model.set_snapshot(_snapshot(forked))
    assert model.has_nested_rows()
    for fork in (3, 7):
        assert panel.view.isExpanded(model.index_of(fork))
