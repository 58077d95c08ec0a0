"""When a branch has filled the context: a fork in the road, not a dead end.

The dialog offers what fits a tree: branch from an earlier message, raise the
context size (up to what the model was trained for), or continue in a new
conversation that starts from the model's summary of this one.
"""

from __future__ import annotations

import enum

from PySide6.QtWidgets import QMessageBox, QWidget


class WayOn(enum.Enum):
    """What the user chose to do about a full context."""

    BRANCH = "branch"
    RAISE = "raise"
    SUMMARY = "summary"
    NOTHING = "nothing"


def raised_context_size(n_ctx: int, n_ctx_train: int) -> int | None:
    """The next context size to offer: double, up to the training length."""
    if n_ctx_train <= n_ctx:
        return None
    return min(n_ctx * 2, n_ctx_train)


def ask_way_on(
    parent: QWidget, message: str, n_ctx: int, n_ctx_train: int
) -> tuple[WayOn, int | None]:
    """Ask what to do; returns the choice and, for RAISE, the new size."""
    box = QMessageBox(parent)
    box.setObjectName("ContextFullDialog")
    box.setIcon(QMessageBox.Icon.Information)
    box.setWindowTitle("The context is full")
    box.setText("This branch has filled the model's context.")
    box.setInformativeText(
        f"{message}\n\nEvery message stays in the tree. You can go on from an "
        "earlier message, give the model a larger context, or continue in a new "
        "conversation that starts from a summary of this one."
    )
    branch = box.addButton("Branch from earlier", QMessageBox.ButtonRole.ActionRole)
    size = raised_context_size(n_ctx, n_ctx_train)
    raise_button = (
        box.addButton(f"Raise to {size:,} tokens", QMessageBox.ButtonRole.ActionRole)
        if size is not None
        else None
    )
    summary = box.addButton(
        "Continue from a summary", QMessageBox.ButtonRole.ActionRole
    )
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    clicked = box.clickedButton()
    if clicked is branch:
        return WayOn.BRANCH, None
    if raise_button is not None and clicked is raise_button:
        return WayOn.RAISE, size
    if clicked is summary:
        return WayOn.SUMMARY, None
    return WayOn.NOTHING, None
