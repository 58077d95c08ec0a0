"""When a branch has filled the context: a fork in the road, not a dead end.

The dialog offers what fits a tree: branch from an earlier message, raise the
context size (up to what the model was trained for), or continue in a new
conversation that starts from the model's summary of this one.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QMessageBox, QWidget

from app.window.presenter import WayOn


def raised_context_size(n_ctx: int, n_ctx_train: int) -> int | None:
    """The next context size to offer: double, up to the training length."""
    if n_ctx_train <= n_ctx:
        return None
    return min(n_ctx * 2, n_ctx_train)


def offer_ways_on(
    parent: QWidget,
    message: str,
    n_ctx: int,
    n_ctx_train: int,
    on_choice: Callable[[WayOn, int | None], None],
) -> QMessageBox:
    """Show the choices without blocking; ``on_choice`` gets the answer and,
    for RAISE, the new size. Returns the (open) dialog."""
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
    size = raised_context_size(n_ctx, n_ctx_train)
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
