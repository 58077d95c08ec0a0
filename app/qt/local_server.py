"""The window's local server: ``app.server``'s ``LocalServer`` with the
window's engine thread lent to it.

The server runs on a thread of its own; each piece of work it has for the
model becomes a ``ServeRequest`` job, queued through the GUI thread to the
engine worker like the window's own jobs, so that one thread still owns the
model and the window shows "serving a request" while one runs.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from app import jobs
from app.server.http_api import NotServed, ServedModel
from app.server.serve import Listen, LocalServer


class LocalServerController(QObject):
    """Start and stop the window's local server.

    Signals
    -------
    request_logged(str)
        One line per request (status, time, tokens), on the GUI thread.
    running_changed(str)
        The base URL once serving, "" once stopped.
    """

    request_logged = Signal(str)
    running_changed = Signal(str)
    _job_wanted = Signal(object)

    def __init__(
        self,
        submit_job: Callable[[jobs.Job], None],
        model_path: Callable[[], str | None],
        loading: Callable[[], bool],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._submit_job = submit_job
        self._model_path = model_path
        self._loading = loading
        # Emitted on the server's thread, delivered here on the GUI thread:
        # the engine controller's queue is the GUI thread's to touch.
        self._job_wanted.connect(self._queue_job)
        self._server = LocalServer(self._submit, self._served, self.request_logged.emit)

    @property
    def url(self) -> str | None:
        """The base URL while serving, else None."""
        return self._server.url

    def start(self, listen: Listen) -> str:
        """Serve at ``listen``; return the base URL (``ServeError`` if it
        cannot be used)."""
        url = self._server.start(listen)
        self.running_changed.emit(url)
        return url

    def stop(self) -> None:
        """Stop serving (at once if no request runs)."""
        if self._server.url is None:
            return
        self._server.stop()
        self.running_changed.emit("")

    def _submit(self, run: Callable[..., Any]) -> Future[Any]:
        # On the server's thread.
        future: Future[Any] = Future()
        self._job_wanted.emit(jobs.ServeRequest(run, future))
        return future

    @Slot(object)
    def _queue_job(self, job: jobs.ServeRequest) -> None:
        self._submit_job(job)

    def _served(self) -> ServedModel | NotServed:
        # On the server's thread: the window's loaded model, if any.
        if self._loading():
            return NotServed.LOADING
        path = self._model_path()
        if path is None:
            return NotServed.NO_MODEL
        try:
            return ServedModel.of_file(Path(path))
        except OSError:
            return NotServed.NO_MODEL  # the file went away: as good as none
