"""``MessageBody``: read-only rich text that is exactly as tall as its content.

A ``QLabel`` cannot break words longer than a line (URLs, code, raw model
output), so a frameless ``QTextBrowser`` is used instead, its height pinned
to the document's height whenever the width or the text changes.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QSizeF, Qt, Slot
from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QWidget


class MessageBody(QTextBrowser):
    """Selectable message text without scroll bars; grows with its content."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("MessageBody")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setOpenLinks(False)
        self.viewport().setAutoFillBackground(False)
        self.document().setDocumentMargin(0)
        self.document().documentLayout().documentSizeChanged.connect(
            self._on_layout_document_size_changed
        )
        self.setFixedHeight(self.fontMetrics().height())

    @Slot(QSizeF)
    def _on_layout_document_size_changed(self, size: QSizeF) -> None:
        self.setFixedHeight(
            max(self.fontMetrics().height(), math.ceil(size.height()) + 2)
        )
