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
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.repository import NodeRecord


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
