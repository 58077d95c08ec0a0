"""The engine worker: runs the window's jobs on one thread, and reports them
through signals.

llama.cpp contexts are not safe under concurrent calls, so a single
``EngineWorker`` lives on one long-lived ``QThread`` and runs the jobs it is
sent one after another. What a job does is Qt-free (``app/runner``): here,
on this thread, or in a child process while the model is placed on workers
(``app/runner/host.py``); this object turns what the job streams into
signals. It never touches widgets.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, Signal, Slot

from app import jobs
from app.conversation.service import ConversationService
from app.jobs.results import Failed
from app.qt.workers.threads import quit_current_thread
from app.runner.host import EngineHost
from app.runner.job_runner import Reports
from storage.db import Database
from storage.errors import StorageUnavailable

log = logging.getLogger(__name__)


class EngineWorker(QObject):
    """Runs jobs on the engine thread.

    Signals
    -------
    started(object)
        This job began.
    token_received(str)
        A piece of streamed reply text (the answer).
    thinking_received(str)
        A piece of streamed reasoning ("thinking"), which comes before the
        answer in models that reason.
    alternative_received(int, str)
        A piece of the answer of alternative ``index`` (replies generated
        together); their reasoning is not streamed.
    progress(int, int)
        How far long work of this job got: tokens of a prompt (or of a branch
        reprocessed) decoded and in all, or a model load's per mille and 1000.
    failed(object, str)
        This job failed with a message written for a person.
    finished(object)
        A job ended (after success *and* failure) with its ``JobResult``.
    gpu_checked(bool)
        Whether llama.cpp found a GPU to offload layers to (``check_gpu``).
    """

    started = Signal(object)
    token_received = Signal(str)
    thinking_received = Signal(str)
    alternative_received = Signal(int, str)
    progress = Signal(int, int)
    failed = Signal(object, str)
    finished = Signal(object)
    gpu_checked = Signal(bool)

    def __init__(self, db: Database) -> None:
        super().__init__()
        # Set from the GUI thread, polled here between tokens: a threading.Event
        # is the cheapest thread-safe flag and needs no event loop round trip.
        self.cancel_requested = threading.Event()
        self._host = EngineHost(
            db,
            Reports(
                on_token=self.token_received.emit,
                on_thinking=self.thinking_received.emit,
                on_alternative=self.alternative_received.emit,
                on_progress=self.progress.emit,
                should_stop=self.cancel_requested.is_set,
            ),
        )

    @property
    def _service(self) -> ConversationService:
        """The service on this thread (tests read which model it holds)."""
        return self._host.local.service

    def request_stop(self) -> None:
        """Stop the running job, here or in the engine's child process (any
        thread)."""
        self.cancel_requested.set()
        self._host.request_stop()

    @Slot()
    def check_gpu(self) -> None:
        """Ask llama.cpp whether it can offload layers, which loads libllama
        (about 0.2 s): here, so that the window is on screen first."""
        from app.backend.engine import gpu_offload_supported

        try:
            supported = gpu_offload_supported()
        except (OSError, RuntimeError) as exc:
            # A build that cannot load says so when a model is loaded; here
            # it only means no GPU to offer.
            log.warning("could not ask llama.cpp for a GPU: %s", exc)
            supported = False
        self.gpu_checked.emit(supported)

    @Slot(object)
    def run(self, job: jobs.Job) -> None:
        """Run one job and report it; never raises expected errors."""
        self.started.emit(job)
        try:
            result = self._host.run(job)
        except Exception:
            # A bug: let the window leave its busy state, then let the exception
            # reach sys.excepthook (the crash dialog) with its traceback.
            self.finished.emit(Failed(job, "internal error"))
            raise
        finally:
            # A Stop is used up by the job it reached. Cleared at the end, not
            # the start: one pressed while a reply waits in the queue (shown as
            # coming) stops that reply rather than being forgotten.
            self.cancel_requested.clear()
            self._host.clear_stop()
        if isinstance(result, Failed) and result.for_dialog:
            self.failed.emit(job, result.error)
        self.finished.emit(result)

    @Slot()
    def shut_down(self) -> None:
        """Free the model and end the thread's event loop (runs on the thread)."""
        try:
            self._host.shutdown()  # the model freed, the MCP servers stopped
        except StorageUnavailable as exc:  # nobody is left to tell
            log.error("checkpoints not written at shutdown: %s", exc)
        quit_current_thread()

    def close(self) -> None:
        """Write the queued checkpoints and free the model (the engine's
        child process ends); jobs that need no model still run. Raises
        ``StorageUnavailable`` if a write failed."""
        self._host.close()
