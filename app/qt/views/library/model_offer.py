"""``ModelOfferBar``: a conversation made with another model says so above the
composer, and offers to switch back to that model or go on with this one.

Nothing is restored until the user chooses (or writes on, which chooses the
loaded model): restoring under another model would tokenize the messages
anew for it.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QFrame, QLabel, QPushButton, QVBoxLayout, QWidget

from app.library.catalog import model_name
from app.qt.views.library.button_row import ButtonRow


class ModelOfferBar(QFrame):
    """The offer, hidden until ``offer`` names a model.

    Signals
    -------
    switch_requested()
        Load the model the conversation was made with.
    keep_requested()
        Go on with the loaded model.
    """

    switch_requested = Signal()
    keep_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ModelOfferBar")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 6, 12, 6)
        self.label = QLabel()
        self.label.setWordWrap(True)
        layout.addWidget(self.label)
        # Below the text, stacked when narrow: the buttons name models, and
        # side by side they could widen the window on a small screen.
        self.buttons = ButtonRow()
        self.switch_button = QPushButton()
        self.switch_button.clicked.connect(self._on_switch_button_clicked)
        self.buttons.add(self.switch_button)
        self.keep_button = QPushButton()
        self.keep_button.clicked.connect(self._on_keep_button_clicked)
        self.buttons.add(self.keep_button)
        layout.addWidget(self.buttons)
        self.hide()

    def offer(self, made_with: str | None, loaded: str | None) -> None:
        """Offer ``made_with`` (a model file) instead of ``loaded``; None hides."""
        if made_with is None or loaded is None:
            self.hide()
            return
        old, new = model_name(made_with), model_name(loaded)
        present = Path(made_with).is_file()
        self.label.setText(
            f"This conversation was made with {old}."
            + ("" if present else " Its file is no longer there.")
            + f" Going on with {new} reads its messages again for {new}."
        )
        self.switch_button.setText(f"Switch to {old}")
        self.switch_button.setEnabled(present)
        self.switch_button.setToolTip(made_with if present else f"{made_with} (gone)")
        self.keep_button.setText(f"Continue with {new}")
        self.show()

    @Slot()
    def _on_switch_button_clicked(self) -> None:
        self.switch_requested.emit()

    @Slot()
    def _on_keep_button_clicked(self) -> None:
        self.hide()
        self.keep_requested.emit()
