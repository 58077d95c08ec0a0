"""Model downloads on a thread of their own, one at a time, while the chat goes on.

``DownloadController`` lives on the GUI thread for the whole life of the
window (a download goes on when the Models dialog closes); it keeps the state
of every download the window knows of and queues each one to a
``DownloadWorker`` on the ``arbor-downloads`` thread, never the engine's: a
download that takes minutes must not hold up a reply. Requests queue through
a signal, so they run one after another in the order asked for, as jobs do on
the engine thread.

Pause and Cancel never wait for the worker: each request carries a
``threading.Event`` that the running ``pull`` polls between chunks (its
``should_stop``), so the download stops within a chunk and the worker says so
(``download_stopped``). A paused download keeps ``<file>.part``; Resume
queues the request again and the pull asks the server only for the rest.
Cancel also deletes the part, on the worker's thread. A download still
queued, or paused, is paused or cancelled at once on the GUI side (the worker
may be busy with another for minutes); its request ends without a byte
fetched when its turn comes, and the controller ignores that late report.
Downloads an earlier run left (their ``.part`` files) are listed as paused.

The key of a download is its repository and first file (``repo/file``).

A failed download says whether trying again can help (``DownloadState.
retry``): it can after a network failure, a stall, a busy Hub, a full disk;
it cannot after a 401, 403 or 404 (``HubError.transient`` is False), nor
after a second checksum mismatch (the first one removed the part, and a
fresh download may be whole; a second one means the Hub's file is not what
it advertises). The rows then offer Remove and no Resume.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal, Slot

from app.library import names
from app.library.catalog import model_name
from app.library.download import (
    ChecksumMismatch,
    DownloadStopped,
    Progress,
    discard_partial,
    partial_bytes,
    pull,
)
from app.library.hub import HubError
from app.library.installed import LibraryError, ModelLibrary
from app.qt.workers.threads import end_thread, quit_current_thread, worker_thread

log = logging.getLogger(__name__)

# How long closing the window waits for the download thread: a stop is seen
# within a chunk, but a request for a file's metadata may be under way.
SHUTDOWN_WAIT_MS = 15_000

# What kind of failure a download had (``DownloadWorker.download_failed``):
# one that may pass, one that will not, a file that did not match its sha256.
TRANSIENT = "transient"
PERMANENT = "permanent"
MISMATCH = "mismatch"

# The states of a download.
QUEUED = "queued"
DOWNLOADING = "downloading"
VERIFYING = "verifying"
PAUSED = "paused"
FAILED = "failed"
DONE = "done"
ACTIVE = frozenset({QUEUED, DOWNLOADING, VERIFYING})


def download_key(repo: str, first_file: str) -> str:
    """The key of the download of ``repo``'s ``first_file`` (and its parts)."""
    return f"{repo}/{first_file}"


@dataclass(frozen=True)
class DownloadRequest:
    """One run of one download: what to fetch, and its stop flags.

    ``stop`` ends the run (the part stays); ``cancel`` is set with it when
    the part must go too. A resumed download is a new request, with new flags.
    """

    repo: str
    parts: tuple[str, ...]
    stop: threading.Event = field(default_factory=threading.Event)
    cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> str:
        """The download's key (see ``download_key``)."""
        return download_key(self.repo, self.parts[0])


