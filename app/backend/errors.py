"""Errors the backend raises for problems a user can fix."""

from __future__ import annotations


class BackendError(Exception):
    """A model or context problem, with a message written for a person."""


class ModelFileError(BackendError):
    """The model file is missing, truncated, or not a GGUF model."""


class ContextFullError(BackendError):
    """The conversation no longer fits in the context window (n_ctx)."""


class InvalidSetting(BackendError):
    """A backend or sampling setting out of its range (the message says which)."""


class Interrupted(BackendError):
    """The user stopped a prompt being read or a model being loaded."""


class WorkerUnavailable(BackendError):
    """A worker (``--worker HOST:PORT``) cannot be used: nothing listens there,
    it is busy or unreachable, or it speaks another protocol version."""
