"""Ctrl+C in the terminal stops a reply between tokens and keeps what it wrote,
or stops a long prompt being read between its batches (``Interrupted``), the
message it belongs to kept, unanswered."""

from __future__ import annotations

import time
from typing import TextIO


class StopRequest:
    """A flag set by a SIGINT handler and polled by the service between tokens
    and by the engine between the batches of a long prompt.

    Install ``request`` with ``signal.signal(signal.SIGINT, stop.request)``;
    pass the object itself as ``should_stop`` and ``watch_decode`` as the
    engine's ``decode_watch``. With ``progress`` set, the prompt's reading is
    told there, about once a second.
    """

    def __init__(self, progress: TextIO | None = None) -> None:
        self.requested = False
        self._progress = progress
        self._told_at: float | None = None

    def request(self, *_: object) -> None:
        """Ask the reply in progress to stop (a signal handler)."""
        self.requested = True

    def __call__(self) -> bool:
        """Whether a stop was asked for (the service's ``should_stop``)."""
        return self.requested

    def watch_decode(self, done: int, total: int) -> bool:
        """Between the batches of a long prompt: tell how far it is read
        (where asked), and go on unless a stop was asked for."""
        now = time.monotonic()
        if self._progress is not None and (
            self._told_at is None or done == total or now - self._told_at >= 1.0
        ):
            self._told_at = now
            print(
                f"arbor: reading the prompt: {done:,} of {total:,} tokens",
                file=self._progress,
                flush=True,
            )
        return not self.requested
