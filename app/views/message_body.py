"""``MessageBody``: read-only rich text that is exactly as tall as its content.

A ``QLabel`` cannot break words longer than a line (URLs, code, raw model
output), so a frameless ``QTextBrowser`` is used instead, its height pinned
to the document's height whenever the width or the text changes. Its code
blocks' "Copy" links put the block's text on the clipboard.
"""

from __future__ import annotations

import math

from PySide6.QtCore import QSizeF, Qt, QUrl, Slot
from PySide6.QtGui import QColor, QCursor, QGuiApplication, QTextOption
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QToolTip, QWidget

from app.views.markdown import COPY_SCHEME, render_markdown


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
        self.code_blocks: tuple[str, ...] = ()
        self.anchorClicked.connect(self._on_anchor_clicked)

    def set_markdown(self, text: str, code_background: QColor) -> None:
        """Show Markdown ``text`` with highlighted, copyable code blocks."""
        rendered = render_markdown(text, code_background)
        self.code_blocks = rendered.code_blocks
        self.setHtml(rendered.html)

    def copy_code_block(self, index: int) -> None:
        """Put the ``index``-th code block's text on the clipboard."""
        QGuiApplication.clipboard().setText(self.code_blocks[index])

    @Slot(QUrl)
    def _on_anchor_clicked(self, url: QUrl) -> None:
        if url.scheme() == COPY_SCHEME and url.path().isdigit():
            index = int(url.path())
            if index < len(self.code_blocks):
                self.copy_code_block(index)
                QToolTip.showText(QCursor.pos(), "Copied", self)

    @Slot(QSizeF)
    def _on_layout_document_size_changed(self, size: QSizeF) -> None:
        self.setFixedHeight(
            max(self.fontMetrics().height(), math.ceil(size.height()) + 2)
        )
