"""A reply being generated, as far as it has streamed: to show it again.

While a reply streams the user may read another conversation or another
branch; the transcript then shows that instead. What the engine streamed is
kept here, so that coming back shows the reply as far as it got, and it goes
on streaming from there. Qt-free: the presenter owns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


class StreamView(Protocol):
    """Where a reply streams to (the window's transcript)."""

    def begin_reply(self, prefix_id: int, pending_text: str | None, n: int) -> None:
        """Room for the reply (or ``n`` of them) after the path to ``prefix_id``."""

    def append_stream(self, piece: str) -> None:
        """A piece of the reply's answer."""

    def append_thinking(self, piece: str) -> None:
        """A piece of the reply's reasoning."""

    def append_alternative(self, index: int, piece: str) -> None:
        """A piece of alternative ``index``'s answer."""


@dataclass
class ReplyStream:
    """One generation: where it goes and what it has streamed.

    ``prefix_id`` is the node the reply follows (the user's message for a
    reply, the parent of a message being edited or sent); ``pending_text`` the
    user's text not yet in the tree when it began; ``n`` how many replies
    stream side by side (0: one).
    """

    conversation_id: int
    prefix_id: int
    pending_text: str | None
    n: int
    answer: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    alternatives: dict[int, list[str]] = field(default_factory=dict)

    @property
    def pieces(self) -> int:
        """How many pieces of answer have streamed (all replies together)."""
        return len(self.answer) + sum(map(len, self.alternatives.values()))

    def add_answer(self, piece: str) -> None:
        """Keep a piece of the answer."""
        self.answer.append(piece)

    def add_thinking(self, piece: str) -> None:
        """Keep a piece of the reasoning."""
        self.thinking.append(piece)

    def add_alternative(self, index: int, piece: str) -> None:
        """Keep a piece of alternative ``index``."""
        self.alternatives.setdefault(index, []).append(piece)

    def show_in(self, view: StreamView) -> None:
        """Show the reply as far as it got: room for it, then what streamed,
        joined (one piece each, not one call per token)."""
        view.begin_reply(self.prefix_id, self.pending_text, self.n)
        if self.thinking:
            view.append_thinking("".join(self.thinking))
        if self.answer:
            view.append_stream("".join(self.answer))
        for index, pieces in sorted(self.alternatives.items()):
            view.append_alternative(index, "".join(pieces))
