"""Replies generated together: streaming side by side, then compared and picked.

While "Regenerate N times" runs, the transcript shows an ``AlternativesRow``
under the user's message: one card per alternative, in a horizontal row, each
filled by the pieces of its own reply. When the job ends the replies stay side
by side in a ``ChoiceRow``, each with "Keep this one": the one kept becomes
the path's reply (the others stay, behind its "k/N" navigator), as does the
first if the user goes on without choosing.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.qt.views.transcript.message_card import MessageCard
from storage.values import Role

REPAINT_MS = 40


class AlternativesRow(QWidget):
    """``n`` streaming reply cards side by side."""

    def __init__(self, n: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("AlternativesRow")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        self.cards = [MessageCard(Role.ASSISTANT, "") for _ in range(n)]
        for card in self.cards:
            # At the top, as tall as its text: stretched to the tallest, a
            # card spreads the extra height around its text, whose first
            # words then sit lower than the others' (read across, to compare).
            layout.addWidget(card, 1, Qt.AlignmentFlag.AlignTop)
        self._parts: list[list[str]] = [[] for _ in range(n)]
        self._dirty: set[int] = set()
        # Pieces arrive per token; redrawing Markdown that often would stall
        # the window, so the cards are redrawn on a timer.
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(REPAINT_MS)
        self._timer.timeout.connect(self._on_timer_timeout)

    def append(self, index: int, piece: str) -> None:
        """Add a piece of alternative ``index``'s answer."""
        if not 0 <= index < len(self.cards):
            return
        self._parts[index].append(piece)
        self._dirty.add(index)
        if not self._timer.isActive():
            self._timer.start()

    def text(self, index: int) -> str:
        """Alternative ``index``'s answer received so far."""
        return "".join(self._parts[index])

    @Slot()
    def _on_timer_timeout(self) -> None:
        for index in sorted(self._dirty):
            self.cards[index].set_text(self.text(index))
        self._dirty.clear()


class ChoiceRow(QWidget):
    """Finished replies side by side, each with a button that keeps it.

    Signals
    -------
    chosen(int)
        "Keep this one" was clicked under the reply with this node id.
    """

    chosen = Signal(int)

    def __init__(
        self, replies: list[tuple[int, str]], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ChoiceRow")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        self.cards: list[MessageCard] = []
        self.buttons: list[QPushButton] = []
        for node_id, text in replies:
            column = QVBoxLayout()
            card = MessageCard(Role.ASSISTANT, text)
            column.addWidget(card)
            button = QPushButton("Keep this one")
            button.setToolTip(
                "Go on from this reply; the others stay as its siblings (k/N)"
            )
            button.setProperty("node_id", node_id)
            button.clicked.connect(self._on_button_clicked)
            column.addWidget(button, 0, Qt.AlignmentFlag.AlignHCenter)
            # The column's room below a shorter reply stays empty, so that
            # each reply begins at the top, its button right under it.
            column.addStretch(1)
            layout.addLayout(column, 1)
            self.cards.append(card)
            self.buttons.append(button)

    @Slot()
    def _on_button_clicked(self) -> None:
        button = self.sender()
        if isinstance(button, QPushButton):
            self.chosen.emit(int(button.property("node_id")))
