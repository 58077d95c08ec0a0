"""``AttachmentChips``: the files of a message, one chip each.

A chip names its file and says its length in characters, the same in the
composer and on the sent message (a message's tokens are counted as a whole,
not per file, so on a sent message a file's tokens are not known). In the
composer it adds what the file will take of the context, its tokens once
counted, and a close button takes the file out. Clicking a chip (or Enter
on it) opens its text in a read-only viewer. Names elide: a long file name
never widens the window.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QFontDatabase, QKeyEvent, QMouseEvent
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.qt.views.theme import icon
from app.text.attachments import Attachment

# How much of a file its chip's tooltip shows.
PREVIEW_CHARS = 400
# The viewer's first size, in characters of its fixed-width font and lines.
VIEWER_COLUMNS = 90
VIEWER_LINES = 30


class AttachmentViewer(QDialog):
    """An attached file's whole text, read-only and selectable.

    Not modal, and deleted when closed: a file can be read beside the
    transcript, or beside the composer while the message is written.
    """

    def __init__(self, file: Attachment, figure: str, parent: QWidget | None) -> None:
        super().__init__(parent)
        self.setObjectName("AttachmentViewer")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle(file.name)
        self.file = file
        layout = QVBoxLayout(self)
        self.figure = QLabel(f"{file.name} · {figure}")
        self.figure.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        layout.addWidget(self.figure)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setPlainText(file.text)
        layout.addWidget(self.text, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout.addWidget(buttons)
        metrics = self.text.fontMetrics()
        self.resize(
            metrics.horizontalAdvance("m") * VIEWER_COLUMNS,
            metrics.lineSpacing() * VIEWER_LINES,
        )


class _Chip(QFrame):
    """One file: icon, name and figures, and a close button in the composer.

    Signals
    -------
    clicked()
        The chip was clicked (or Enter or Space pressed on it), not its
        close button.
    """

    clicked = Signal()

    def __init__(self, file: Attachment, removable: bool, parent: QWidget) -> None:
        super().__init__(parent)
        self.setObjectName("AttachmentChip")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        # Reachable by Tab, to be opened from the keyboard too.
        self.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        self.file = file
        self._tokens = ""
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
        self.setToolTip(
            f"{file.name} · {file.size_text} · click to read it\n\n{preview}"
        )
        self._show_figures()

    @property
    def figures(self) -> str:
        """What the chip says of its file: its characters, then its tokens
        where they are counted ("12 characters · 5 tokens")."""
        return " · ".join(f for f in (self.file.size_text, self._tokens) if f)

    def set_figure(self, figure: str) -> None:
        """Show ``figure`` after the file's characters (its tokens, or that
        they are being counted; "" shows the characters alone)."""
        self._tokens = figure
        self._show_figures()

    def _show_figures(self) -> None:
        self.label.setText(f"{self.file.name} · {self.figures}")

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        """Clicked: the chips open the file."""
        inside = self.rect().contains(event.position().toPoint())
        if event.button() == Qt.MouseButton.LeftButton and inside:
            event.accept()
            self.clicked.emit()
            return
        super().mouseReleaseEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Enter or Space on the chip opens the file, as a click does."""
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Space):
            event.accept()
            self.clicked.emit()
            return
        super().keyPressEvent(event)


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

    def chip(self, name: str) -> QFrame:
        """The chip of ``name`` (for tests: to click it)."""
        return self._chips[name]

    def open_file(self, name: str) -> AttachmentViewer | None:
        """Show the text of the file ``name`` in a viewer (None: no such file)."""
        chip = self._chips.get(name)
        if chip is None:
            return None
        viewer = AttachmentViewer(chip.file, chip.figures, self.window())
        viewer.show()
        return viewer

    def add(self, file: Attachment) -> None:
        """Add a chip for ``file`` (one of the same name is replaced)."""
        self.remove(file.name)
        chip = _Chip(file, self._removable, self)
        chip.clicked.connect(self._on_chip_clicked)
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
    def _on_chip_clicked(self) -> None:
        for name, chip in self._chips.items():
            if chip is self.sender():
                self.open_file(name)
                return

    @Slot()
    def _on_remove_button_clicked(self) -> None:
        button = self.sender()
        for name, chip in self._chips.items():
            if chip.remove_button is button:
                self.remove(name)
                self.removed.emit(name)
                return
