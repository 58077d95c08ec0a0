"""Storage errors that are the user's environment, not a bug in Arbor."""

from __future__ import annotations


class StorageUnavailable(Exception):
    """The database cannot be used: locked, full, corrupt, unreadable or too new.

    The message is written for a person; show it as it is.
    """


class NotFound(LookupError):
    """A conversation or node id that does not exist."""


class ExchangeError(Exception):
    """A file that cannot be imported, or a conversation that cannot be exported.

    The message is one sentence for a person, naming what is wrong (also when
    the file itself cannot be read or written: no permission, a full disk).
    """
