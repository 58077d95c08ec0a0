"""How a path of node spans folds into one context, and where a new span starts.

A chat template may render earlier turns differently once the conversation
goes on: Qwen3 and DeepSeek-R1 drop the reasoning of earlier replies, gpt-oss
drops their analysis channel and closes them with ``<|end|>`` instead of
``<|return|>``, Mistral moves the system prompt to the latest user turn. The
context for the next reply must be exactly what the template renders now, yet
decoding the whole conversation again would throw away the point of
checkpoints. So Arbor does what a prefix cache does, at message granularity:

- every node records the text its span stands for (``span_text``);
- the *held text* after a node is the text of the context once that node's
  span is decoded;
- a new span is placed after the deepest node on the path whose held text is
  still a prefix of what the template renders now (``fold``); its text is the
  rest of that rendering, the re-rendered turns included.

So a node starts at the end of its parent, or further up when the template
rewrote the turns in between; the context of a path is its *effective* nodes
(``effective``: those no later node started at or before), whose spans are
contiguous. Only the changed tail is decoded, and it is checkpointed like any
span, so the next visit restores it.

Placing the spans of a whole path (its first visit) folds once per node;
``Chain`` carries the effective nodes and their held text down the path, so
that each fold costs what the nodes it passes cost, not the path above them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from storage.records import NodeRecord


def effective(path: Sequence[NodeRecord]) -> list[NodeRecord]:
    """The nodes of ``path`` whose tokens the context holds, in order.

    A node is dropped when a later node of the path starts at or before its
    start (that node's span re-renders it). The result's spans are contiguous
    when the path is consistent (see ``is_consistent``).
    """
    kept: list[NodeRecord] = []
    for node in path:
        while kept and kept[-1].start_pos >= node.start_pos:
            kept.pop()
        kept.append(node)
    return kept


def is_consistent(path: Sequence[NodeRecord]) -> bool:
    """Whether the effective spans of ``path`` follow each other without gaps."""
    position = 0
    for node in effective(path):
        if node.start_pos != position:
            return False
        position = node.end_pos
    return True


def held_texts(nodes: Sequence[NodeRecord]) -> list[str | None]:
    """The context's text after each of the effective ``nodes``.

    None where a span's text is unknown (and so for every node below it).
    """
    texts: list[str | None] = []
    held: str | None = ""
    for node in nodes:
        held = None if held is None or node.span_text is None else held + node.span_text
        texts.append(held)
    return texts


def fold(nodes: Sequence[NodeRecord], target: str) -> tuple[int, str]:
    """Where a span that makes the context read ``target`` starts, and its text.

    ``nodes`` are a path's effective nodes. Returns ``(k, text)``: the new span
    follows ``nodes[k]`` (``k == -1``: it starts the context) and its text is
    what ``target`` adds to the held text after ``nodes[k]``.
    """
    texts = held_texts(nodes)
    for k in reversed(range(len(nodes))):
        held = texts[k]
        if held is not None and target.startswith(held):
            return k, target[len(held) :]
    return -1, target


class Chain:
    """The effective nodes of a path and the text held after them, kept as
    the path grows one node at a time.

    ``push`` a path's nodes in order; ``fold`` then answers like ``fold``
    over ``effective`` of the nodes pushed, without going over them again.
    The held texts are kept as one string (the held text after the deepest
    node whose text is known) and where each node's held text ends in it,
    so the memory is that of one context's text, not one per node.
    """

    def __init__(self, nodes: Iterable[NodeRecord] = ()) -> None:
        self.nodes: list[NodeRecord] = []
        # Where the held text after each of ``nodes`` ends in ``_text``; only
        # for the leading nodes whose texts are known (the rest are None).
        self._ends: list[int] = []
        self._text = ""
        for node in nodes:
            self.push(node)

    def push(self, node: NodeRecord) -> None:
        """Add the path's next node (it drops the nodes its span re-renders)."""
        nodes = self.nodes
        while nodes and nodes[-1].start_pos >= node.start_pos:
            nodes.pop()
        del self._ends[len(nodes) :]
        known = len(self._ends) == len(nodes)
        if known and node.span_text is not None:
            end = self._ends[-1] if self._ends else 0
            if len(self._text) != end:
                self._text = self._text[:end]
            self._text += node.span_text
            self._ends.append(len(self._text))
        nodes.append(node)

    def held(self, k: int) -> str | None:
        """The context's text after ``nodes[k]`` (None where a text is unknown)."""
        return self._text[: self._ends[k]] if k < len(self._ends) else None

    def fold(self, target: str, limit: int | None = None) -> tuple[int, str]:
        """``fold(nodes[:limit], target)`` over the effective nodes pushed.

        A held text is the one above it plus a span, so the nodes whose held
        text ``target`` starts with are the leading ones: a binary search
        finds the deepest.
        """
        known = len(self._ends) if limit is None else min(limit, len(self._ends))
        text = self._text
        if known and target.startswith(text[: self._ends[known - 1]]):
            k = known - 1
        else:
            # The deepest k with held(k) a prefix of target: held(lo) is one
            # (or lo == -1), held(hi) is not.
            lo, hi = -1, known - 1
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if target.startswith(text[: self._ends[mid]]):
                    lo = mid
                else:
                    hi = mid
            k = lo
        if k < 0:
            return -1, target
        return k, target[self._ends[k] :]
