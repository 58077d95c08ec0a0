"""The graph view's layout (one branch per column, one node per row) and
labels (Qt-free)."""

from __future__ import annotations

import random
import time

from app.qt.views.tree.tree_layout import branch_layout, node_text
from app.text.plain_text import shorten


def _random_tree(n: int, seed: int) -> dict[int | None, list[int]]:
    """A chat-like tree: mostly chains, now and then a branch from an earlier node."""
    rng = random.Random(seed)
    children: dict[int | None, list[int]] = {None: [0]}
    tip = 0
    for node in range(1, n):
        parent = tip if rng.random() < 0.8 else rng.randrange(node)
        children.setdefault(parent, []).append(node)
        tip = node
    return children


def _preorder(children: dict[int | None, list[int]], roots: list[int]) -> list[int]:
    order, pending = [], list(reversed(roots))
    while pending:
        node = pending.pop()
        order.append(node)
        pending.extend(reversed(children.get(node, [])))
    return order


def _check(children: dict[int | None, list[int]], roots: list[int]) -> None:
    slots = branch_layout(children, roots)
    order = _preorder(children, roots)
    # One node per row, rows in depth-first order (the list's order).
    assert [slots[n].depth for n in order] == list(range(len(order)))
    assert list(slots) == order
    parents = {kid: p for p, kids in children.items() for kid in kids}
    cells = {}
    for parent, kids in children.items():
        if parent is None or not kids:
            continue
        # A chain goes straight down its column; every other branch has
        # a column of its own, not its fork's.
        assert slots[kids[0]].x == slots[parent].x
        for kid in kids[1:]:
            assert slots[kid].x != slots[parent].x
    for node in order:
        cells.setdefault(slots[node].x, []).append(slots[node].depth)
    # A branch's edge runs down its column from the row under its fork to
    # its first message: nothing else stands there.
    for kid, parent in parents.items():
        if parent is None or slots[kid].x == slots[parent].x:
            continue
        between = range(slots[parent].depth + 1, slots[kid].depth)
        assert not set(between) & set(cells[slots[kid].x])


def test_a_chain_is_one_column():
    children = {None: [1], 1: [2], 2: [3]}
    assert branch_layout(children, [1]) == {1: (0.0, 0), 2: (0.0, 1), 3: (0.0, 2)}


def test_an_edited_first_message_puts_each_branch_in_a_column_and_rows_of_its_own():
    # The user's case: the first message edited, each version answered.
    #   1
    #   2        first version       column 0
    #   3
    #     4      second version      column 1, below the first branch
    #     5
    children = {1: [2, 4], 2: [3], 4: [5]}
    slots = branch_layout(children, [1])
    assert slots == {1: (0, 0), 2: (0, 1), 3: (0, 2), 4: (1, 3), 5: (1, 4)}
    _check(children, [1])


def test_a_column_is_taken_again_once_its_branch_has_ended_above_the_fork():
    #   1 ─┐         rows 0-2: the first branch (1-3), column 0
    #   2  │
    #   3  │
    #      4         rows 3-6: the second branch (4-7), column 1; node 6
    #      5         forks, and column 0 is free below row 2, so its second
    #      6 ─┐      branch (8) goes there rather than to a third column
    #      7  │
    #   8 ────┘
    children = {1: [2, 4], 2: [3], 4: [5], 5: [6], 6: [7, 8]}
    slots = branch_layout(children, [1])
    assert slots[4].x == 1 and slots[6].x == 1 and slots[7].x == 1
    assert slots[8].x == 0  # column 0 ended at row 2, above the fork at 6
    _check(children, [1])


def test_starts_stack_in_the_first_column():
    children = {None: [1, 4], 1: [2, 3], 4: [5]}
    slots = branch_layout(children, [1, 4])
    assert slots[4] == (0, 3) and slots[5] == (0, 4)
    _check(children, [1, 4])


def test_random_trees_lay_out_without_overlaps():
    for seed in range(20):
        _check(_random_tree(120, seed), [0])


def test_layout_is_deterministic():
    children = _random_tree(300, 7)
    first = branch_layout(children, [0])
    assert list(first.items()) == list(branch_layout(children, [0]).items())


def test_a_deep_chain_does_not_hit_the_recursion_limit():
    children = {n: [n + 1] for n in range(5000)}
    assert branch_layout(children, [0])[5000] == (0.0, 5000)


def test_500_nodes_lay_out_fast():
    children = _random_tree(500, 1)
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        slots = branch_layout(children, [0])
        runs.append((time.perf_counter() - started) * 1000)
    assert len(slots) == 500
    columns = 1 + max(slot.x for slot in slots.values())
    print(
        f"\nbranch_layout, 500 nodes: best {min(runs):.2f} ms, "
        f"first {runs[0]:.2f} ms, {columns:.0f} columns"
    )
    assert runs[0] < 50


def test_labels_are_one_line_of_plain_words():
    text = "# Title\n\n**Bold** and `code` and _it_\n```python\nx = 1\n```\n- item"
    assert node_text("user", text) == "Title Bold and code and it x = 1 item"
    assert node_text("user", "| a | b |\n|---|---|") == "a b"


def test_labels_are_short_and_never_empty():
    assert shorten("abcdefghij", 5) == "abcd…"
    assert shorten("abc", 5) == "abc"
    assert node_text("root", "") == "Start"
    assert node_text("assistant", "", thinking="hmm") == "(thinking only)"
    assert node_text("user", "   ") == "(empty)"
