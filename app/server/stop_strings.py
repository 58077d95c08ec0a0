"""A request's ``stop`` strings, applied to the text as it streams.

The text before a stop string goes to the client; from it on, nothing. Text
that might be the start of a stop string is held back until the next piece
tells, so a stop split across two tokens is still caught.
"""

from __future__ import annotations


class StopScanner:
    """Feed pieces of a reply; get what the client may see of them."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = stops
        self._held = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        """What of ``piece`` (after what was held) can be sent now."""
        if self.stopped:
            return ""
        text = self._held + piece
        cut = min((at for s in self._stops if (at := text.find(s)) >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return text[:cut]
        keep = self._partial_stop(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def finish(self) -> str:
        """What was held back, at the end of the reply."""
        held, self._held = ("" if self.stopped else self._held), ""
        return held

    def _partial_stop(self, text: str) -> int:
        # The longest end of ``text`` that begins some stop string.
        longest = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), longest, -1):
                if stop.startswith(text[-size:]):
                    longest = size
                    break
        return longest
