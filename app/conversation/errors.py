"""The failures a person can understand and act on, in one place.

The CLI prints them as one line and the window shows them in a dialog;
anything else is a bug and goes to the crash report with its traceback.
"""

from __future__ import annotations

from app.backend.errors import BackendError
from app.conversation.service import ServiceError
from storage.errors import NotFound, StorageUnavailable

USER_ERRORS: tuple[type[Exception], ...] = (
    BackendError,
    StorageUnavailable,
    NotFound,
    ServiceError,
    ValueError,
    OSError,
)
