"""``StarterOfferBar``: while the starter model is all there is, a bar above the
conversation offers the recommended model that fits, beside the starter.

The starter (SmolLM2 135M) loads at once so that Arbor can be tried without
waiting; it is too small to be useful, and a newcomer should not have to
find that out, then find the Models dialog. Nothing downloads without a
click; "Not now" hides the bar until the next start.
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QFrame,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.qt.views.library.button_row import ButtonRow
from app.qt.views.library.downloads import show_fraction

STARTER_TEXT = (
    "You are chatting with the starter model, made for trying Arbor: it is "
    "small and often wrong."
)


class StarterOfferBar(QFrame):
    """The offer; the same calls as the welcome page's (``set_offer``,
    ``show_download``), so that one controller drives both.

    Signals
    -------
    offer_accepted()
        The offered model's button was clicked (download it, or use it).
    browse_requested()
        "Browse models…" was clicked.
    """

    offer_accepted = Signal()
    browse_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("StarterOfferBar")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(12, 8, 12, 8)
        self.label = QLabel()
        self.label.setWordWrap(True)
        outer.addWidget(self.label)
        # The buttons below the text: the text gets the bar's whole width.
        # Stacked when narrow: a small or scaled screen keeps its width.
        self.buttons = ButtonRow()
        self.offer_button = QPushButton()
        self.offer_button.clicked.connect(self._on_offer_button_clicked)
        self.buttons.add(self.offer_button)
        self.browse_button = QPushButton("Browse models…")
        self.browse_button.clicked.connect(self._on_browse_button_clicked)
        self.buttons.add(self.browse_button)
        self.dismiss_button = QPushButton("Not now")
        self.dismiss_button.clicked.connect(self._on_dismiss_button_clicked)
        self.buttons.add(self.dismiss_button)
        outer.addWidget(self.buttons)
        self.download_bar = QProgressBar()
        self.download_bar.setTextVisible(False)
        self.download_bar.setMaximumHeight(6)
        self.download_bar.hide()
        outer.addWidget(self.download_bar)
        self.dismissed = False
        self._offer_text = ""
        self.hide()

    def set_offer(self, button_text: str | None, description: str) -> None:
        """Offer one model (None: nothing, and the bar hides)."""
        self._offer_text = button_text or ""
        self.setVisible(button_text is not None and not self.dismissed)
        self.offer_button.setText(self._offer_text)
        self.offer_button.setEnabled(True)
        self.label.setText(f"{STARTER_TEXT} {description}".strip())
        self.download_bar.hide()

    def show_download(self, fraction: float | None, text: str, running: bool) -> None:
        """Show the offered model's download: how far, a line, whether it runs."""
        self.offer_button.setEnabled(not running)
        self.offer_button.setText("Downloading…" if running else self._offer_text)
        self.label.setText(text)
        self.download_bar.setVisible(running)
        show_fraction(self.download_bar, fraction)

    @Slot()
    def _on_offer_button_clicked(self) -> None:
        self.offer_accepted.emit()

    @Slot()
    def _on_browse_button_clicked(self) -> None:
        self.browse_requested.emit()

    @Slot()
    def _on_dismiss_button_clicked(self) -> None:
        self.dismissed = True
        self.hide()
