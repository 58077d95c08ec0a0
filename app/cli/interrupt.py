"""Ctrl+C in the terminal stops a reply between tokens and keeps what it wrote."""

from __future__ import annotations


class StopRequest:
    """A flag set by a SIGINT handler and polled by the service between tokens.

    Install ``request`` with ``signal.signal(signal.SIGINT, stop.request)``;
    pass the object itself as ``should_stop``.
    """

    def __init__(self) -> None:
        self.requested = False

    def request(self, *_: object) -> None:
        """Ask the reply in progress to stop (a signal handler)."""
        self.requested = True

    def __call__(self) -> bool:
        """Whether a stop was asked for (the service's ``should_stop``)."""
        return self.requested
