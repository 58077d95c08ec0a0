"""Keeping a reply's tool calls out of its text while it streams.

A model writes a call in its own syntax, opened by a marker (Hermes'
``<tool_call>``, Mistral's ``[TOOL_CALLS]``): the client is to get the call
as a call, not as text. ``CallCatcher`` sees each sampled token's text
(special markers shown, since many openings are special tokens) before it
reaches the reply's text: tokens that cannot be the start of the marker go
on at once, those that might are held until that is decided, and from the
marker on every token is the call's. The call's text is read once the reply
ends (``ToolSyntax.parse``).

A call that is a bare JSON object (llama.cpp's generic format, Llama 3.x's
``{"name": ...}``) opens only the reply: a ``{`` later on is text (code, an
example), and so is a reply that begins with anything else.
"""

from __future__ import annotations

# Triggers that are a JSON value's opening rather than a marker.
_BARE_JSON = ("{", "[")


class CallCatcher:
    """Splits a reply's tokens into its text and its calls.

    ``trigger`` is the text that opens calls; ``calling`` starts the reply
    inside them (a reply that must call: its grammar writes nothing else).
    """

    def __init__(self, trigger: str, calling: bool = False) -> None:
        self._trigger = trigger
        self.calling = calling or not trigger
        self._held: list[tuple[int, str]] = []
        self.call_tokens: list[int] = []
        # Only a reply's start can open a bare JSON call; past it, nothing.
        self._at_start_only = trigger in _BARE_JSON
        self._passing = False  # decided: the reply is text, no call follows
        self._shown = ""  # what went to the text so far, while at the start

    def take(self, token: int, text: str) -> list[int]:
        """The next sampled token, and its text; returns the tokens that go
        to the reply's text now (held ones first, in order)."""
        if self.calling:
            self.call_tokens.append(token)
            return []
        if self._passing:
            return [token]
        self._held.append((token, text))
        joined = "".join(piece for _token, piece in self._held)
        if self._at_start_only:
            opened = (self._shown + joined).lstrip()
            if opened and not opened.startswith(self._trigger):
                self._passing = True
                return self.release()
        found = joined.find(self._trigger)
        if found >= 0:
            # The token the marker begins in is the call's, and all after it.
            offset, first = 0, len(self._held) - 1
            for index, (_token, piece) in enumerate(self._held):
                if offset + len(piece) > found:
                    first = index
                    break
                offset += len(piece)
            released = [t for t, _piece in self._held[:first]]
            self.call_tokens = [t for t, _piece in self._held[first:]]
            self._held = []
            self.calling = True
            return released
        # Hold the tokens of the longest tail that could still grow into the
        # marker (it may begin inside a token: " <" of " <tool_call>").
        start = next(
            (
                at
                for at in range(max(0, len(joined) - len(self._trigger)), len(joined))
                if self._trigger.startswith(joined[at:])
            ),
            len(joined),
        )
        keep, offset = len(self._held), 0
        for index, (_token, piece) in enumerate(self._held):
            if offset + len(piece) > start:
                keep = index
                break
            offset += len(piece)
        released = [t for t, _piece in self._held[:keep]]
        self._shown += "".join(piece for _token, piece in self._held[:keep])
        self._held = self._held[keep:]
        return released

    def release(self) -> list[int]:
        """The reply ended: the tokens still held were text after all."""
        held = [t for t, _piece in self._held]
        self._held = []
        return held
