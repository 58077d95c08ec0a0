"""The one way expected failures reach the user: ``show_error``; and ``confirm``."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget


def show_error(parent: QWidget | None, title: str, text: str) -> QMessageBox:
    """Show a readable, non-modal error message and return its box.

    Plain text only: messages may contain paths or model output, never markup.
    """
    box = QMessageBox(
        QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, parent
    )
    box.setObjectName("ErrorMessage")
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setWindowModality(Qt.WindowModality.NonModal)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.show()
    return box


def confirm(parent: QWidget | None, title: str, text: str, action: str) -> bool:
    """Ask before a destructive ``action`` (the button's label); True if confirmed."""
    box = QMessageBox(
        QMessageBox.Icon.Question,
        title,
        text,
        QMessageBox.StandardButton.Cancel,
        parent,
    )
    box.setTextFormat(Qt.TextFormat.PlainText)
    accept = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    box.exec()
    return box.clickedButton() is accept
