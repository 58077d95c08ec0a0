"""The failures a person can understand and act on, in one place.

The CLI prints them as one line and the window shows them in a dialog;
anything else is a bug and goes to the crash report with its traceback. This
module stays light (no SQLAlchemy ORM work, no llama.cpp) so that importing it
costs nothing at start-up.
"""

from __future__ import annotations

from app.backend.errors import BackendError
from storage.errors import ExchangeError, NotFound, StorageUnavailable


class ServiceError(Exception):
    """A request that cannot be done as asked (wrong kind of node, ...).

    The message is written for a person.
    """


# Every entry is one of Arbor's own classes, raised on purpose with a message:
# a bare ValueError or OSError escaping is a bug and must reach the crash
# report, not pass as bad input. File system refusals outside the database
# (an export, an import, a benchmark's --json file) are wrapped where they
# happen, with the path and the system's reason.
USER_ERRORS: tuple[type[Exception], ...] = (
    BackendError,
    StorageUnavailable,
    NotFound,
    ServiceError,
    ExchangeError,
)
