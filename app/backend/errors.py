"""Errors the backend raises for problems a user can fix."""

from __future__ import annotations


class BackendError(Exception):
    """A model or context problem, with a message written for a person."""


class ModelFileError(BackendError):
    """The model file is missing, truncated, or not a GGUF model."""


class ContextFullError(BackendError):
    """The conversation no longer fits in the context window (n_ctx).

    Where the tokens wanted are known (a message and its reply's opening),
    ``needed`` says how many, beside the context's size ``n_ctx`` and the
    model's trained context ``n_ctx_train`` (0: unknown): the window and the
    CLI offer a larger context only where one fits the need and the model.
    """

    def __init__(
        self,
        message: str,
        needed: int | None = None,
        n_ctx: int | None = None,
        n_ctx_train: int | None = None,
    ) -> None:
        super().__init__(message)
        self.needed = needed
        self.n_ctx = n_ctx
        self.n_ctx_train = n_ctx_train

    @classmethod
    def for_message(cls, needed: int, n_ctx: int, n_ctx_train: int) -> ContextFullError:
        """The error for ``needed`` tokens that a context of ``n_ctx`` cannot
        hold, saying in plain words what can work (``too_long_text``)."""
        return cls(
            too_long_text(needed, n_ctx, n_ctx_train), needed, n_ctx, n_ctx_train
        )

    @property
    def raise_to(self) -> int | None:
        """The context size that would hold what was needed, or None (not
        known, or more than the model was trained for)."""
        if self.needed is None or self.n_ctx is None:
            return None
        return context_size_for(self.needed, self.n_ctx, self.n_ctx_train or 0)


# A larger context offered for a message leaves this much room for its reply.
REPLY_ROOM = 512


def context_size_for(needed: int | None, n_ctx: int, n_ctx_train: int) -> int | None:
    """The context size to offer instead of ``n_ctx``, or None.

    At least double (a branch that filled its context has room to go on), at
    least ``needed`` with room for a reply (rounded up to a multiple of
    1,024), never more than the model was trained for (``n_ctx_train``; 0:
    unknown). None when no larger size fits the model, or when ``needed``
    (None: not known) is more than the model can read at all: a raise that
    still cannot hold the message is no way on.
    """
    limit = n_ctx_train if n_ctx_train > 0 else 2**31 - 1
    if n_ctx >= limit or (needed is not None and needed > limit):
        return None
    size = n_ctx * 2
    if needed is not None:
        size = max(size, -(-(needed + REPLY_ROOM) // 1024) * 1024)
    return min(size, limit)


def too_long_text(needed: int, n_ctx: int, n_ctx_train: int) -> str:
    """What to say about ``needed`` tokens a context of ``n_ctx`` cannot hold,
    for a model trained for ``n_ctx_train`` (0: unknown): a larger context is
    named only when one fits both the need and the model."""
    said = (
        f"This message needs about {needed:,} tokens of context but the model's "
        f"context holds {n_ctx:,}."
    )
    if n_ctx_train > 0 and needed > n_ctx_train:
        return (
            f"{said} This model can read at most {n_ctx_train:,} tokens, so no "
            "context size will hold it: shorten it, or use a model with a "
            "longer context."
        )
    size = context_size_for(needed, n_ctx, n_ctx_train)
    if size is None:  # not reached: needed > n_ctx, and the model reads it
        return f"{said} Shorten it."
    trained = f" (the model reads up to {n_ctx_train:,})" if n_ctx_train > 0 else ""
    return f"{said} Shorten it, or raise the context size to {size:,} tokens{trained}."


class InvalidSetting(BackendError):
    """A backend or sampling setting out of its range (the message says which)."""


class Interrupted(BackendError):
    """The user stopped a prompt being read or a model being loaded."""


class WorkerUnavailable(BackendError):
    """A worker (``--worker HOST:PORT``) cannot be used: nothing listens there,
    it is busy or unreachable, or it speaks another protocol version."""
