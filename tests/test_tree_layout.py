"""The graph view's tidy-tree layout and labels (Qt-free)."""

from __future__ import annotations

import itertools
import random
import time
from collections import defaultdict

from app.qt.views.tree_layout import node_text, tidy_layout
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


def _depths(children: dict[int | None, list[int]], root: int) -> dict[int, int]:
    depths, pending = {root: 0}, [root]
    while pending:
        node = pending.pop()
        for kid in children.get(node, []):
            depths[kid] = depths[node] + 1
            pending.append(kid)
    return depths


def _check(children: dict[int | None, list[int]], root: int) -> None:
    slots = tidy_layout(children, [root])
    assert set(slots) == set(_depths(children, root))
    # depth is the row
    assert {n: s.depth for n, s in slots.items()} == _depths(children, root)
    # parents centred over their first and last child
    for parent, kids in children.items():
        if parent is not None and kids:
            centre = (slots[kids[0]].x + slots[kids[-1]].x) / 2
            assert slots[parent].x == centre
            # children keep their order left to right
            xs = [slots[k].x for k in kids]
            assert xs == sorted(xs) and len(set(xs)) == len(xs)
    # no two nodes of a row closer than one slot
    rows: dict[int, list[float]] = defaultdict(list)
    for slot in slots.values():
        rows[slot.depth].append(slot.x)
    for xs in rows.values():
        xs.sort()
        assert all(b - a >= 1 for a, b in itertools.pairwise(xs))


def test_a_chain_is_one_column():
    children = {None: [1], 1: [2], 2: [3]}
    assert tidy_layout(children, [1]) == {3: (0.0, 2), 2: (0.0, 1), 1: (0.0, 0)}


def test_a_branch_puts_siblings_side_by_side_under_a_centred_parent():
    #        1
    #        2
    #     3     6
    #    4 5    7
    children = {1: [2], 2: [3, 6], 3: [4, 5], 6: [7]}
    slots = tidy_layout(children, [1])
    assert slots[4].x == 0 and slots[5].x == 1 and slots[7].x == 2
    assert slots[3].x == 0.5 and slots[6].x == 2
    assert slots[2].x == 1.25 and slots[1].x == 1.25
    _check(children, 1)


def test_random_trees_lay_out_without_overlaps():
    for seed in range(20):
        _check(_random_tree(120, seed), 0)


def test_layout_is_deterministic():
    children = _random_tree(300, 7)
    first = tidy_layout(children, [0])
    assert list(first.items()) == list(tidy_layout(children, [0]).items())


def test_a_deep_chain_does_not_hit_the_recursion_limit():
    children = {n: [n + 1] for n in range(5000)}
    assert tidy_layout(children, [0])[5000] == (0.0, 5000)


def test_500_nodes_lay_out_fast():
    children = _random_tree(500, 1)
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        slots = tidy_layout(children, [0])
        runs.append((time.perf_counter() - started) * 1000)
    assert len(slots) == 500
    print(f"\ntidy_layout, 500 nodes: best {min(runs):.2f} ms, first {runs[0]:.2f} ms")
    assert runs[0] < 50


def test_labels_are_one_line_of_plain_words():
    text = "# Title\n\n**Bold** and `code` and _it_\n```python\nx = 1\n```\n- item"
    assert node_text("user", text) == "Title Bold and code and it x = 1 item"
    assert node_text("user", "| a | b |\n|---|---|") == "a b"


def test_labels_are_short_and_never_empty():
    assert shorten("abcdefghij", 5) == "abcd…"
    assert shorten("abc", 5) == "abc"
    assert node_text("root", "") == "Conversation start"
    assert node_text("assistant", "", thinking="hmm") == "(thinking only)"
    assert node_text("user", "   ") == "(empty)"
