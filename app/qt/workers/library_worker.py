"""Hub searches, file listings and changes to the installed models, off the GUI
thread.

A search or a listing is a network request (a second, or the Hub's timeout
when offline); adding and removing a model write the library's manifest and
delete files. They run one after another on the ``arbor-library`` thread,
not on the download thread, where they would wait for a download of many
minutes to end, nor on the GUI thread, which must never wait for the
network. Each search and listing has an id, so that the dialog can drop the
answer to a question it no longer asks (the user searched again).

``ModelServices`` bundles what the window needs for models, as the
composition root builds it.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.library.hub import HubError, list_files, search
from app.library.installed import InstalledModel, LibraryError, ModelLibrary
from app.qt.workers.download_worker import DownloadController
from app.qt.workers.threads import end_thread, quit_current_thread, worker_thread
from app.text.quantities import format_bytes

log = logging.getLogger(__name__)

# How long closing the window waits for a search under way (the Hub's own
# timeout is 10 s).
SHUTDOWN_WAIT_MS = 15_000
# Repositories a search shows at most.
SEARCH_LIMIT = 30


class LibraryWorker(QObject):
    """Runs Hub requests and manifest changes on the library thread.

    Parameters
    ----------
    library
        The installed models.
    endpoint
        The Hub's address; None: ``HF_ENDPOINT`` or the Hub itself.

    Signals
    -------
    search_finished(int, object)
        A search's id and its ``list[RemoteRepository]``, most downloaded first.
    files_listed(int, str, object)
        A listing's id, the repository and its ``list[RemoteFile]``.
    request_failed(int, str)
        A search's or listing's id and why it failed, in one line.
    library_changed(str)
        The installed models changed; a note for the user ("" for none).
    library_failed(str)
        Adding or removing a model failed, in one line.
    """

    search_finished = Signal(int, object)
    files_listed = Signal(int, str, object)
    request_failed = Signal(int, str)
    library_changed = Signal(str)
    library_failed = Signal(str)

    def __init__(self, library: ModelLibrary, endpoint: str | None = None) -> None:
        super().__init__()
        self._library = library
        self._endpoint = endpoint

    @Slot(int, str)
    def search(self, request_id: int, query: str) -> None:
        """Search the Hub for GGUF repositories matching ``query``."""
        try:
            found = search(query, limit=SEARCH_LIMIT, endpoint=self._endpoint)
        except HubError as exc:
            self.request_failed.emit(request_id, str(exc))
            return
        self.search_finished.emit(request_id, found)

    @Slot(int, str)
    def list_files(self, request_id: int, repo: str) -> None:
        """List the GGUF files of ``repo`` with their sizes."""
        try:
            files = list_files(repo, endpoint=self._endpoint)
        except HubError as exc:
            self.request_failed.emit(request_id, str(exc))
            return
        self.files_listed.emit(request_id, repo, files)

    @Slot(str)
    def add_file(self, path: str) -> None:
        """Add a GGUF file the user has, by path (it is not copied)."""
        try:
            model = self._library.add_file(Path(path))
        except (LibraryError, OSError) as exc:
            self.library_failed.emit(str(exc))
            return
        self.library_changed.emit(f"Added {model.name} ({model.path})")

    @Slot(object)
    def remove(self, model: InstalledModel) -> None:
        """Forget ``model``; delete its file if Arbor downloaded it."""
        try:
            freed = self._library.remove(model)
        except (LibraryError, OSError) as exc:
            self.library_failed.emit(f"{model.name} was not removed: {exc}")
            return
        if model.source == "downloaded":
            note = f"Removed {model.name}: {format_bytes(freed)} freed"
        else:
            note = f"Forgot {model.name}; the file stays at {model.path}"
        self.library_changed.emit(note)

    @Slot(str)
    def touch(self, path: str) -> None:
        """Note that the model at ``path`` was just loaded (its "last used")."""
        try:
            self._library.touch(Path(path))
        except OSError as exc:  # a date in a list: not worth a message
            log.warning("last use of %s not recorded: %s", path, exc)
            return
        self.library_changed.emit("")

    @Slot()
    def shut_down(self) -> None:
        """End the thread's event loop (runs on the thread)."""
        quit_current_thread()


