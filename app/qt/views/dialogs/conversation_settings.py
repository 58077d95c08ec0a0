"""``ConversationSettingsDialog``: the system prompt of the branch shown and
the sampling of the conversation's replies, with presets to pick and save.

A changed system prompt is not an edit of the old one: the window starts a
new branch from a new start, and the conversation so far stays in the tree.
"""

from __future__ import annotations

from PySide6.QtCore import Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.backend.errors import InvalidSetting
from app.backend.values import SamplingParams
from app.conversation.presets import Preset, with_preset, without_preset
from app.qt.views.dialogs.sampling_form import SamplingForm

# The preset list's first entry: the sampling shown is the conversation's own
# (the Settings' where it has none).
NO_PRESET = "No preset"
BRANCH_NOTE = (
    "A new system prompt starts a new branch from the start of the "
    "conversation. The messages so far stay in the tree, under the prompt "
    "they were written with."
)


class ConversationSettingsDialog(QDialog):
    """Edit a conversation's system prompt and sampling.

    Parameters
    ----------
    system_prompt
        The system prompt of the branch shown.
    sampling, preset
        What the conversation's replies use now, and the preset it came from.
    presets
        The saved presets; ``presets`` afterwards holds them as the user left
        them (saved or deleted here), whether or not the dialog was accepted.
    defaults
        The Settings' sampling, what "no preset" means.
    context_size, settings_context
        The context size raised for this conversation (None: it has none)
        and the Settings' own; ``keeps_own_context`` afterwards says whether
        the conversation keeps its size.
    parent
        The Qt parent.
    """

    def __init__(
        self,
        system_prompt: str,
        sampling: SamplingParams,
        preset: str | None,
        presets: tuple[Preset, ...],
        defaults: SamplingParams,
        context_size: int | None = None,
        settings_context: int = 0,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("System prompt and sampling")
        self.setMinimumWidth(520)
        self.presets = presets
        self._defaults = defaults
        layout = QVBoxLayout(self)

        row = QHBoxLayout()
        row.addWidget(QLabel("Preset"))
        self.preset_combo = QComboBox()
        self.preset_combo.setObjectName("PresetCombo")
        row.addWidget(self.preset_combo, 1)
        self.save_button = QPushButton("Save as preset…")
        self.save_button.clicked.connect(self._on_save_button_clicked)
        row.addWidget(self.save_button)
        self.delete_button = QPushButton("Delete preset")
        self.delete_button.clicked.connect(self._on_delete_button_clicked)
        row.addWidget(self.delete_button)
        layout.addLayout(row)

        layout.addWidget(QLabel("System prompt of this branch"))
        self.system_edit = QPlainTextEdit(system_prompt)
        self.system_edit.setPlaceholderText("Empty: the model's default system prompt")
        layout.addWidget(self.system_edit, 1)
        note = QLabel(BRANCH_NOTE)
        note.setWordWrap(True)
        note.setObjectName("Hint")
        layout.addWidget(note)

        group = QGroupBox("Sampling of this conversation's replies")
        group_layout = QVBoxLayout(group)
        self.sampling_form = SamplingForm(sampling)
        group_layout.addWidget(self.sampling_form)
        layout.addWidget(group)

        # Only where a size was raised for this conversation: the way back.
        self.own_context_box = QCheckBox(
            f"A context of {context_size or 0:,} tokens for this conversation "
            f"(untick for the Settings' {settings_context:,})"
        )
        self.own_context_box.setObjectName("OwnContextBox")
        self.own_context_box.setChecked(True)
        self.own_context_box.setVisible(context_size is not None)
        layout.addWidget(self.own_context_box)

        self.error_label = QLabel()
        self.error_label.setObjectName("Error")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        layout.addWidget(self.error_label)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self._on_buttons_accepted)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

        self._fill_presets(preset)
        # Connected after the first fill: opening shows what the conversation
        # has, not the preset's values.
        self.preset_combo.activated.connect(self._on_preset_combo_activated)
        self.sampling: SamplingParams | None = None
        self.preset: str | None = None

    # --- results --------------------------------------------------------------

    @property
    def keeps_own_context(self) -> bool:
        """Whether the conversation keeps the context size raised for it."""
        return self.own_context_box.isChecked()

    @property
    def system_prompt(self) -> str:
        """The system prompt as it was left."""
        return self.system_edit.toPlainText().strip()

    def picked(self) -> Preset | None:
        """The preset chosen in the list, if any."""
        name = self.preset_combo.currentData()
        return next((p for p in self.presets if p.name == name), None)

    # --- presets --------------------------------------------------------------

    def save_as_preset(self, name: str) -> None:
        """Save the system prompt and sampling shown as the preset ``name``
        (replacing one of that name) and pick it."""
        name = name.strip()
        if not name:
            return
        try:
            sampling = self.sampling_form.params()
        except InvalidSetting as exc:
            self._show_error(str(exc))
            return
        preset = Preset(name, self.system_prompt, sampling)
        self.presets = with_preset(self.presets, preset)
        self._fill_presets(name)

    def delete_picked(self) -> None:
        """Delete the preset chosen in the list (conversations that use it
        keep their copy of its sampling)."""
        picked = self.picked()
        if picked is not None:
            self.presets = without_preset(self.presets, picked.name)
            self._fill_presets(None)

    def _fill_presets(self, current: str | None) -> None:
        self.preset_combo.clear()
        self.preset_combo.addItem(NO_PRESET, None)
        for preset in self.presets:
            self.preset_combo.addItem(preset.name, preset.name)
        at = self.preset_combo.findData(current) if current else 0
        self.preset_combo.setCurrentIndex(max(at, 0))
        self.delete_button.setEnabled(self.picked() is not None)

    @Slot(int)
    def _on_preset_combo_activated(self, _index: int) -> None:
        picked = self.picked()
        self.delete_button.setEnabled(picked is not None)
        if picked is None:
            self.sampling_form.set_params(self._defaults)
            return
        self.system_edit.setPlainText(picked.system_prompt)
        self.sampling_form.set_params(picked.sampling)

    @Slot()
    def _on_save_button_clicked(self) -> None:
        picked = self.picked()
        name, ok = QInputDialog.getText(
            self, "Save as preset", "Name", text=picked.name if picked else ""
        )
        if ok:
            self.save_as_preset(name)

    @Slot()
    def _on_delete_button_clicked(self) -> None:
        self.delete_picked()

    # --- closing --------------------------------------------------------------

    @Slot()
    def _on_buttons_accepted(self) -> None:
        try:
            sampling = self.sampling_form.params()
        except InvalidSetting as exc:  # shown inline; the dialog stays open
            self._show_error(str(exc))
            return
        picked = self.picked()
        if picked is None:
            # No preset and the Settings' values: the conversation follows the
            # Settings, also when they change later.
            self.sampling = None if sampling == self._defaults else sampling
            self.preset = None
        else:
            self.sampling = sampling
            # The preset's name only while its sampling is what it says.
            self.preset = picked.name if sampling == picked.sampling else None
        self.accept()

    def _show_error(self, message: str) -> None:
        self.error_label.setText(message)
        self.error_label.show()
