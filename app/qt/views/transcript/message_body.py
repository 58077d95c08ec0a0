"""``MessageBody``: read-only rich text that is exactly as tall as its content.

A ``QLabel`` cannot break words longer than a line (URLs, code, raw model
output), so a frameless ``QTextBrowser`` is used instead, its height pinned
to the document's height whenever the width or the text changes. Its code
blocks' "Copy" links put the block's text on the clipboard.

Its text follows the widget's font, so that zooming (``app/qt/views/chrome/zoom.py``,
which sizes the bodies' font) scales it. The HTML that ``render_markdown``
makes says the font size it was made with, on its ``<body>`` (Qt's
``toHtml``); read back, that size would be fixed on every character, and a
new font would change nothing. So the body's size is taken out, and the text
takes the document's default font, which Qt keeps the widget's: a new font
only lays the text out again. The few sizes of their own (a code block's
header line) are scaled to the font when the HTML is read, and read again
from the HTML kept for that when the font changes.
"""

from __future__ import annotations

import math
import re

from PySide6.QtCore import QEvent, QSizeF, Qt, QUrl, Slot
from PySide6.QtGui import QColor, QCursor, QGuiApplication, QTextOption
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QToolTip, QWidget

from app.qt.views.transcript.markdown import COPY_SCHEME, render_markdown

# The font size ``toHtml`` writes on the body, and any other fixed size.
_BODY_SIZE = re.compile(r"(<body [^>]*?) font-size:([\d.]+)(pt|px);")
_POINT_SIZE = re.compile(r"font-size:([\d.]+)pt;")


def scale_html(html: str, point_size: float) -> tuple[str, bool]:
    """``html`` from ``toHtml`` for a body whose font is ``point_size`` points.

    The body's size goes (the document's default font takes its place); other
    sizes in points are scaled as that size is. Returns the HTML and whether
    it has sizes of its own (to scale again for another font).
    """
    body = _BODY_SIZE.search(html)
    if body is None:
        return html, False
    made_with = float(body.group(2)) if body.group(3) == "pt" else 0.0
    html = html[: body.start()] + body.group(1) + html[body.end() :]
    if _POINT_SIZE.search(html, body.start()) is None:
        return html, False
    # A font sized in pixels (some X11 set-ups) has no point size to scale by.
    ratio = point_size / made_with if point_size > 0 and made_with > 0 else 1.0
    if ratio == 1.0:
        return html, True
    return (
        _POINT_SIZE.sub(
            lambda m: f"font-size:{float(m.group(1)) * ratio:.4g}pt;", html
        ),
        True,
    )


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
        # The HTML as rendered, kept while it has sizes of its own to scale to
        # a new font, with the size they were scaled to.
        self._sized_html: str | None = None
        self._sized_for = 0.0
        self.anchorClicked.connect(self._on_anchor_clicked)

    def set_markdown(self, text: str, code_background: QColor) -> None:
        """Show Markdown ``text`` with highlighted, copyable code blocks."""
        rendered = render_markdown(text, code_background)
        self.code_blocks = rendered.code_blocks
        self._show_html(rendered.html)

    def setHtml(self, text: str) -> None:
        """Show ``text`` (HTML that follows the font; see ``set_markdown``)."""
        self._sized_html = None
        super().setHtml(text)

    def setPlainText(self, text: str) -> None:
        """Show plain ``text``."""
        self._sized_html = None
        super().setPlainText(text)

    def _show_html(self, html: str) -> None:
        point_size = self.font().pointSizeF()
        scaled, sized = scale_html(html, point_size)
        super().setHtml(scaled)
        self._sized_html = html if sized else None
        self._sized_for = point_size

    def changeEvent(self, event: QEvent) -> None:
        """Scale the text's own sizes to a new font (the rest follows by itself)."""
        super().changeEvent(event)
        if (
            event.type() == QEvent.Type.FontChange
            and self._sized_html is not None
            and self.font().pointSizeF() != self._sized_for
        ):
            self._show_html(self._sized_html)

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
