"""``ConversationDelegate``: a conversation as two lines, title over figures,
with a small mark after the title for one made elsewhere (through the API).

A title too long for the row is cut before its trailing marks, not through
them: "Planning the garden … (imported) (2)" still tells an imported copy, and
which copy, from the conversation it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from PySide6.QtCore import (
    QModelIndex,
    QPersistentModelIndex,
    QPointF,
    QRect,
    QRectF,
    QSize,
    Qt,
)
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
)

from app.qt.models.conversation_list import (
    BadgeRole,
    CopyNumberRole,
    ProgressRole,
    SubtitleRole,
)

PADDING = 8
# Between the title and its mark; inside the mark, around its capitals.
BADGE_GAP = 6
BADGE_PADDING = 6
BADGE_PADDING_V = 3
BADGE_RADIUS = 4.0
# How much of the mark's colour tints its inside: enough to read as a tag
# on the list's base, in light and dark palettes alike.
BADGE_FILL_ALPHA = 40

Index = QModelIndex | QPersistentModelIndex

# A title's trailing marks, kept when it is elided: short words in
# parentheses, as "(imported)" and a copy's "(2)".
_MARKS = re.compile(r"(?:\s*\([^()\n]{1,24}\))+$")
# The most of the row's width the marks keep; past that, the title is cut
# at its end like any other (a row of marks alone says nothing).
MARKS_SHARE = 0.6


def shown_title(index: Index) -> str:
    """A row's title as drawn: the conversation's, then its copy number."""
    title = str(index.data(Qt.ItemDataRole.DisplayRole) or "")
    number = index.data(CopyNumberRole)
    return f"{title} ({number})" if number else title


def elide_title(metrics: QFontMetrics, title: str, width: int) -> str:
    """``title`` cut to ``width`` pixels before its trailing marks, which stay
    whole where they take at most ``MARKS_SHARE`` of the width."""
    if metrics.horizontalAdvance(title) <= width:
        return title
    marks = _MARKS.search(title)
    if marks is not None and marks.start() > 0:
        kept = marks.group(0)
        room = width - metrics.horizontalAdvance(kept)
        if metrics.horizontalAdvance(kept) <= width * MARKS_SHARE:
            head = metrics.elidedText(
                title[: marks.start()].rstrip(), Qt.TextElideMode.ElideRight, room
            )
            return head + kept
    return metrics.elidedText(title, Qt.TextElideMode.ElideRight, width)


@dataclass(frozen=True)
class RowLayout:
    """Where a row's parts go: the title (elided to fit), its mark (None:
    the conversation has none) and the figures line below."""

    title: QRect
    badge: QRect | None
    subtitle: QRect


class ConversationDelegate(QStyledItemDelegate):
    """Draws the title and, below it in a smaller font, messages · size · date
    (or what is happening there now: a reply being written). A conversation
    made through the local server carries the model's mark ("API") after its
    title, which gives up the room the mark takes."""

    def row_layout(self, option: QStyleOptionViewItem, index: Index) -> RowLayout:
        """Where ``paint`` puts a row's title, mark and figures in ``option.rect``.

        Parameters
        ----------
        option
            The row's style option (its rect and font).
        index
            The row's index in a ``ConversationListModel``.

        Returns
        -------
        RowLayout
            The rectangles, all inside ``option.rect``.
        """
        rect = option.rect.adjusted(PADDING + 2, PADDING - 2, -PADDING, -PADDING + 2)
        line = rect.height() // 2
        title = QRect(rect.left(), rect.top(), rect.width(), line)
        subtitle = QRect(rect.left(), rect.top() + line, rect.width(), line)
        text = index.data(BadgeRole)
        if not text:
            return RowLayout(title, None, subtitle)
        metrics = QFontMetrics(_badge_font(option.font))
        width = metrics.horizontalAdvance(text) + 2 * BADGE_PADDING
        # Sized to its capitals (a mark is a short upper-case word), never
        # taller than the title's line: it must not spill into the figures.
        height = min(round(metrics.capHeight()) + 2 * BADGE_PADDING_V + 2, line)
        # The title keeps at least the room of the mark, so a narrow list
        # shows "Lo… [API]" rather than the mark alone.
        width = min(width, max(0, (rect.width() - BADGE_GAP) // 2))
        badge = QRect(
            title.right() + 1 - width,
            title.top() + (line - height) // 2,
            width,
            height,
        )
        title.setRight(badge.left() - BADGE_GAP - 1)
        return RowLayout(title, badge, subtitle)

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: Index
    ) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        title = shown_title(index)
        style = opt.widget.style() if opt.widget else QApplication.style()
        style.drawControl(
            QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget
        )

        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        text_role = (
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        )
        layout = self.row_layout(opt, index)
        title_font = QFont(opt.font)
        title_font.setWeight(QFont.Weight.DemiBold)
        small = QFont(opt.font)
        small.setPointSizeF(max(7.0, opt.font.pointSizeF() - 1.5))
        painter.save()
        painter.setPen(opt.palette.color(text_role))
        painter.setFont(title_font)
        elided = elide_title(painter.fontMetrics(), title, layout.title.width())
        painter.drawText(layout.title, Qt.AlignmentFlag.AlignVCenter, elided)
        if layout.badge is not None:
            self._paint_badge(painter, opt, layout.badge, str(index.data(BadgeRole)))
        painter.setFont(small)
        if not selected:
            # A reply being written there stands out from the figures.
            busy = index.data(ProgressRole) is not None
            painter.setPen(
                opt.palette.color(
                    QPalette.ColorRole.Link
                    if busy
                    else QPalette.ColorRole.PlaceholderText
                )
            )
        subtitle = painter.fontMetrics().elidedText(
            str(index.data(SubtitleRole) or ""),
            Qt.TextElideMode.ElideRight,
            layout.subtitle.width(),
        )
        painter.drawText(layout.subtitle, Qt.AlignmentFlag.AlignVCenter, subtitle)
        painter.restore()

    def _paint_badge(
        self, painter: QPainter, opt: QStyleOptionViewItem, rect: QRect, text: str
    ) -> None:
        # The accent (the palette's link colour) on an unselected row; on a
        # selected one, whose background is the accent, the highlighted
        # text's colour, so the mark never disappears into the selection.
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        color = opt.palette.color(
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Link
        )
        fill = QColor(color)
        fill.setAlpha(BADGE_FILL_ALPHA)
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(color)
        painter.setBrush(fill)
        # Half a pixel in: a one-pixel outline on pixel centres stays sharp
        # and inside the rectangle.
        outline = QRectF(rect).adjusted(0.5, 0.5, -0.5, -0.5)
        painter.drawRoundedRect(outline, BADGE_RADIUS, BADGE_RADIUS)
        painter.setFont(_badge_font(opt.font))
        metrics = painter.fontMetrics()
        elided = metrics.elidedText(
            text, Qt.TextElideMode.ElideRight, rect.width() - 2 * BADGE_PADDING
        )
        # Centred on its capitals, not on the line's ascent and descent,
        # which would set an upper-case word high in its box.
        baseline = rect.top() + (rect.height() + metrics.capHeight()) / 2
        left = rect.left() + (rect.width() - metrics.horizontalAdvance(elided)) / 2
        painter.drawText(QPointF(left, baseline), elided)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        height = option.fontMetrics.height()
        return QSize(120, 2 * height + 2 * PADDING + 4)


def _badge_font(font: QFont) -> QFont:
    """The mark's font: the figures' smaller size, bold enough to read small."""
    badge = QFont(font)
    badge.setPointSizeF(max(7.0, font.pointSizeF() - 2.0))
    badge.setWeight(QFont.Weight.DemiBold)
    return badge