class LibraryController(QObject):
    """The window's handle on the library thread.

    Parameters
    ----------
    library
        The installed models.
    endpoint
        The Hub's address (tests give their own); None in production.
    parent
        The Qt parent.

    Signals
    -------
    search_finished(int, object), files_listed(int, str, object),
    request_failed(int, str), library_changed(str), library_failed(str)
        As ``LibraryWorker``'s, delivered on the GUI thread.
    """

    search_finished = Signal(int, object)
    files_listed = Signal(int, str, object)
    request_failed = Signal(int, str)
    library_changed = Signal(str)
    library_failed = Signal(str)

    _search_requested = Signal(int, str)
    _listing_requested = Signal(int, str)
    _add_requested = Signal(str)
    _remove_requested = Signal(object)
    _touch_requested = Signal(str)
    _shutdown_requested = Signal()

    def __init__(
        self,
        library: ModelLibrary,
        endpoint: str | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._worker = LibraryWorker(library, endpoint)
        self._thread = worker_thread(self._worker, "arbor-library")
        self._search_requested.connect(self._worker.search)
        self._listing_requested.connect(self._worker.list_files)
        self._add_requested.connect(self._worker.add_file)
        self._remove_requested.connect(self._worker.remove)
        self._touch_requested.connect(self._worker.touch)
        self._shutdown_requested.connect(self._worker.shut_down)
        # Signal to signal: delivered on the GUI thread, where this object lives.
        self._worker.search_finished.connect(self.search_finished)
        self._worker.files_listed.connect(self.files_listed)
        self._worker.request_failed.connect(self.request_failed)
        self._worker.library_changed.connect(self.library_changed)
        self._worker.library_failed.connect(self.library_failed)
        self._thread.start()

    def search(self, query: str) -> int:
        """Search the Hub; the answer comes with the id returned."""
        request_id = next(self._ids)
        self._search_requested.emit(request_id, query)
        return request_id

    def list_files(self, repo: str) -> int:
        """List ``repo``'s GGUF files; the answer comes with the id returned."""
        request_id = next(self._ids)
        self._listing_requested.emit(request_id, repo)
        return request_id

    def add_file(self, path: Path) -> None:
        """Add a model file by path."""
        self._add_requested.emit(str(path))

    def remove(self, model: InstalledModel) -> None:
        """Remove (a downloaded) or forget (an added) model."""
        self._remove_requested.emit(model)

    def touch(self, path: Path) -> None:
        """Record that the model at ``path`` was loaded now."""
        self._touch_requested.emit(str(path))

    def shut_down(self) -> None:
        """End the library thread (blocking; a search under way ends first)."""
        end_thread(self._thread, self._shutdown_requested, SHUTDOWN_WAIT_MS)


@dataclass(frozen=True)
class ModelServices:
    """What the window needs for models, built by the composition root.

    ``library`` is read on the GUI thread (a small JSON file and a folder
    scan); every change goes through ``downloads`` or ``tasks``.
    ``starter`` is the starter model, listed among the installed ones.
    """

    library: ModelLibrary
    downloads: DownloadController
    tasks: LibraryController
    starter: Path | None = None

    @classmethod
    def create(
        cls, library: ModelLibrary, starter: Path | None, endpoint: str | None = None
    ) -> ModelServices:
        """Start the download and library threads for ``library``."""
        return cls(
            library,
            DownloadController(library, endpoint),
            LibraryController(library, endpoint),
            starter,
        )

    def shut_down(self) -> None:
        """Pause the downloads (their parts stay) and end both threads."""
        self.downloads.shut_down()
        self.tasks.shut_down()
