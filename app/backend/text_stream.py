"""Turn a stream of token byte pieces into valid UTF-8 text pieces."""

from __future__ import annotations

import codecs


class Utf8Stream:
    """Incrementally decodes token bytes; a character split across tokens waits
    until its last byte arrives, and invalid bytes become U+FFFD."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, piece: bytes) -> str:
        """Add a token's bytes; return the text that is now complete."""
        return self._decoder.decode(piece)

    def pending(self) -> bool:
        """Whether bytes of a character wait for the rest of it."""
        return bool(self._decoder.getstate()[0])

    def flush(self) -> str:
        """Return whatever is left (an incomplete character becomes U+FFFD)."""
        return self._decoder.decode(b"", final=True)
