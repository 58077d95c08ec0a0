"""When a branch has filled the context: a fork in the road, not a dead end.

The dialog offers what fits a tree: branch from an earlier message, raise the
context size (up to what the model was trained for), or continue in a new
conversation that starts from the model's summary of this one.

A first message longer than the context filled no branch: its own dialog
(``offer_shorter``) says how long it is against the context and the model,
and offers only what can work: a larger context where one holds it, a model
with a longer context, or a shorter message. Attaching the text as a file is
not offered: an attachment is written into the message (``app.text.
attachments``), so it takes as many tokens, and fits exactly when the
message would.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QMessageBox, QWidget

from app.backend.errors import context_size_for
from app.window.presenter import WayOn

# Where a larger context applies: this conversation alone.
APPLIES = (
    "A larger context is this conversation's alone: the model loads again "
    "with it while the conversation is shown and takes more memory; the "
    "others keep the size in Settings."
)


def raised_context_size(
    n_ctx: int, n_ctx_train: int, needed: int | None = None
) -> int | None:
    """The context size to offer: double, at least ``needed`` tokens with
    room for a reply, up to the training length (``context_size_for``)."""
    return context_size_for(needed, n_ctx, n_ctx_train)


def offer_ways_on(
    parent: QWidget,
    message: str,
    n_ctx: int,
    n_ctx_train: int,
    on_choice: Callable[[WayOn, int | None], None],
    needed: int | None = None,
) -> QMessageBox:
    """Show the choices without blocking; ``on_choice`` gets the answer and,
    for RAISE, the new size (one that holds ``needed`` tokens, where known).
    Returns the (open) dialog."""
    box = QMessageBox(parent)
    box.setObjectName("ContextFullDialog")
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setIcon(QMessageBox.Icon.Information)
    box.setWindowTitle("The context is full")
    box.setText("This branch has filled the model's context.")
    box.setInformativeText(
        f"{message}\n\nEvery message stays in the tree. You can go on from an "
        "earlier message, give the model a larger context, or continue in a new "
        "conversation that starts from a summary of this one."
    )
    size = raised_context_size(n_ctx, n_ctx_train, needed)
    if size is not None:
        box.setInformativeText(f"{box.informativeText()} {APPLIES}")
    choices: dict[QAbstractButton, WayOn] = {
        box.addButton(
            "Branch from earlier", QMessageBox.ButtonRole.ActionRole
        ): WayOn.BRANCH,
        box.addButton(
            "Continue from a summary", QMessageBox.ButtonRole.ActionRole
        ): WayOn.SUMMARY,
    }
    if size is not None:
        raise_button = box.addButton(
            f"Raise to {size:,} tokens", QMessageBox.ButtonRole.ActionRole
        )
        choices[raise_button] = WayOn.RAISE
    box.addButton(QMessageBox.StandardButton.Cancel)

    def answered(button: QAbstractButton) -> None:
        choice = choices.get(button, WayOn.NOTHING)
        on_choice(choice, size if choice is WayOn.RAISE else None)

    box.buttonClicked.connect(answered)
    box.open()
    return box


def offer_shorter(
    parent: QWidget,
    needed: int,
    n_ctx: int,
    n_ctx_train: int,
    on_choice: Callable[[WayOn, int | None], None],
    stored: bool = False,
) -> QMessageBox:
    """Say that a message with nothing before it needs ``needed`` tokens, more
    than the context's ``n_ctx``, and offer what can work, without blocking:
    ``on_choice`` gets RAISE with the size (only one that holds the message
    and that the model, trained for ``n_ctx_train``, reads), MODELS, or
    NOTHING (shorten it: the message is back in the composer, or ``stored``
    in the conversation without a reply, to edit)."""
    box = QMessageBox(parent)
    box.setObjectName("MessageTooLongDialog")
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setIcon(QMessageBox.Icon.Information)
    box.setWindowTitle("The message is too long")
    size = raised_context_size(n_ctx, n_ctx_train, needed)
    where = (
        "it is kept without a reply: edit it"
        if stored
        else "it is back in the message box"
    )
    if size is None:
        box.setText("This message is longer than this model can read.")
        trained = (
            f"this model reads at most {n_ctx_train:,}, whatever the context size"
            if n_ctx_train > 0
            else "no larger context can be given"
        )
        box.setInformativeText(
            f"It needs about {needed:,} tokens of context; the context holds "
            f"{n_ctx:,}, and {trained}.\n\nShorten it ({where}), or choose a "
            "model with a longer context in Models."
        )
    else:
        box.setText("This message is longer than the context.")
        reads = (
            f"This model reads up to {n_ctx_train:,}: a context"
            if n_ctx_train > 0
            else "A context"
        )
        box.setInformativeText(
            f"It needs about {needed:,} tokens of context; the context holds "
            f"{n_ctx:,}. {reads} of {size:,} tokens holds the message "
            f"and a reply.\n\n{APPLIES} Or shorten the message: {where}."
        )
    choices: dict[QAbstractButton, WayOn] = {}
    if size is not None:
        raise_button = box.addButton(
            f"Raise to {size:,} tokens", QMessageBox.ButtonRole.ActionRole
        )
        choices[raise_button] = WayOn.RAISE
        box.setDefaultButton(raise_button)
    choices[box.addButton("Models…", QMessageBox.ButtonRole.ActionRole)] = WayOn.MODELS
    shorten = box.addButton("Shorten it", QMessageBox.ButtonRole.RejectRole)
    box.setEscapeButton(shorten)
    if size is None:
        box.setDefaultButton(shorten)

    def answered(button: QAbstractButton) -> None:
        choice = choices.get(button, WayOn.NOTHING)
        on_choice(choice, size if choice is WayOn.RAISE else None)

    box.buttonClicked.connect(answered)
    box.open()
    return box