@dataclass
class DownloadState:
    """What the window knows of one download (GUI thread only).

    ``status`` is one of ``queued``, ``downloading``, ``verifying``,
    ``paused``, ``failed`` or ``done``; ``message`` is a failure's one line,
    ``retry`` whether trying it again may help (see the module's docstring),
    ``mismatches`` how many of its runs ended in a checksum mismatch,
    ``path`` the model file once done.
    """

    key: str
    repo: str
    parts: tuple[str, ...]
    name: str
    total: int | None = None
    status: str = QUEUED
    done: int = 0
    speed: float = 0.0
    message: str = ""
    retry: bool = True
    mismatches: int = 0
    path: str | None = None

    @property
    def active(self) -> bool:
        """Whether it is queued or running."""
        return self.status in ACTIVE

    @property
    def fraction(self) -> float | None:
        """How much is done, 0..1, or None while the size is unknown."""
        if not self.total:
            return None
        return min(self.done / self.total, 1.0)

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at the current speed, or None when unknown."""
        return Progress(self.name, self.done, self.total, self.speed).eta_seconds


class DownloadWorker(QObject):
    """Runs downloads on the download thread, one per call of ``run``.

    Parameters
    ----------
    library
        Where downloads go (its models folder) and are recorded.
    endpoint
        The Hub's address; None: ``HF_ENDPOINT`` or the Hub itself.

    Signals
    -------
    download_started(str)
        The download of this key began (it had waited in the queue).
    download_progressed(str, qint64, qint64, float, str)
        Key, bytes done, bytes in all (0: unknown), bytes per second, phase
        (``downloading`` or ``verifying``).
    download_finished(str, str)
        Key and the model file's path: downloaded, verified and recorded.
    download_failed(str, str, str)
        Key, why in one line, and the kind of failure: ``TRANSIENT``,
        ``PERMANENT`` or ``MISMATCH``.
    download_stopped(str, bool)
        Key, and True if paused (the part stays) or False if cancelled (the
        part is gone).
    """

    download_started = Signal(str)
    # Byte counts as "qint64": a Python int crosses threads as a 32-bit int.
    download_progressed = Signal(str, "qint64", "qint64", float, str)  # type: ignore[arg-type]
    download_finished = Signal(str, str)
    download_failed = Signal(str, str, str)
    download_stopped = Signal(str, bool)

    def __init__(self, library: ModelLibrary, endpoint: str | None = None) -> None:
        super().__init__()
        self._library = library
        self._endpoint = endpoint

    @Slot(object)
    def run(self, request: DownloadRequest) -> None:
        """Download (or resume) one request; never raises expected errors."""
        key = request.key
        if request.stop.is_set():  # paused or cancelled while it waited
            self._stopped(request)
            return
        self.download_started.emit(key)

        def progressed(progress: Progress) -> None:
            self.download_progressed.emit(
                key, progress.done, progress.total or 0, progress.speed, progress.phase
            )

        try:
            pulled = pull(
                request.repo,
                list(request.parts),
                self._library.models_dir,
                endpoint=self._endpoint,
                on_progress=progressed,
                should_stop=request.stop.is_set,
            )
            model = self._library.record_download(pulled)
        except DownloadStopped:
            self._stopped(request)
            return
        except (HubError, LibraryError, OSError) as exc:
            # HubError's own text is the one line (network, gated, no space,
            # checksum); an OSError here is the models folder (read-only, gone).
            log.info("download of %s failed: %s", key, exc)
            self.download_failed.emit(key, _one_line(exc), _failure_kind(exc))
            return
        except Exception:
            # A bug: let the window leave the download's busy state, then let
            # the exception reach sys.excepthook (the crash dialog). Trying
            # again runs into the same bug.
            self.download_failed.emit(
                key, "internal error (see the crash report)", PERMANENT
            )
            raise
        self.download_finished.emit(key, model.path)

    @Slot(object)
    def discard(self, request: DownloadRequest) -> None:
        """Delete what a paused or failed download left (Cancel; the
        controller has said so already)."""
        self._discard(request)

    @Slot()
    def shut_down(self) -> None:
        """End the thread's event loop (runs on the thread, after every request
        queued before it: they stop at once, their flags being set)."""
        quit_current_thread()

    def _stopped(self, request: DownloadRequest) -> None:
        cancelled = request.cancel.is_set()
        if cancelled:
            self._discard(request)
        self.download_stopped.emit(request.key, not cancelled)

    def _discard(self, request: DownloadRequest) -> None:
        try:
            discard_partial(self._library.models_dir, request.repo, list(request.parts))
        except (HubError, OSError) as exc:  # nothing to tell: it was let go
            log.warning("the part of %s was not deleted: %s", request.key, exc)


class DownloadController(QObject):
    """The window's handle on downloads: their states, the queue, the thread.

    Parameters
    ----------
    library
        Where downloads go and are recorded.
    endpoint
        The Hub's address (tests give their own); None in production, where
        ``huggingface_hub`` reads ``HF_ENDPOINT`` itself.
    parent
        The Qt parent.

    Signals
    -------
    download_queued(str)
        A download the window did not know of was added (its state is in
        ``state(key)``).
    download_started(str), download_progressed(str, qint64, qint64, float, str),
    download_finished(str, str), download_failed(str, str),
    download_stopped(str, bool)
        As ``DownloadWorker``'s, on the GUI thread, after the state changed.
        A cancelled download's state is gone by then.
    """

    download_queued = Signal(str)
    download_started = Signal(str)
    # Byte counts as "qint64": a Python int crosses threads as a 32-bit int.
    download_progressed = Signal(str, "qint64", "qint64", float, str)  # type: ignore[arg-type]
    download_finished = Signal(str, str)
    download_failed = Signal(str, str)
    download_stopped = Signal(str, bool)

    _run_requested = Signal(object)
    _discard_requested = Signal(object)
    _shutdown_requested = Signal()

    def __init__(
        self,
        library: ModelLibrary,
        endpoint: str | None = None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.library = library
        self._states: dict[str, DownloadState] = {}
        self._requests: dict[str, DownloadRequest] = {}
        self._worker = DownloadWorker(library, endpoint)
        self._thread = worker_thread(self._worker, "arbor-downloads")
        self._run_requested.connect(self._worker.run)
        self._discard_requested.connect(self._worker.discard)
        self._shutdown_requested.connect(self._worker.shut_down)
        self._worker.download_started.connect(self._on_worker_download_started)
        self._worker.download_progressed.connect(self._on_worker_download_progressed)
        self._worker.download_finished.connect(self._on_worker_download_finished)
        self._worker.download_failed.connect(self._on_worker_download_failed)
        self._worker.download_stopped.connect(self._on_worker_download_stopped)
        self._thread.start()
        self._find_unfinished()

    # --- what the views read ------------------------------------------------------

    def downloads(self) -> list[DownloadState]:
        """Every download known, in the order they were asked for."""
        return list(self._states.values())

    def state(self, key: str) -> DownloadState | None:
        """The state of the download ``key``, or None."""
        return self._states.get(key)

    def current(self) -> DownloadState | None:
        """The download running now (else the next one queued), or None."""
        active = [s for s in self._states.values() if s.active]
        running = [s for s in active if s.status != QUEUED]
        return next(iter(running or active), None)

    # --- what the views ask for ---------------------------------------------------

    def download(
        self, repo: str, parts: tuple[str, ...], name: str, size: int | None = None
    ) -> str:
        """Queue the download of ``parts`` of ``repo`` (a model's files, first
        part first) and return its key; one already queued or running is left
        as it is, a paused or failed one resumes."""
        key = download_key(repo, parts[0])
        state = self._states.get(key)
        if state is None:
            self._states[key] = DownloadState(key, repo, parts, name, size)
            self._queue(key)
            self.download_queued.emit(key)
        elif not state.active:
            self.resume(key)
        return key

    def pause(self, key: str) -> None:
        """Stop a queued or running download; its part stays for a resume."""
        request = self._requests.get(key)
        if request is None:
            return
        request.stop.set()
        state = self._states[key]
        if state.status == QUEUED:
            # Not started: paused now, not when its turn comes, which may be
            # after another download of many minutes (it then ends at once).
            del self._requests[key]
            state.status = PAUSED
            self.download_stopped.emit(key, True)

    def resume(self, key: str) -> None:
        """Queue a paused or failed download again; it fetches only the rest."""
        state = self._states.get(key)
        if state is not None and not state.active:
            self._queue(key)
            self.download_queued.emit(key)

    def cancel(self, key: str) -> None:
        """Stop a download and delete what it fetched."""
        state = self._states.get(key)
        if state is None:
            return
        request = self._requests.get(key)
        if request is not None:
            request.cancel.set()
            request.stop.set()
            if state.status != QUEUED:
                return  # running: it stops, deletes its part, then says so
            # Queued: gone now; when its turn comes it deletes any part an
            # earlier run left.
            del self._requests[key]
        elif state.status != DONE:
            # Paused or failed: only its part is left, deleted on the download
            # thread (after the download running there, if any, which may take
            # a while: the row need not wait for that).
            self._discard_requested.emit(DownloadRequest(state.repo, state.parts))
        del self._states[key]
        self.download_stopped.emit(key, False)

    def shut_down(self) -> None:
        """Pause every download (parts stay for the next start) and end the
        thread (blocking)."""
        for request in self._requests.values():
            request.stop.set()
        end_thread(self._thread, self._shutdown_requested, SHUTDOWN_WAIT_MS)

    # --- internals ----------------------------------------------------------------

    def _queue(self, key: str) -> None:
        state = self._states[key]
        request = DownloadRequest(state.repo, state.parts)
        self._requests[key] = request
        state.status, state.message, state.speed = QUEUED, "", 0.0
        state.retry = True
        self._run_requested.emit(request)

    def _find_unfinished(self) -> None:
        """List the downloads an earlier run left unfinished (``.part`` files
        in the models folder) as paused, so that they can be resumed."""
        root = self.library.models_dir
        if not root.is_dir():
            return
        for part in sorted(root.glob("*/*/**/*.gguf.part")):
            # models/owner/name/file: see app.library.download.destination.
            where = part.relative_to(root).parts
            repo = "/".join(where[:2])
            parts = tuple(names.split_siblings("/".join(where[2:])[: -len(".part")]))
            key = download_key(repo, parts[0])
            if key in self._states:
                continue
            try:
                have = partial_bytes(root, repo, list(parts))
                note = part.with_name(part.name + ".json")
                size = json.loads(note.read_text(encoding="utf-8")).get("size")
            except (HubError, OSError, ValueError):
                continue  # not a download of ours: leave it alone
            # For a split model the note has this part's size only.
            total = size if isinstance(size, int) and len(parts) == 1 else None
            name = model_name(parts[0], repo=repo, catalog=self.library.catalog)
            self._states[key] = DownloadState(
                key, repo, parts, name, total, status=PAUSED, done=have
            )

    def _current(self, key: str) -> DownloadState | None:
        """The state of ``key`` if its latest request is still to be reported,
        else None (a report of a request paused or cancelled while queued,
        which the controller settled already)."""
        request = self._requests.get(key)
        if request is None or request.stop.is_set():
            return None
        return self._states.get(key)

    @Slot(str)
    def _on_worker_download_started(self, key: str) -> None:
        state = self._current(key)
        if state is not None:
            state.status = DOWNLOADING
            self.download_started.emit(key)

    @Slot(str, "qint64", "qint64", float, str)
    def _on_worker_download_progressed(
        self, key: str, done: int, total: int, speed: float, phase: str
    ) -> None:
        state = self._current(key)
        if state is None:
            return  # a report from before Pause or Cancel
        state.done, state.speed = done, speed
        state.total = total or state.total
        state.status = VERIFYING if phase == "verifying" else DOWNLOADING
        self.download_progressed.emit(key, done, total, speed, phase)

    @Slot(str, str)
    def _on_worker_download_finished(self, key: str, path: str) -> None:
        self._requests.pop(key, None)
        state = self._states.get(key)
        if state is not None:
            state.status, state.path, state.speed = DONE, path, 0.0
            state.done = state.total or state.done
        self.download_finished.emit(key, path)

    @Slot(str, str, str)
    def _on_worker_download_failed(self, key: str, message: str, kind: str) -> None:
        self._requests.pop(key, None)
        state = self._states.get(key)
        if state is not None:
            state.status, state.message, state.speed = FAILED, message, 0.0
            if kind == MISMATCH:
                state.mismatches += 1
            # One mismatch may be bytes spoilt on the way (the part is gone,
            # a new download starts afresh); a second is the Hub's file.
            state.retry = kind == TRANSIENT or (
                kind == MISMATCH and state.mismatches < 2
            )
        self.download_failed.emit(key, message)

    @Slot(str, bool)
    def _on_worker_download_stopped(self, key: str, paused: bool) -> None:
        request = self._requests.get(key)
        if request is None or not request.stop.is_set():
            # Settled when it was paused or cancelled while queued, or an
            # older request's report while a newer one waits.
            return
        del self._requests[key]
        state = self._states.get(key)
        if state is None:
            return
        if paused:
            state.status, state.speed = PAUSED, 0.0
            # What is on disk, not the last report: a resume starts there.
            models_dir = self.library.models_dir
            state.done = partial_bytes(models_dir, state.repo, list(state.parts))
        else:
            del self._states[key]
        self.download_stopped.emit(key, paused)


def _failure_kind(exc: BaseException) -> str:
    """``MISMATCH``, ``PERMANENT`` or ``TRANSIENT`` for a download's failure.

    Only the Hub says a failure is for good (``HubError.transient``); the
    models folder (``OSError``) and the library's records can be put right
    and tried again.
    """
    if isinstance(exc, ChecksumMismatch):
        return MISMATCH
    if isinstance(exc, HubError) and not exc.transient:
        return PERMANENT
    return TRANSIENT


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__
