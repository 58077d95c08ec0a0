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

A request's stop strings (``SamplingParams.stop``) end the reply the same
way. They often begin inside a token (``"\n"`` in ``".\n"``): the text of
that token before the marker is shown and kept (``kept``), for the caller
to decode as tokens of its own in place of the one dropped, so that the
stored text, what streamed and the context all end where the stop begins.

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
    stops
        Texts that end the reply too, the request's own (``stopped_by_string``
        tells which ended it).
    splitter
        Splits thinking from the answer; its ``answer`` and ``thinking`` are
        the reply's text once ``finish`` ran.
    emit
        Receives the pieces ready to show, ``(channel, text)``.
    """

    def __init__(
        self,
        markers: Sequence[str],
        stops: Sequence[str],
        splitter: ReasoningSplitter,
        emit: Callable[[Pieces], None],
    ) -> None:
        self._stops = [s.encode("utf-8") for s in stops if s]
        self._markers = [m.encode("utf-8") for m in markers if m] + self._stops
        self._longest = max((len(m) for m in self._markers), default=0)
        self.splitter = splitter
        self._emit = emit
        self._stream = Utf8Stream()
        self._raw = bytearray()
        self._ends: list[int] = []  # where each token's bytes end in _raw
        self._held: list[tuple[bytes, bool]] = []  # tokens not shown yet
        self._shown = 0  # tokens released
        # Once a marker was found: the text of the token dropped that came
        # before it (shown already), and whether the marker was a stop string.
        self.kept = ""
        self.stopped_by_string = False
        self._met_marker = False

    def push(self, data: bytes, special: bool) -> int | None:
        """Add the next token's bytes; return the index of the first token to
        drop when a marker is now complete (``kept``: the text those tokens
        held before it, to decode in their place), else None."""
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
            at = min(found)
            cut = self._token_at(at)
            self._release(cut)
            cut = self._keep_before(cut, at)
            self._held.clear()
            self._met_marker = True
            self.stopped_by_string = any(
                self._raw.startswith(stop, at) for stop in self._stops
            )
            return cut
        self._release(self._token_at(self._marker_start()))
        return None

    def finish(self) -> int | None:
        """The reply ended: show what was held, and the last pieces.

        Returns the index of the first token of a character the reply ends
        inside of (to be dropped), or None (always after a marker: what came
        after it is gone already).
        """
        cut = None if self._met_marker else self._incomplete_tail()
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
        lead = self._lead_byte(len(raw))
        if lead < 0:
            return None
        first = raw[lead]
        needed = (
            2 if first >> 5 == 0b110 else 3 if first >> 4 == 0b1110 else 4
            if first >> 3 == 0b11110 else 1
        )  # fmt: skip
        if len(raw) - lead >= needed:
            return None
        return self._token_of(lead)

    def _lead_byte(self, end: int) -> int:
        # Where the character whose bytes run up to ``end`` starts: back over
        # at most three continuation bytes (-1 when all before are such).
        lead = end - 1
        while lead >= 0 and end - lead < 4 and self._raw[lead] & 0xC0 == 0x80:
            lead -= 1
        return lead

    def _token_of(self, offset: int) -> int:
        # The index of the token holding byte ``offset``, shown or not.
        return next(i for i, end in enumerate(self._ends) if end > offset)

    def _keep_before(self, cut: int, at: int) -> int:
        """Show and keep the text before the marker at byte ``at`` that the
        token ``cut`` holds; return the first token to drop.

        That is ``cut``, or an earlier token when ``cut`` begins inside a
        character (the character's first bytes were shown with it): the text
        kept then starts with that token, so that it stands alone as tokens
        of its own. Not kept when it is no plain text (a control token, bytes
        that are no UTF-8): the reply then ends a little before the marker.
        """
        start = self._ends[cut - 1] if cut else 0
        data, special = self._held[0]  # the token ``cut``: those before went
        if special or start >= at:
            return cut
        first = cut
        if self._stream.pending():
            first = self._token_of(max(0, self._lead_byte(start)))
        begin = self._ends[first - 1] if first else 0
        try:
            self.kept = bytes(self._raw[begin:at]).decode("utf-8")
        except UnicodeDecodeError:
            return cut
        self._emit(self.splitter.push(self._stream.push(data[: at - start])))
        return first

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
