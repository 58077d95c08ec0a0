"""``ButtonRow``: buttons side by side, or one under the other when narrow.

An offer bar's buttons carry words ("Download SmolLM2 135M Instruct",
"Continue with …"): side by side they can need more than the chat page has
on a small or scaled screen (720 px wide at 200 %), and a layout would then
widen the window for them. The row asks only for its widest button, and
stacks the buttons where the width given is less than they need in a row.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QBoxLayout, QPushButton, QSizePolicy, QWidget


class ButtonRow(QWidget):
    """A row of buttons, aligned right, that stacks them when it is narrow."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QBoxLayout(QBoxLayout.Direction.LeftToRight, self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.addStretch(1)
        self._buttons: list[QPushButton] = []
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)

    @property
    def stacked(self) -> bool:
        """Whether the buttons are one under the other now."""
        return self._layout.direction() == QBoxLayout.Direction.TopToBottom

    def add(self, button: QPushButton) -> None:
        """Add ``button`` at the row's end."""
        self._buttons.append(button)
        self._layout.addWidget(button)

    def minimumSizeHint(self) -> QSize:
        # As wide as the widest button: narrower than the row needs, the
        # buttons stack (the layout's height is that of how they stand).
        visible = self._visible()
        width = max((b.sizeHint().width() for b in visible), default=0)
        return QSize(width, self._layout.minimumSize().height())

    def sizeHint(self) -> QSize:
        return QSize(self._row_width(), self._layout.sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        self._arrange(event.size().width())
        super().resizeEvent(event)

    def event(self, event: QEvent) -> bool:
        # A button's text changed (an offer names another model): its size
        # did, and the row may fit now, or no longer.
        if event.type() == QEvent.Type.LayoutRequest:
            self._arrange(self.width())
        return super().event(event)

    def _arrange(self, width: int) -> None:
        """Stack the buttons if ``width`` is less than they need in a row
        (each then takes the whole width), else put them side by side."""
        stack = width < self._row_width()
        if stack != self.stacked:
            self._layout.setDirection(
                QBoxLayout.Direction.TopToBottom
                if stack
                else QBoxLayout.Direction.LeftToRight
            )
            self.updateGeometry()

    def _visible(self) -> list[QPushButton]:
        return [b for b in self._buttons if not b.isHidden()]

    def _row_width(self) -> int:
        visible = self._visible()
        spacing = self._layout.spacing() * max(0, len(visible) - 1)
        return sum(b.sizeHint().width() for b in visible) + spacing
