"""``AttachmentChips``: the files of a message, one chip each.

In the composer a chip says what its file will take of the context (its
tokens once counted) and a close button takes it out; on a sent message it names
the file and holds its text in the tooltip's first lines. Names elide: a
long file name never widens the window.
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.qt.views.theme import icon
from app.text.attachments import Attachment

# How much of a file its chip's tooltip shows.
PREVIEW_CHARS = 400


class _Chip(QFrame):
    """One file: icon, name and figure, and a close button in the composer."""

    def __init__(self, file: Attachment, removable: bool, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("AttachmentChip")
        self.file = file
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 3, 3, 3)
        layout.setSpacing(4)
        clip = QLabel()
        clip.setPixmap(icon("attach").pixmap(14, 14))
        layout.addWidget(clip)
        self.label = QLabel()
        # Ignored: the label takes the width it is given and elides in it.
        self.label.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        layout.addWidget(self.label, 1)
        self.remove_button: QToolButton | None = None
        if removable:
            self.remove_button = QToolButton()
            self.remove_button.setText("\N{MULTIPLICATION SIGN}")
            self.remove_button.setToolTip(f"Take {file.name} out of the message")
            self.remove_button.setAutoRaise(True)
            layout.addWidget(self.remove_button)
        preview = file.text[:PREVIEW_CHARS] + (
            "…" if len(file.text) > PREVIEW_CHARS else ""
        )
        self.setToolTip(f"{file.name} · {file.size_text}\n\n{preview}")
        self.set_figure(file.size_text)

    def set_figure(self, figure: str) -> None:
        """Show ``figure`` after the name (its size, or its tokens)."""
        self.label.setText(f"{self.file.name} · {figure}")


class AttachmentChips(QWidget):
    """The chips of a message's files (hidden when there are none).

    Signals
    -------
    removed(str)
        The close button of the file with this name was clicked (removable chips only).
    """

    removed = Signal(str)

    def __init__(self, removable: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._removable = removable
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(4)
        self._chips: dict[str, _Chip] = {}
        self.hide()

    @property
    def files(self) -> list[Attachment]:
        """The files, in the order they were added."""
        return [chip.file for chip in self._chips.values()]

    def chip_text(self, name: str) -> str:
        """What the chip of ``name`` says (for tests and tools)."""
        return self._chips[name].label.text()

    def add(self, file: Attachment) -> None:
        """Add a chip for ``file`` (one of the same name is replaced)."""
        self.remove(file.name)
        chip = _Chip(file, self._removable, self)
        if chip.remove_button is not None:
            chip.remove_button.clicked.connect(self._on_remove_button_clicked)
        self._chips[file.name] = chip
        self._layout.addWidget(chip)
        self.show()

    def set_figure(self, name: str, figure: str) -> None:
        """Show ``figure`` on the chip of ``name``, if it is there."""
        chip = self._chips.get(name)
        if chip is not None:
            chip.set_figure(figure)

    def remove(self, name: str) -> None:
        """Take the chip of ``name`` out, if it is there."""
        chip = self._chips.pop(name, None)
        if chip is not None:
            self._layout.removeWidget(chip)
            chip.deleteLater()
        self.setVisible(bool(self._chips))

    def set_files(self, files: list[Attachment]) -> None:
        """Show exactly ``files``."""
        for name in list(self._chips):
            self.remove(name)
        for file in files:
            self.add(file)

    @Slot()
    def _on_remove_button_clicked(self) -> None:
        button = self.sender()
        for name, chip in self._chips.items():
            if chip.remove_button is button:
                self.remove(name)
                self.removed.emit(name)
                return
