"""``ConversationDelegate``: a conversation as two lines, title over figures."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QFont, QPainter, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
)

from app.qt.models.conversation_list import ProgressRole, SubtitleRole

PADDING = 8


class ConversationDelegate(QStyledItemDelegate):
    """Draws the title and, below it in a smaller font, messages · size · date
    (or what is happening there now: a reply being written)."""

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        title, opt.text = opt.text, ""
        style = opt.widget.style() if opt.widget else QApplication.style()
        style.drawControl(
            QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget
        )

        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        text_role = (
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        )
        rect = opt.rect.adjusted(PADDING + 2, PADDING - 2, -PADDING, -PADDING + 2)
        title_font = QFont(opt.font)
        title_font.setWeight(QFont.Weight.DemiBold)
        small = QFont(opt.font)
        small.setPointSizeF(max(7.0, opt.font.pointSizeF() - 1.5))
        line = rect.height() // 2
        painter.save()
        painter.setPen(opt.palette.color(text_role))
        painter.setFont(title_font)
        elided = painter.fontMetrics().elidedText(
            title, Qt.TextElideMode.ElideRight, rect.width()
        )
        painter.drawText(
            QRect(rect.left(), rect.top(), rect.width(), line),
            Qt.AlignmentFlag.AlignVCenter,
            elided,
        )
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
            rect.width(),
        )
        painter.drawText(
            QRect(rect.left(), rect.top() + line, rect.width(), line),
            Qt.AlignmentFlag.AlignVCenter,
            subtitle,
        )
        painter.restore()

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        height = option.fontMetrics.height()
        return QSize(120, 2 * height + 2 * PADDING + 4)
