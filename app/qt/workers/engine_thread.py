"""The GUI-side handle of the engine worker: its thread, its queue, its shutdown.

The window submits jobs here (``app/jobs``); each is queued to the
worker through a signal, so it runs on the engine thread, one at a time, in
order.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal, Slot

from app import jobs
from app.jobs.results import JobResult
from app.qt.workers.engine_worker import EngineWorker
from app.qt.workers.threads import end_thread, worker_thread
from storage.db import Database

log = logging.getLogger(__name__)

# How long closing the window waits for the engine thread. Generation stops
# within a token; only loading a large model can take longer.
SHUTDOWN_WAIT_MS = 30_000


class EngineController(QObject):
    """Start the engine thread and queue jobs to it.

    Signals
    -------
    started(object), token_received(str), thinking_received(str),
    alternative_received(int, str), progress(int, int), failed(object, str),
    finished(object)
        Forwarded from the worker (see ``EngineWorker``), delivered on the
        GUI thread.
    """

    started = Signal(object)
    token_received = Signal(str)
    thinking_received = Signal(str)
    alternative_received = Signal(int, str)
    progress = Signal(int, int)
    failed = Signal(object, str)
    finished = Signal(object)

    _job_requested = Signal(object)
    _gpu_check_requested = Signal()
    _shutdown_requested = Signal()

    def __init__(self, db: Database, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._worker = EngineWorker(db)
        self._thread = worker_thread(self._worker, "arbor-engine")
        self._job_requested.connect(self._worker.run)
        self._shutdown_requested.connect(self._worker.shut_down)
        self._worker.started.connect(self.started)
        self._worker.token_received.connect(self.token_received)
        self._worker.thinking_received.connect(self.thinking_received)
        self._worker.alternative_received.connect(self.alternative_received)
        self._worker.progress.connect(self.progress)
        self._worker.failed.connect(self.failed)
        self._worker.finished.connect(self._on_worker_finished)
        self._gpu_check_requested.connect(self._worker.check_gpu)
        self._worker.gpu_checked.connect(self._on_gpu_checked)
        self._pending = 0
        # Whether llama.cpp can offload layers; None until the worker has
        # asked, its first task, so the GUI thread never loads libllama.
        self.gpu_supported: bool | None = None
        self._thread.start()
        self._gpu_check_requested.emit()

    @property
    def worker(self) -> EngineWorker:
        """The worker on the engine thread (for diagnostics and tests only)."""
        return self._worker

    @property
    def busy(self) -> bool:
        """Whether a job is queued or running."""
        return self._pending > 0

    def submit(self, job: jobs.Job) -> None:
        """Queue a job; its result arrives through ``finished``."""
        if not self._thread.isRunning():
            log.warning("engine thread stopped; dropping %s", type(job).__name__)
            return
        self._pending += 1
        self._job_requested.emit(job)

    def stop(self) -> None:
        """Ask the running job to stop: a generation after the current token,
        a prompt read or a branch reprocessed after the current batch, a
        model load at its next progress report."""
        self._worker.request_stop()

    def shut_down(self) -> None:
        """Stop any generation, free the model and end the thread (blocking)."""
        if self._thread.isRunning():
            self.stop()
        end_thread(self._thread, self._shutdown_requested, SHUTDOWN_WAIT_MS)

    @Slot(bool)
    def _on_gpu_checked(self, supported: bool) -> None:
        self.gpu_supported = supported

    @Slot(object)
    def _on_worker_finished(self, result: JobResult) -> None:
        self._pending -= 1
        self.finished.emit(result)
