"""A reply's text on its way to the screen, watched for turn markers.

A model on a fallback format may end its turn by *writing* the format's
marker: ChatML's ``<|im_end|>`` in Gemma's vocabulary is seven plain tokens,
and a base model goes on to invent the user's next turn (``<|im_start|>user
…``). Waiting for an end-of-generation token would run every reply to its
token limit and keep the invented turns in the context.

``ReplyText`` takes the sampled tokens one by one. While the end of the text
could be the start of a marker it holds those tokens back (nothing of a
marker reaches the screen); once a marker is complete it returns the index
of the first token that overlaps it: the caller drops that token and all
after it, from the reply and from the context, and closes the turn itself.
Held tokens that turn out not to be a marker are released, in order. With
no markers (a model's own template, whose end is a token) every token is
released at once and nothing changes.

A reply cut short (its token limit, Stop, a full context) can end inside a
character: a byte-level token holds the first byte of a three-byte
character. Shown, that is U+FFFD; kept, the span would hold bytes that no
rendering of the stored text has. ``finish`` returns the index of the token
where that incomplete character starts, for the caller to drop like a
marker, and shows nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.backend.reasoning import ReasoningSplitter
from app.backend.text_stream import Utf8Stream

Pieces = list[tuple[str, str]]


class ReplyText:
    """Tokens to shown pieces: UTF-8 joined, reasoning split, markers cut.

    Parameters
    ----------
    markers
        Texts that end the turn (``ChatFormat.markers``).
    splitter
        Splits thinking from the answer; its ``answer`` and ``thinking`` are
        the reply's text once ``finish`` ran.
    emit
        Receives the pieces ready to show, ``(channel, text)``.
    """

    def __init__(
        self,
        markers: Sequence[str],
        splitter: ReasoningSplitter,
        emit: Callable[[Pieces], None],
    ) -> None:
        self._markers = [m.encode("utf-8") for m in markers if m]
        self._longest = max((len(m) for m in self._markers), default=0)
        self.splitter = splitter
        self._emit = emit
        self._stream = Utf8Stream()
        self._raw = bytearray()
        self._ends: list[int] = []  # where each token's bytes end in _raw
        self._held: list[tuple[bytes, bool]] = []  # tokens not shown yet
        self._shown = 0  # tokens released

    def push(self, data: bytes, special: bool) -> int | None:
        """Add the next token's bytes; return the index of the first token of
        a turn marker when one is now complete, else None."""
        start = len(self._raw)
        self._raw += data
        self._ends.append(len(self._raw))
        self._held.append((data, special))
        if not self._markers:
            self._release(len(self._ends))
            return None
        # Only a marker that ends in this token can be new.
        window = max(0, start - self._longest + 1)
        found = [
            at
            for marker in self._markers
            if (at := self._raw.find(marker, window)) >= 0
        ]
        if found:
            cut = self._token_at(min(found))
            self._release(cut)
            self._held.clear()
            return cut
        self._release(self._token_at(self._marker_start()))
        return None

    def finish(self) -> int | None:
        """The reply ended: show what was held, and the last pieces.

        Returns the index of the first token of a character the reply ends
        inside of (to be dropped), or None.
        """
        cut = self._incomplete_tail()
        if cut is None:
            self._release(len(self._ends))
            self._emit(self.splitter.push(self._stream.flush()))
        else:
            # Only whole characters go out; the incomplete one's bytes stay
            # in the stream, which is dropped with them.
            self._release(cut)
            self._held.clear()
        self._emit(self.splitter.flush())
        return cut

    def _incomplete_tail(self) -> int | None:
        # The token holding the lead byte of a last character that lacks
        # bytes (None when the text ends on a whole character).
        raw = self._raw
        lead = len(raw) - 1
        while lead >= 0 and len(raw) - lead < 4 and raw[lead] & 0xC0 == 0x80:
            lead -= 1
        if lead < 0:
            return None
        first = raw[lead]
        needed = (
            2 if first >> 5 == 0b110 else 3 if first >> 4 == 0b1110 else 4
            if first >> 3 == 0b11110 else 1
        )  # fmt: skip
        if len(raw) - lead >= needed:
            return None
        return next(i for i, end in enumerate(self._ends) if end > lead)

    def _marker_start(self) -> int:
        # Where the longest end of the text that begins some marker starts
        # (len(_raw) when none does).
        size = len(self._raw)
        for length in range(min(self._longest - 1, size), 0, -1):
            tail = bytes(self._raw[size - length :])
            if any(marker.startswith(tail) for marker in self._markers):
                return size - length
        return size

    def _token_at(self, offset: int) -> int:
        # The index of the token holding byte ``offset`` (len: past the end).
        for index in range(self._shown, len(self._ends)):
            if self._ends[index] > offset:
                return index
        return len(self._ends)

    def _release(self, upto: int) -> None:
        while self._shown < upto and self._held:
            data, special = self._held.pop(0)
            self._shown += 1
            self._emit(self.splitter.push(self._stream.push(data), special=special))
