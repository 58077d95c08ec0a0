"""``WelcomePage``: shown until a model is loaded; picks a GGUF file."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QFileDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.views.theme import app_icon, icon

GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"


def choose_model_file(parent: QWidget | None, start: str = "") -> Path | None:
    """Ask for a GGUF file; None if cancelled."""
    path, _ = QFileDialog.getOpenFileName(
        parent, "Choose a GGUF model", start, GGUF_FILTER
    )
    return Path(path) if path else None


class WelcomePage(QWidget):
    """A friendly first screen: choose a model file, or one used before.

    Signals
    -------
    model_chosen(str)
        The path of the model to load.
    """

    model_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("WelcomePage")
        layout = QVBoxLayout(self)
        layout.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.setSpacing(12)
        logo = QLabel()
        logo.setPixmap(app_icon().pixmap(QSize(72, 72)))
        logo.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(logo)
        title = QLabel("Welcome to Arbor")
        title.setObjectName("WelcomeTitle")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(title)
        self.message = QLabel(
            "Arbor chats with a language model that runs on this computer, offline.\n"
            "Choose a model file (.gguf) to begin. You can change it later in Settings."
        )
        self.message.setObjectName("WelcomeText")
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setWordWrap(True)
        layout.addWidget(self.message)
        self.choose_button = QPushButton("Choose a model file…")
        self.choose_button.setObjectName("SendButton")
        self.choose_button.setIcon(
            icon("folder", role=self.palette().ColorRole.HighlightedText)
        )
        self.choose_button.clicked.connect(self._on_choose_button_clicked)
        layout.addWidget(self.choose_button, 0, Qt.AlignmentFlag.AlignCenter)
        self.recent_title = QLabel("Recent models")
        self.recent_title.setObjectName("PanelTitle")
        self.recent_list = QListWidget()
        self.recent_list.setMaximumWidth(520)
        self.recent_list.setMaximumHeight(140)
        self.recent_list.itemActivated.connect(self._on_recent_list_item_activated)
        self.recent_list.itemClicked.connect(self._on_recent_list_item_activated)
        layout.addWidget(self.recent_title, 0, Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.recent_list, 0, Qt.AlignmentFlag.AlignCenter)

    def set_recent(self, paths: list[str]) -> None:
        """List models used before that still exist."""
        self.recent_list.clear()
        existing = [p for p in paths if Path(p).is_file()]
        for path in existing:
            item = QListWidgetItem(icon("model"), Path(path).name)
            item.setToolTip(path)
            item.setData(Qt.ItemDataRole.UserRole, path)
            self.recent_list.addItem(item)
        self.recent_title.setVisible(bool(existing))
        self.recent_list.setVisible(bool(existing))

    def set_message(self, text: str) -> None:
        """Replace the explanation (e.g. after a model failed to load)."""
        self.message.setText(text)

    @Slot()
    def _on_choose_button_clicked(self) -> None:
        path = choose_model_file(self)
        if path is not None:
            self.model_chosen.emit(str(path))

    @Slot(QListWidgetItem)
    def _on_recent_list_item_activated(self, item: QListWidgetItem) -> None:
        self.model_chosen.emit(item.data(Qt.ItemDataRole.UserRole))
