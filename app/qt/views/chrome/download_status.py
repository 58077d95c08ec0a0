"""``DownloadStatus``: downloads where the Models dialog is not — a line in the
status bar, and the offer of a recommended model on the welcome page and,
while only the starter model is there, in a bar above the conversation.

Both offer the best recommended model that fits this computer
(``welcome_offer``); a click downloads it (or uses it, if it is here), the
offer shows the progress. The welcome page's model loads when it is ready
(``load_requested``); the bar's waits for "Use …" (``switch_requested``),
since a chat with the starter may be going on.
The status bar says how the download under way goes, e.g. "Downloading
Qwen3 4B — 43%, 12 MB/s, 1 min left", while the dialog is closed too.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot

from app.library import names
from app.library.catalog import model_name
from app.library.installed import InstalledModel
from app.qt.views.chrome.status_bar import ArborStatusBar
from app.qt.views.library.downloads import describe_download, status_text
from app.qt.views.library.starter_offer import StarterOfferBar
from app.qt.views.library.welcome import WelcomePage, welcome_offer
from app.qt.workers.download_worker import DONE, PAUSED, DownloadState
from app.qt.workers.library_worker import ModelServices
from app.text.quantities import format_bytes


class DownloadStatus(QObject):
    """Shows the downloads in the status bar and the offer on the welcome page.

    Parameters
    ----------
    models
        The library (read) and the downloads (followed, and asked for the
        offered model).
    welcome
        The welcome page.
    status
        The window's status bar.
    n_ctx
        The context size of the settings, which decides what fits.
    parent
        The Qt parent (the window).

    Signals
    -------
    load_requested(str)
        The offered model is here (downloaded now, or earlier): its path.
    switch_requested(str)
        The bar's "Use …" was clicked: load this model instead of the starter.
    """

    load_requested = Signal(str)
    switch_requested = Signal(str)

    def __init__(
        self,
        models: ModelServices,
        welcome: WelcomePage,
        starter_bar: StarterOfferBar,
        status: ArborStatusBar,
        n_ctx: int,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._models = models
        self._welcome = welcome
        self._bar = starter_bar
        self._status = status
        self._n_ctx = n_ctx
        # The download the welcome page started: its model loads when done.
        self.welcome_download: str | None = None
        # The download the starter bar started: "Use …" when done.
        self.bar_download: str | None = None
        self.starter_loaded = False
        welcome.offer_accepted.connect(self._on_welcome_offer_accepted)
        starter_bar.offer_accepted.connect(self._on_starter_bar_offer_accepted)
        downloads = models.downloads
        downloads.download_queued.connect(self._on_downloads_download_queued)
        downloads.download_started.connect(self._on_downloads_download_started)
        downloads.download_progressed.connect(self._on_downloads_download_progressed)
        downloads.download_finished.connect(self._on_downloads_download_finished)
        downloads.download_failed.connect(self._on_downloads_download_failed)
        downloads.download_stopped.connect(self._on_downloads_download_stopped)
        self.offer()

    def set_context_size(self, n_ctx: int) -> None:
        """The settings' context size changed: another model may fit best."""
        self._n_ctx = n_ctx
        self.offer()

    def set_starter_loaded(self, starter: bool) -> None:
        """Whether the loaded model is the starter (the bar offers only then)."""
        self.starter_loaded = starter
        self.offer()

    def offer(self) -> None:
        """Offer the best recommended model that fits (or "Use" it, if here)."""
        entry = welcome_offer(self._models.library.catalog, self._n_ctx)
        # One read of the manifest and the models folder for both offers.
        models = self._models.library.models(self._models.starter)
        button, description, installed = None, "", False
        if entry is not None:
            installed = _installed(models, entry.id) is not None
            if installed:
                button, description = f"Use {entry.name}", entry.description
            else:
                size = format_bytes(entry.size_bytes)
                button = f"Download {entry.name} ({size})"
                description = f"{entry.description} From {entry.repo}, {entry.license}."
        if self.welcome_download is None:  # else its progress shows there
            self._welcome.set_offer(button, description)
        if self.bar_download is None:
            # Beside the starter only: someone with models of their own knows
            # where to find more.
            alone = not any(m.source != "starter" and m.present for m in models)
            wanted = self.starter_loaded and (installed or alone)
            fits = f"{entry.name} fits this computer. " if entry is not None else ""
            self._bar.set_offer(button if wanted else None, fits + description)

    def _installed(self, catalog_id: str) -> str | None:
        return _installed(self._models.library.models(), catalog_id)

    def _show(self) -> None:
        downloads = self._models.downloads
        current = downloads.current()
        waiting = sum(1 for s in downloads.downloads() if s.active) - 1
        self._status.set_download(
            status_text(current, waiting) if current is not None else None
        )
        key = self.welcome_download
        state = downloads.state(key) if key is not None else None
        if key is not None and state is None:  # cancelled in the dialog
            self.welcome_download = None
            self.offer()
        elif state is not None:
            self._welcome.show_download(
                state.fraction, _welcome_text(state), state.active
            )
        key = self.bar_download
        state = downloads.state(key) if key is not None else None
        if key is not None and state is None:
            self.bar_download = None
            self.offer()
        elif state is not None:
            self._bar.show_download(state.fraction, _welcome_text(state), state.active)

    def _start_offered_download(self) -> str | None:
        """Download the offered model; its key (None: nothing is offered)."""
        entry = welcome_offer(self._models.library.catalog, self._n_ctx)
        if entry is None:
            return None
        parts = tuple(names.split_siblings(entry.file))
        return self._models.downloads.download(
            entry.repo, parts, entry.name, entry.size_bytes
        )

    @Slot()
    def _on_starter_bar_offer_accepted(self) -> None:
        entry = welcome_offer(self._models.library.catalog, self._n_ctx)
        path = self._installed(entry.id) if entry is not None else None
        if path is not None:
            self.switch_requested.emit(path)
            return
        self.bar_download = self._start_offered_download()
        self._show()

    @Slot()
    def _on_welcome_offer_accepted(self) -> None:
        entry = welcome_offer(self._models.library.catalog, self._n_ctx)
        if entry is None:
            return
        path = self._installed(entry.id)
        if path is not None:
            self.load_requested.emit(path)
            return
        self.welcome_download = self._start_offered_download()
        self._show()

    @Slot(str)
    def _on_downloads_download_queued(self, _key: str) -> None:
        self._show()

    @Slot(str)
    def _on_downloads_download_started(self, _key: str) -> None:
        self._show()

    @Slot(str, "qint64", "qint64", float, str)
    def _on_downloads_download_progressed(
        self, _key: str, _done: int, _total: int, _speed: float, _phase: str
    ) -> None:
        self._show()

    @Slot(str, str)
    def _on_downloads_download_finished(self, key: str, path: str) -> None:
        self._show()
        if key == self.welcome_download:
            self.welcome_download = None
            self.load_requested.emit(path)
            return
        if key == self.bar_download:
            self.bar_download = None
            self.offer()  # "Use" it now
            return
        state = self._models.downloads.state(key)
        name = state.name if state is not None else model_name(path)
        self._status.showMessage(f"Downloaded {name}: load it in Models…", 8000)
        self.offer()  # "Use" it, if it is the one offered

    @Slot(str, str)
    def _on_downloads_download_failed(self, key: str, message: str) -> None:
        self._show()
        state = self._models.downloads.state(key)
        name = state.name if state is not None else key
        self._status.showMessage(f"Download of {name} failed: {message}", 15000)

    @Slot(str, bool)
    def _on_downloads_download_stopped(self, _key: str, _paused: bool) -> None:
        self._show()


def _welcome_text(state: DownloadState) -> str:
    if state.status == DONE:
        return f"{state.name} is downloaded; loading it…"
    if state.active:
        return f"{state.name}: {describe_download(state)}"
    if state.status == PAUSED:
        return f"{state.name}: paused. Resume it in Models… (Ctrl+Shift+M)."
    return f"{state.name} was not downloaded: {state.message}"


def _installed(models: list[InstalledModel], catalog_id: str) -> str | None:
    # The path of the catalog's model if it is here.
    for model in models:
        if model.catalog_id == catalog_id and model.present:
            return model.path
    return None
