"""The failures a person can understand and act on, in one place.

The CLI prints them as one line and the window shows them in a dialog;
anything else is a bug and goes to the crash report with its traceback.
"""

from __future__ import annotations

from app.backend.errors import BackendError
from app.conversation.service import ServiceError
from storage.errors import NotFound, StorageUnavailable
from storage.exchange import ExchangeError

# Bad input is refused deliberately, with a message, as a ServiceError, a
# BackendError (InvalidSetting for out-of-range settings) or an ExchangeError
# (a conversation file that cannot be imported): a bare ValueError is a bug.
# OSError stays: a full or read-only disk surfaces as a plain OSError (ENOSPC,
# EROFS have no subclass of their own) from file writes outside the database,
# e.g. a benchmark's --json file or an exported conversation.
USER_ERRORS: tuple[type[Exception], ...] = (
    BackendError,
    StorageUnavailable,
    NotFound,
    ServiceError,
    ExchangeError,
    OSError,
)
