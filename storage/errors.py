"""Storage errors that are the user's environment, not a bug in Arbor."""

from __future__ import annotations


class StorageUnavailable(Exception):
    """The database cannot be used: locked, full, corrupt, unreadable or too new.

    The message is written for a person; show it as it is.
    """


class NotFound(LookupError):
    """A conversation or node id that does not exist."""
