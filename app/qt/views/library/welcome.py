"""``WelcomePage``: shown until a model is loaded; picks a GGUF file, or
offers to download the best recommended model that fits this computer.

Nothing downloads without a click: the page offers one model (the window
chooses it: ``welcome_offer``), shows the download's progress, and the
window loads the model when it is done.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSize, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.library import names
from app.library.catalog import Catalog, CatalogEntry, model_name
from app.library.fit import Fit, assess
from app.qt.views.library.downloads import show_fraction
from app.qt.views.theme import app_icon, icon

GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
# The width of the page's explanations (pixels).
TEXT_WIDTH = 500


# The folder a model file was last chosen in, for this session only: a
# preference would be saved through the presenter, which the callers of
# ``choose_model_file`` do not hand over (see ``exchange_actions``). The
# current model, a preference, stands for it across sessions.
_last_model_folder: Path | None = None


def start_folder(current: str | None, starter: Path | None, models_dir: Path) -> str:
    """Where a model file dialog opens: beside the current model, unless that
    is the starter (deep in an installed package); then the folder a model
    was last chosen in this session; then the models folder, or the home
    folder before anything was downloaded."""
    if current and (starter is None or Path(current) != starter):
        folder = Path(current).parent
        if folder.is_dir():
            return str(folder)
    last = _last_model_folder
    if last is not None and last.is_dir():
        return str(last)
    return str(models_dir if models_dir.is_dir() else Path.home())


def choose_model_file(parent: QWidget | None, start: str = "") -> Path | None:
    """Ask for a GGUF file; None if cancelled.

    The dialog opens in ``start``, else where a model was last chosen this
    session, else the home folder; never in the working folder (Qt's choice
    for no folder), which is site-packages when launched from a bundle.
    """
    global _last_model_folder
    last = _last_model_folder
    if not start:
        start = str(last if last is not None and last.is_dir() else Path.home())
    path, _ = QFileDialog.getOpenFileName(
        parent, "Choose a GGUF model", start, GGUF_FILTER
    )
    if not path:
        return None
    _last_model_folder = Path(path).parent
    return Path(path)


def catalog_fit(entry: CatalogEntry, n_ctx: int, gpu_bytes: int = 0) -> Fit:
    """Whether ``entry`` fits this computer (with a GPU of ``gpu_bytes``) at a
    context of ``n_ctx`` tokens (no more than the model was trained for:
    llama.cpp caps it there)."""
    context = min(n_ctx, entry.context_length)
    return assess(
        entry.size_bytes, context, entry.kv_bytes_per_token, gpu_bytes=gpu_bytes
    )


def welcome_offer(catalog: Catalog, n_ctx: int) -> CatalogEntry | None:
    """The model the first start offers: the best of ``catalog.welcome_order()``
    that fits this computer comfortably at a context of ``n_ctx`` tokens."""
    for entry in catalog.welcome_order():
        if catalog_fit(entry, n_ctx).verdict == "fits":
            return entry
    return None


class WelcomePage(QWidget):
    """A friendly first screen: download the recommended model, choose a model
    file, or one used before.

    Signals
    -------
    model_chosen(str)
        The path of the model to load.
    offer_accepted()
        The offered model's button was clicked (download it, or load it).
    browse_requested()
        "Browse models…" was clicked.
    """

    model_chosen = Signal(str)
    offer_accepted = Signal()
    browse_requested = Signal()

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
            "Download a recommended model, or choose a model file (.gguf) you have."
        )
        self.message.setObjectName("WelcomeText")
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setWordWrap(True)
        # A wrapped label in a centred layout gets its hint's width, a narrow
        # guess, and the height of its first text: a width of its own keeps
        # every line (and a longer text set later) in sight.
        self.message.setFixedWidth(TEXT_WIDTH)
        layout.addWidget(self.message, 0, Qt.AlignmentFlag.AlignCenter)
        layout.addSpacing(6)
        self._offer_text = ""
        self.offer_button = QPushButton()
        self.offer_button.setObjectName("SendButton")
        self.offer_button.clicked.connect(self._on_offer_button_clicked)
        layout.addWidget(self.offer_button, 0, Qt.AlignmentFlag.AlignCenter)
        self.offer_label = QLabel()
        self.offer_label.setObjectName("WelcomeText")
        self.offer_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.offer_label.setWordWrap(True)
        self.offer_label.setFixedWidth(TEXT_WIDTH)
        layout.addWidget(self.offer_label, 0, Qt.AlignmentFlag.AlignCenter)
        self.download_bar = QProgressBar()
        self.download_bar.setTextVisible(False)
        self.download_bar.setFixedSize(360, 8)
        self.download_bar.hide()
        layout.addWidget(self.download_bar, 0, Qt.AlignmentFlag.AlignCenter)
        layout.addSpacing(6)
        buttons = QHBoxLayout()
        buttons.setSpacing(8)
        self.choose_button = QPushButton("Choose a model file…")
        self.choose_button.setIcon(icon("folder"))
        self.choose_button.clicked.connect(self._on_choose_button_clicked)
        buttons.addWidget(self.choose_button)
        self.browse_button = QPushButton("Browse models…")
        self.browse_button.setIcon(icon("search"))
        self.browse_button.clicked.connect(self._on_browse_button_clicked)
        buttons.addWidget(self.browse_button)
        layout.addLayout(buttons)
        layout.setAlignment(buttons, Qt.AlignmentFlag.AlignCenter)
        self.set_offer(None, "")
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
            # The quantization too: two files of one model differ only there.
            quantization = names.quantization(Path(path).name)
            text = model_name(path) + (f" · {quantization}" if quantization else "")
            item = QListWidgetItem(icon("model"), text)
            item.setToolTip(path)
            item.setData(Qt.ItemDataRole.UserRole, path)
            self.recent_list.addItem(item)
        self.recent_title.setVisible(bool(existing))
        self.recent_list.setVisible(bool(existing))

    def set_message(self, text: str) -> None:
        """Replace the explanation (e.g. after a model failed to load)."""
        self.message.setText(text)

    def set_offer(self, button_text: str | None, description: str) -> None:
        """Offer one model: ``button_text`` such as "Download Qwen3 4B (2.5 GB)"
        and one line about it; None offers nothing."""
        self._offer_text = button_text or ""
        self.offer_button.setVisible(button_text is not None)
        self.offer_button.setText(self._offer_text)
        self.offer_button.setEnabled(True)
        self.offer_label.setVisible(bool(description))
        self.offer_label.setText(description)
        self.download_bar.hide()

    def show_download(self, fraction: float | None, text: str, running: bool) -> None:
        """Show the offered model's download: how far (None: no measure yet),
        a line of detail, and whether it is still under way."""
        self.offer_button.setEnabled(not running)
        # Clicked again after a failure or a pause, it resumes the download.
        self.offer_button.setText("Downloading…" if running else self._offer_text)
        self.offer_label.show()
        self.offer_label.setText(text)
        self.download_bar.setVisible(running)
        show_fraction(self.download_bar, fraction)

    @Slot()
    def _on_offer_button_clicked(self) -> None:
        self.offer_accepted.emit()

    @Slot()
    def _on_browse_button_clicked(self) -> None:
        self.browse_requested.emit()

    @Slot()
    def _on_choose_button_clicked(self) -> None:
        path = choose_model_file(self)
        if path is not None:
            self.model_chosen.emit(str(path))

    @Slot(QListWidgetItem)
    def _on_recent_list_item_activated(self, item: QListWidgetItem) -> None:
        self.model_chosen.emit(item.data(Qt.ItemDataRole.UserRole))
