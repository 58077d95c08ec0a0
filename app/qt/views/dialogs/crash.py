"""Unexpected errors: a dialog with copyable details instead of a traceback.

``install_excepthook`` routes every uncaught exception (including those raised
in Qt slots) to ``CrashDialog``. Native crashes skip Python entirely; those are
written by ``faulthandler`` to ``crash.log`` and shown at the next start.
"""

from __future__ import annotations

import logging
import sys
import traceback
from types import TracebackType

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

log = logging.getLogger(__name__)

_open_dialogs: list[CrashDialog] = []


class CrashDialog(QDialog):
    """Explains that something went wrong and offers the details to copy.

    Parameters
    ----------
    summary
        One or two sentences for the user.
    details
        The technical report (a traceback or a crash log).
    parent
        The Qt parent.
    """

    def __init__(
        self, summary: str, details: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("CrashDialog")
        self.setWindowTitle("Arbor ran into a problem")
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(640, 420)
        layout = QVBoxLayout(self)
        message = QLabel(summary)
        message.setWordWrap(True)
        layout.addWidget(message)
        self.details = QPlainTextEdit(details)
        self.details.setReadOnly(True)
        self.details.setFont(
            QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        )
        layout.addWidget(self.details)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy details", QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(self._on_copy_clicked)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)

    @Slot()
    def _on_copy_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.details.toPlainText())


def _excepthook(
    exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
) -> None:
    details = "".join(traceback.format_exception(exc_type, exc, tb))
    log.error("Unexpected error:\n%s", details)
    if QApplication.instance() is None:
        sys.__excepthook__(exc_type, exc, tb)
        return
    dialog = CrashDialog(
        "Something unexpected went wrong. Your conversations are saved; you can keep "
        "working, or restart Arbor. Please report the details below.",
        details,
        QApplication.activeWindow(),
    )
    # Without a parent, nothing else keeps the dialog alive until it closes.
    _open_dialogs.append(dialog)
    dialog.finished.connect(lambda _result: _open_dialogs.remove(dialog))
    dialog.show()


def install_excepthook() -> None:
    """Send uncaught exceptions to the crash dialog."""
    sys.excepthook = _excepthook
