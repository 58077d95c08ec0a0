"""When the engine's process ended because a worker was lost: the way on.

A model spread over workers runs in a process of its own (issue 25); a worker
that stops answering ends that process, not the window. No model is loaded
then; the dialog offers to load it again on the workers that still answer,
or on this computer alone (slower, and only if the model fits here). The
conversation, its messages and checkpoints are all in the database.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QMessageBox, QWidget


def offer_reload(
    parent: QWidget,
    message: str,
    remaining: tuple[str, ...],
    on_choice: Callable[[bool], None],
) -> QMessageBox:
    """Show the choices without blocking; ``on_choice`` gets True to load on
    the ``remaining`` workers, False for this computer alone (nothing for
    "Not now"). Returns the (open) dialog."""
    box = QMessageBox(parent)
    box.setObjectName("EngineLostDialog")
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle("A worker was lost")
    box.setText(message)
    where = (
        f"on the workers that still answer ({', '.join(remaining)}), or "
        if remaining
        else ""
    )
    box.setInformativeText(
        "No model is loaded now. Load it again "
        f"{where}on this computer alone (slower, and only if the model fits "
        "in its memory), or start the lost worker again and load the model "
        "as before. Every message stays in the tree."
    )
    choices: dict[QAbstractButton, bool] = {}
    if remaining:
        on_workers = box.addButton(
            "Load on the remaining workers", QMessageBox.ButtonRole.ActionRole
        )
        on_workers.setObjectName("LoadOnRemainingWorkers")
        choices[on_workers] = True
    here = box.addButton(
        "Load on this computer alone", QMessageBox.ButtonRole.ActionRole
    )
    here.setObjectName("LoadHere")
    choices[here] = False
    box.addButton("Not now", QMessageBox.ButtonRole.RejectRole)

    def answered(button: QAbstractButton) -> None:
        if button in choices:
            on_choice(choices[button])

    box.buttonClicked.connect(answered)
    box.open()
    return box
