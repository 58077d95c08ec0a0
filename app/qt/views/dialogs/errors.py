"""The one way expected failures reach the user: ``show_error``; and ``confirm``."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget

from app.platform.paths import APP_NAME

# Qt's name for the label that shows a message box's text (stable since Qt 4).
_TEXT_LABEL = "qt_msgbox_label"
# The widest an error's details are set before they wrap (pixels): some 60
# characters, a comfortable line.
DETAILS_WIDTH = 420


def show_error(parent: QWidget | None, title: str, text: str) -> QMessageBox:
    """Show a readable, non-modal error message and return its box.

    ``title`` (what failed) is the box's first line, in bold; ``text`` (why,
    and what to do) is below it. Plain text only: messages may contain paths
    or model output, never markup.
    """
    box = QMessageBox(
        QMessageBox.Icon.Warning, APP_NAME, title, QMessageBox.StandardButton.Ok, parent
    )
    box.setObjectName("ErrorMessage")
    # Before the details: their label takes the box's text format when made.
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setInformativeText(text)
    _show_title_whole(box, title, text)
    box.setWindowModality(Qt.WindowModality.NonModal)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.show()
    return box


def _show_title_whole(box: QMessageBox, title: str, text: str) -> None:
    # The title goes in the box, not only in its title bar: some window
    # managers elide a narrow box's window title ("Could n…a reply"). Bold by
    # a style sheet, not markup, so that it stays plain text; setFont would
    # be undone by the application's style sheet when the label is polished.
    label = box.findChild(QLabel, _TEXT_LABEL)
    if label is None:  # another Qt's layout: the title is there, not bold
        return
    label.setStyleSheet("font-weight: bold;")
    # QMessageBox sizes itself when shown, to its labels' minimum widths: this
    # one's keeps the title on one line, and the details (wrapped to the same
    # column) in lines of a comfortable length rather than a narrow column.
    bold = QFont(label.font())
    bold.setBold(True)
    plain = QFontMetrics(label.font())
    details = max(
        (plain.horizontalAdvance(line) for line in text.splitlines()), default=0
    )
    label.setMinimumWidth(
        max(QFontMetrics(bold).horizontalAdvance(title), min(details, DETAILS_WIDTH))
    )


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
