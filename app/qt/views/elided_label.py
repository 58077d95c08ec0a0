"""``ElidedLabel``: a one-line text that elides to the width it is given.

A QLabel asks for its whole text's width, so a long text (a status, a
title) widens its window: on a small or scaled screen (720 px wide at 200 %)
the window could not be made narrow enough. This one asks for a few
characters and paints the rest as "…", the whole text in its tooltip.
"""

from __future__ import annotations

from PySide6.QtCore import QMargins, QRect, QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QLabel, QStyle

ELLIPSIS = "…"


class ElidedLabel(QLabel):
    """A one-line text that elides to the width it is given.

    ``text()`` stays the whole text; the label paints it elided and then puts
    it in its tooltip, above the label's own explanation (``set_detail``).

    Parameters
    ----------
    name
        The object name (the stylesheet's and the tests' handle).
    text
        The first text.
    keep
        How many characters (of average width) the label asks for at least;
        a shorter text asks for its own width.
    """

    def __init__(self, name: str, text: str = "", keep: int = 0) -> None:
        super().__init__(text)
        self.setObjectName(name)
        self._keep = keep
        self._detail = ""
        # QLabel indents a framed text (the template note's) by half an "x".
        # The stylesheet's padding spaces it already, and without the indent
        # the painting below, elided to the contents rectangle, matches the
        # size hints.
        self.setIndent(0)

    def setText(self, text: str) -> None:
        """Set the whole text (painted elided when it does not fit)."""
        super().setText(text)
        self._update_tooltip()

    def set_detail(self, detail: str) -> None:
        """Set the tooltip's explanation, shown below the whole text when elided."""
        self._detail = detail
        self._update_tooltip()

    def detail(self) -> str:
        """The tooltip's explanation."""
        return self._detail

    def shown_text(self) -> str:
        """The text as painted: elided to the label's width when it is too long."""
        return self.fontMetrics().elidedText(
            self.text(), Qt.TextElideMode.ElideRight, self._text_rect().width()
        )

    def is_elided(self) -> bool:
        """Whether the label is too narrow for its whole text."""
        return self.shown_text() != self.text()

    def minimumSizeHint(self) -> QSize:
        hint = self.sizeHint()
        metrics = self.fontMetrics()
        # Padding, frame and margins: what the hint holds besides the text.
        chrome = hint.width() - metrics.horizontalAdvance(self.text())
        keep = (
            chrome
            + metrics.averageCharWidth() * self._keep
            + metrics.horizontalAdvance(ELLIPSIS)
        )
        return QSize(min(hint.width(), keep), hint.height())

    def paintEvent(self, event: QPaintEvent) -> None:
        # QLabel paints its whole text, cut off at the edge; this paints it
        # elided, as QLabel would otherwise (frame, alignment, palette).
        painter = QPainter(self)
        try:
            self.drawFrame(painter)
            alignment = QStyle.visualAlignment(self.layoutDirection(), self.alignment())
            self.style().drawItemText(
                painter,
                self._text_rect(),
                int(alignment.value),
                self.palette(),
                self.isEnabled(),
                self.shown_text(),
                self.foregroundRole(),
            )
        finally:
            # Ended here, not when Python frees it: a painter still active
            # after the paint event ("endPaint() called with active
            # painter") once crashed the window.
            painter.end()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        # Narrower or wider, the text may now fit, or no longer.
        self._update_tooltip()

    def _text_rect(self) -> QRect:
        margin = self.margin()
        return self.contentsRect().marginsRemoved(
            QMargins(margin, margin, margin, margin)
        )

    def _update_tooltip(self) -> None:
        parts = [self.text()] if self.is_elided() else []
        if self._detail:
            parts.append(self._detail)
        self.setToolTip("\n\n".join(parts))
