"""The failure dialog (``show_error``): its title is readable whole.

Some window managers elide a narrow message box's window title ("Could n…a
reply"), so the title is the box's first, bold line, and the box is at least
as wide as that line.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QApplication, QLabel, QMessageBox, QWidget

from app.platform.assets import get_asset
from app.qt.views.dialogs.errors import show_error

TITLES = [
    "Could not generate a reply",
    "Could not import the conversation",
    "Could not load the model",
]


def _labels_showing(box: QMessageBox, text: str) -> list[QLabel]:
    return [
        label
        for label in box.findChildren(QLabel)
        if label.isVisible() and label.text() == text
    ]


@pytest.fixture(params=["plain Qt", "Arbor's style sheet"])
def styled(request: pytest.FixtureRequest, qapp: QApplication) -> Iterator[None]:
    """With and without the style sheet the window sets for the application
    (it overrides fonts that widgets set themselves)."""
    before = qapp.styleSheet()
    if request.param != "plain Qt":
        qapp.setStyleSheet(get_asset("styles/arbor.qss").read_text(encoding="utf-8"))
    yield
    qapp.setStyleSheet(before)


@pytest.mark.parametrize("title", TITLES)
def test_the_title_is_the_first_line_bold_and_whole(qtbot, styled, title: str):
    parent = QWidget()
    qtbot.addWidget(parent)
    parent.show()
    # Short details: the box's width then depends on the title alone.
    box = show_error(parent, title, "Out of memory.")
    try:
        qtbot.waitExposed(box)
        (label,) = _labels_showing(box, title)
        assert label.font().bold()
        title_width = QFontMetrics(label.font()).horizontalAdvance(title)
        assert label.width() >= title_width
        assert box.sizeHint().width() >= title_width
        assert box.width() >= title_width
        # The window title is short enough for any title bar.
        assert box.windowTitle() == "Arbor"
        assert box.informativeText() == "Out of memory."
        assert _labels_showing(box, "Out of memory.")
    finally:
        box.close()


def test_details_stay_plain_text(qtbot, styled):
    box = show_error(None, "Could not generate a reply", "<b>not bold</b> & <i>x")
    try:
        qtbot.waitExposed(box)
        (details,) = _labels_showing(box, "<b>not bold</b> & <i>x")
        assert details.textFormat() == Qt.TextFormat.PlainText
        assert box.textFormat() == Qt.TextFormat.PlainText
    finally:
        box.close()
