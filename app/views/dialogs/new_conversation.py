"""``NewConversationDialog``: a title and a system prompt for a new conversation."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLineEdit,
    QPlainTextEdit,
    QWidget,
)


class NewConversationDialog(QDialog):
    """Ask for an optional title and the conversation's system prompt.

    Parameters
    ----------
    default_system_prompt
        Prefilled from the settings.
    parent
        The Qt parent.
    """

    def __init__(
        self, default_system_prompt: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("New conversation")
        self.setMinimumWidth(460)
        form = QFormLayout(self)
        self.title_edit = QLineEdit()
        self.title_edit.setPlaceholderText("New conversation")
        form.addRow("Title", self.title_edit)
        self.system_edit = QPlainTextEdit(default_system_prompt)
        self.system_edit.setPlaceholderText("Empty: the model's default system prompt")
        form.addRow("System prompt", self.system_edit)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    @property
    def title(self) -> str | None:
        """The title typed, or None."""
        return self.title_edit.text().strip() or None

    @property
    def system_prompt(self) -> str | None:
        """The system prompt typed, or None."""
        return self.system_edit.toPlainText().strip() or None
