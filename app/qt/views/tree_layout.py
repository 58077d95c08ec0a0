"""Where the graph view puts each node, and the short labels it shows (Qt-free).

The layout is a "leaf slots" tidy tree, top-down:

* a node's ``depth`` (its distance from the root) is its row;
* leaves take consecutive column slots 0, 1, 2, ... in depth-first order,
  children oldest first (the order ``TreeSnapshot.children`` keeps);
* a parent sits centred over its first and last child.

Every subtree therefore owns a contiguous range of leaf slots, disjoint from
its siblings' ranges, and each node lies inside its own range. Two nodes at the
same depth are never ancestor and descendant, so their ranges are disjoint and
they stand at least one slot apart: no overlaps, without the contour merging of
Reingold-Tilford. A conversation is mostly one long chain with a few branches,
so the width this spends (one column per leaf) is the number of branches,
which is what a reader wants to see side by side anyway.

One pass over the nodes, iterative (a 1,000-message chain would overflow
Python's recursion limit): O(n) time and memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from app.text.plain_text import plain_text
from storage.values import Role


class Slot(NamedTuple):
    """A node's place: ``x`` in column slots (halves for parents), ``depth`` in rows."""

    x: float
    depth: int


def tidy_layout(
    children: Mapping[int | None, Sequence[int]], roots: Sequence[int]
) -> dict[int, Slot]:
    """Place every node reachable from ``roots``, their trees side by side.

    Parameters
    ----------
    children
        Child ids of each node, in display order (left to right). Nodes with
        no entry are leaves.
    roots
        The nodes at depth 0, left to right (a conversation's starts).

    Returns
    -------
    dict[int, Slot]
        Each node's column (``x``, in slots; leaves at 0, 1, 2, ...) and depth.
        Insertion order is depth-first post-order, which makes the result
        deterministic for a given ``children``.
    """
    slots: dict[int, Slot] = {}
    next_leaf = 0
    # (node, depth, children already placed?): a parent is visited twice, once
    # to push its children and once, after them, to centre itself.
    stack: list[tuple[int, int, bool]] = [(root, 0, False) for root in reversed(roots)]
    while stack:
        node, depth, placed = stack.pop()
        kids = children.get(node, ())
        if not kids:
            slots[node] = Slot(float(next_leaf), depth)
            next_leaf += 1
        elif placed:
            slots[node] = Slot((slots[kids[0]].x + slots[kids[-1]].x) / 2, depth)
        else:
            stack.append((node, depth, True))
            stack.extend((kid, depth + 1, False) for kid in reversed(kids))
    return slots


# --- labels ------------------------------------------------------------------

LABEL_CHARS = 24
TOOLTIP_CHARS = 320


def node_text(role: str, text: str, thinking: str = "") -> str:
    """What a node says, as plain text; a placeholder for an empty node."""
    plain = " ".join(plain_text(text).split())
    if plain:
        return plain
    if role == Role.ROOT:
        return "Conversation start"
    return "(thinking only)" if thinking else "(empty)"
