"""Where a reply's text goes as it is generated, and whether to end it early:
what the window, the CLI and the server hand the conversation service."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.backend.reasoning import THINKING

TokenCallback = Callable[[str], None]
# A piece of alternative ``index``'s text (alternatives generated together).
IndexedTokenCallback = Callable[[int, str], None]
StopCheck = Callable[[], bool]


@dataclass(frozen=True)
class Streams:
    """Where a reply's answer and reasoning go as they are generated, and
    whether to end it early."""

    on_token: TokenCallback | None = None
    on_thinking: TokenCallback | None = None
    should_stop: StopCheck | None = None

    def emit(self, pieces: list[tuple[str, str]]) -> None:
        """Send a splitter's ``(channel, piece)`` pieces to their streams."""
        for channel, piece in pieces:
            target = self.on_thinking if channel == THINKING else self.on_token
            if piece and target is not None:
                target(piece)


NO_STREAMS = Streams()


@dataclass(frozen=True)
class AlternativeStreams:
    """Where the pieces of alternatives generated together go: the callbacks
    take the alternative's index first; ``should_stop`` ends them all."""

    on_token: IndexedTokenCallback | None = None
    on_thinking: IndexedTokenCallback | None = None
    should_stop: StopCheck | None = None

    def of(self, index: int) -> Streams:
        """The streams of alternative ``index`` alone."""
        return Streams(
            _bound(self.on_token, index),
            _bound(self.on_thinking, index),
            self.should_stop,
        )


NO_ALTERNATIVE_STREAMS = AlternativeStreams()


def _bound(callback: IndexedTokenCallback | None, index: int) -> TokenCallback | None:
    if callback is None:
        return None
    return lambda piece: callback(index, piece)
