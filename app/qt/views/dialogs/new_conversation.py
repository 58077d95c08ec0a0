"""``NewConversationDialog``: a title, a preset and a system prompt for a new
conversation."""

from __future__ import annotations

from PySide6.QtCore import Slot
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLineEdit,
    QPlainTextEdit,
    QWidget,
)

from app.conversation.presets import Preset

NO_PRESET = "No preset (the Settings' sampling)"


class NewConversationDialog(QDialog):
    """Ask for an optional title, a preset and the conversation's system prompt.

    Parameters
    ----------
    default_system_prompt
        Prefilled from the settings.
    presets
        The saved presets; picking one fills in its system prompt, and the
        conversation's replies use its sampling.
    parent
        The Qt parent.
    """

    def __init__(
        self,
        default_system_prompt: str,
        presets: tuple[Preset, ...] = (),
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("New conversation")
        self.setMinimumWidth(460)
        self._presets = presets
        form = QFormLayout(self)
        self.title_edit = QLineEdit()
        self.title_edit.setPlaceholderText("New conversation")
        form.addRow("Title", self.title_edit)
        self.preset_combo = QComboBox()
        self.preset_combo.addItem(NO_PRESET, None)
        for preset in presets:
            self.preset_combo.addItem(preset.name, preset.name)
        self.preset_combo.activated.connect(self._on_preset_combo_activated)
        form.addRow("Preset", self.preset_combo)
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

    @property
    def preset(self) -> Preset | None:
        """The preset picked, whose sampling the replies use; or None."""
        name = self.preset_combo.currentData()
        return next((p for p in self._presets if p.name == name), None)

    @Slot(int)
    def _on_preset_combo_activated(self, _index: int) -> None:
        preset = self.preset
        if preset is not None:
            self.system_edit.setPlainText(preset.system_prompt)
