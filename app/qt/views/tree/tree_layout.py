"""Where the graph view puts each node, and the short labels it shows (Qt-free).

The layout is "one branch per column", as ``git log --graph`` draws history:

* rows are the nodes in depth-first order, children oldest first (the order
  ``TreeSnapshot.children`` keeps and the list shows), one node per row: a
  second branch's messages come below the first branch's, never beside them
  on its rows, where a reader took them for one another's neighbours;
* a node's first child continues its column (a chain is a straight line);
  every other child opens a branch in a column of its own, the leftmost one
  free from the row below the fork down: its edge leaves the fork in the gap
  under it and runs down that column, which holds nothing else until the
  branch's first message, so no edge crosses a box;
* a column is free again once its branch has ended above the fork, so the
  width is the number of branches open at once, not the number of leaves.

The rows follow depth-first order, so each branch owns a contiguous run of
rows and two nodes never share one; a column is taken only where no other
branch is open in it, so two nodes never share a cell either.

One pass over the nodes, iterative (a 1,000-message chain would overflow
Python's recursion limit): O(n * columns) time, O(n) memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from app.text.plain_text import plain_text
from storage.values import Role


class Slot(NamedTuple):
    """A node's place: its ``column`` and its ``row``, both counted from 0."""

    x: float
    depth: int


def branch_layout(
    children: Mapping[int | None, Sequence[int]], roots: Sequence[int]
) -> dict[int, Slot]:
    """Place every node reachable from ``roots``, one branch per column.

    Parameters
    ----------
    children
        Child ids of each node, oldest first. Nodes with no entry are leaves.
    roots
        The conversation's starts, top to bottom (each starts in the first
        column, below the tree of the one before).

    Returns
    -------
    dict[int, Slot]
        Each node's column (``x``) and row (``depth``, its place in
        depth-first order). Insertion order is the rows' order.
    """
    slots: dict[int, Slot] = {}
    # The last row taken in each column so far.
    column_ends: list[int] = []
    # (node, the row of its parent, its parent's column, the first child?);
    # a start has no parent: any column ending above it will do.
    stack: list[tuple[int, int | None, int, bool]] = [
        (root, None, 0, False) for root in reversed(roots)
    ]
    row = 0
    while stack:
        node, parent_row, parent_column, first = stack.pop()
        if first:
            column = parent_column
        else:
            # Free from the row under the fork: nothing in it below the fork.
            above = row - 1 if parent_row is None else parent_row
            column = next(
                (c for c, end in enumerate(column_ends) if end <= above),
                len(column_ends),
            )
            if column == len(column_ends):
                column_ends.append(row)
        column_ends[column] = row
        slots[node] = Slot(float(column), row)
        kids = children.get(node, ())
        stack.extend(
            (kid, row, column, index == 0)
            for index, kid in reversed(list(enumerate(kids)))
        )
        row += 1
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
        return "Start"  # as the list says it; "Conversation start" was cut off
    return "(thinking only)" if thinking else "(empty)"
