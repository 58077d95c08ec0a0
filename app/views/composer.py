"""``Composer``: where the user writes. Ctrl+Enter sends, Enter is a new line.

The send shortcut belongs to the window's Send action (so menus show it);
the composer shows the convention in its hint and turns its button into Stop
while a reply streams.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.views.theme import icon

HINT = "Ctrl+Enter to send · Enter for a new line · Esc to stop"
EDIT_HINT = (
    "Editing a message: Ctrl+Enter sends it as a new branch (the original stays)"
    " · Esc cancels"
)


class Composer(QWidget):
    """The message editor with its Send/Stop button.

    Signals
    -------
    send_clicked()
        The Send button was pressed (the window reads ``text``).
    stop_clicked()
        The Stop button was pressed.
    edit_cancelled()
        The user left edit mode without sending.
    """

    send_clicked = Signal()
    stop_clicked = Signal()
    edit_cancelled = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Composer")
        self.editing_node: int | None = None
        self._generating = False

        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 6, 24, 10)
        outer.setSpacing(4)

        self.edit_banner = QFrame()
        self.edit_banner.setObjectName("EditBanner")
        banner_layout = QHBoxLayout(self.edit_banner)
        banner_layout.setContentsMargins(8, 2, 4, 2)
        banner_label = QLabel(
            "Editing a message — sending creates a new branch; nothing is erased."
        )
        banner_layout.addWidget(banner_label, 1)
        cancel = QToolButton()
        cancel.setText("Cancel")
        cancel.clicked.connect(self._on_cancel_button_clicked)
        banner_layout.addWidget(cancel)
        self.edit_banner.hide()
        outer.addWidget(self.edit_banner)

        self.frame = QFrame()
        self.frame.setObjectName("ComposerFrame")
        row = QHBoxLayout(self.frame)
        row.setContentsMargins(10, 6, 6, 6)
        self.edit = QPlainTextEdit()
        self.edit.setObjectName("ComposerEdit")
        self.edit.setPlaceholderText("Write a message…")
        self.edit.setTabChangesFocus(True)
        self.edit.setFixedHeight(72)
        self.edit.installEventFilter(self)
        row.addWidget(self.edit, 1)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("SendButton")
        self.send_button.setIcon(
            icon("send", role=self.palette().ColorRole.HighlightedText)
        )
        self.send_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.send_button.clicked.connect(self._on_send_button_clicked)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        outer.addWidget(self.frame)

        self.hint = QLabel(HINT)
        self.hint.setObjectName("ComposerHint")
        outer.addWidget(self.hint)

    @property
    def text(self) -> str:
        """The message as typed."""
        return self.edit.toPlainText()

    @property
    def generating(self) -> bool:
        """Whether the button is in its Stop state."""
        return self._generating

    def clear(self) -> None:
        """Empty the editor."""
        self.edit.clear()

    def set_generating(self, generating: bool) -> None:
        """Switch the button between Send and Stop."""
        self._generating = generating
        self.send_button.setText("Stop" if generating else "Send")
        self.send_button.setIcon(
            icon(
                "stop" if generating else "send",
                role=self.palette().ColorRole.HighlightedText,
            )
        )
        self.send_button.setToolTip(
            "Stop generating (Esc)" if generating else "Send (Ctrl+Enter)"
        )
        self.send_button.setProperty("stopping", generating)
        self.send_button.style().unpolish(self.send_button)
        self.send_button.style().polish(self.send_button)

    def set_available(self, available: bool, placeholder: str) -> None:
        """Enable writing or explain (in the placeholder) why it is not possible."""
        self.edit.setReadOnly(not available)
        self.edit.setPlaceholderText(placeholder)
        self.send_button.setEnabled(available or self._generating)

    def begin_edit(self, node_id: int, text: str) -> None:
        """Put a user message in the editor to send as its edited sibling."""
        self.editing_node = node_id
        self.edit.setPlainText(text)
        self.edit.setFocus()
        self.edit_banner.show()
        self.hint.setText(EDIT_HINT)

    def end_edit(self) -> None:
        """Leave edit mode (the text stays if it was not sent)."""
        self.editing_node = None
        self.edit_banner.hide()
        self.hint.setText(HINT)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # The frame draws the focus ring around the whole composer.
        if watched is self.edit and event.type() in (
            QEvent.Type.FocusIn,
            QEvent.Type.FocusOut,
        ):
            self.frame.setProperty("focused", event.type() == QEvent.Type.FocusIn)
            self.frame.style().unpolish(self.frame)
            self.frame.style().polish(self.frame)
        return super().eventFilter(watched, event)

    @Slot()
    def _on_send_button_clicked(self) -> None:
        if self._generating:
            self.stop_clicked.emit()
        else:
            self.send_clicked.emit()

    @Slot()
    def _on_cancel_button_clicked(self) -> None:
        self.end_edit()
        self.clear()
        self.edit_cancelled.emit()
