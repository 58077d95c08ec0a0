"""Where the window's jobs run: on the engine thread, or in a child process
while the model is placed on workers.

Without workers nothing changes: every job runs on the engine thread's own
``JobRunner``, as it always did. A ``LoadModel`` whose settings name workers
starts a child process (``ChildEngine``) and every job goes there until a
load without workers, or until the child dies (a worker lost: llama.cpp
aborts the process that used it). Then the job it was running ends as
``Failed`` with ``engine_lost``, no model is loaded, and the jobs that follow
run here again, where those that need no model still work.

A load that changes where the model runs (here to workers, workers to here
or to other workers) frees the old model first, in its own place, so a
failure of the new one leaves no model (``model_lost``). What fails most
often is checked before anything is freed: the file, and, coming from
here, whether every worker answers. A load on the same workers stays in the
same child, whose runner brings the old model back as it does here.

The local server's jobs (``ServeRequest``) carry a callable, which cannot
cross to another process: while on workers their clients get an error.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from app import jobs
from app.backend.errors import BackendError
from app.backend.model_file import check_model_file
from app.conversation.errors import USER_ERRORS
from app.jobs.results import Done, Failed, JobResult, ModelLoaded
from app.runner.child_process import ChildEngine, stop_flag
from app.runner.job_runner import JobRunner, Reports
from storage import node_rows
from storage.db import Database

log = logging.getLogger(__name__)

NOT_ON_WORKERS = (
    "The local server cannot use a model placed on workers (its requests "
    "cannot reach the engine's own process). Load the model on this computer "
    "alone to serve it."
)


class EngineHost:
    """Runs jobs here, or in a child process while the model is on workers.

    Parameters
    ----------
    db
        The open database (the child opens its file for itself).
    reports
        Where what a job streams goes; its ``should_stop`` is the engine
        thread's Stop.
    """

    def __init__(self, db: Database, reports: Reports) -> None:
        self._db = db
        self._reports = reports
        self.local = JobRunner(db, reports)
        self._child: ChildEngine | None = None
        # The child's Stop byte, made with the first child: a window that
        # never uses workers makes nothing for them.
        self._stop: Any = None

    def request_stop(self) -> None:
        """Stop the child's job too (any thread; the local Stop is the
        caller's ``should_stop``)."""
        flag = self._stop
        if flag is not None:
            flag.value = 1

    def clear_stop(self) -> None:
        """A job ended: its Stop is used up."""
        flag = self._stop
        if flag is not None:
            flag.value = 0

    def run(self, job: jobs.Job) -> JobResult:
        """Run ``job`` where the model is; a bug raises (``ChildBug`` for one
        in the child)."""
        child = self._child
        match job:
            case jobs.LoadModel(settings=settings) if settings.workers:
                return self._load_on_workers(job)
            case jobs.LoadModel() if child is not None:
                had_model = child.has_model
                self._end_child()
                return self._lost_unless_loaded(self.local.run(job), had_model)
            case jobs.SaveToolServers() if child is not None:
                # Stored by the child; the sessions here follow the new list.
                self.local.tools.close()
                return self._in_child(child, job)
            case jobs.ServeRequest() if child is not None:
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(BackendError(NOT_ON_WORKERS))
                return Done(job)
            case _ if child is not None:
                return self._in_child(child, job)
            case _:
                return self.local.run(job)

    def close(self) -> None:
        """Free the model wherever it is (the child ends). Raises
        ``StorageUnavailable`` if a write here failed."""
        self._end_child()
        self.local.close()

    def shutdown(self) -> None:
        """End for good: ``close``, and the MCP servers started here stop
        (``close`` alone keeps them: a model load on workers calls it)."""
        self._end_child()
        self.local.shutdown()

    def _load_on_workers(self, job: jobs.LoadModel) -> JobResult:
        """Load ``job``'s model in a child process: the one running on the
        same workers, else a new one (the old model freed first)."""
        workers = job.settings.workers
        child = self._child
        if child is not None and child.workers == workers:
            return self._in_child(child, job)
        had_model = child.has_model if child else self.local.loaded() is not None
        try:
            check_model_file(Path(job.path))
            if child is None:
                # Imported here: it loads ggml's library, needed only now.
                from app.backend import rpc_client

                # Here the workers are free to answer (a child holds its
                # workers' one connection each: it is ended first).
                rpc_client.probe(workers)
        except USER_ERRORS as exc:
            return Failed(job, str(exc))  # nothing was freed
        self._end_child()
        try:
            self.local.close()
        except USER_ERRORS as exc:  # its model is freed all the same
            return Failed(job, str(exc), model_lost=had_model)
        if self._stop is None:
            self._stop = stop_flag()
            # A Stop pressed before the byte existed counts too.
            if self._reports.should_stop():
                self._stop.value = 1
        self._child = ChildEngine(self._db.path, workers, self._reports, self._stop)
        result = self._in_child(self._child, job)
        if not isinstance(result, ModelLoaded):
            self._end_child()  # it holds no model: nothing to keep it for
        return self._lost_unless_loaded(result, had_model)

    def _in_child(self, child: ChildEngine, job: jobs.Job) -> JobResult:
        """Run ``job`` in ``child``; if it died, go on here without it."""
        result = child.run(job)
        if isinstance(result, Failed) and result.engine_lost:
            # Dead: the jobs that follow run here, without a model.
            self._child = None
            try:
                self.local.close()
                # The reply it was writing stays as far as it got, marked
                # as a killed process's are at the next start.
                node_rows.mark_interrupted_generations(self._db)
            except USER_ERRORS as exc:  # the loss is what the user hears of
                log.error("after the engine's process ended: %s", exc)
        return result

    def _end_child(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.close()

    @staticmethod
    def _lost_unless_loaded(result: JobResult, had_model: bool) -> JobResult:
        """A load in a new place that failed after the old model was freed
        in its own: no model is loaded now."""
        if not isinstance(result, Failed) or not had_model:
            return result
        if result.model_lost or result.engine_lost:  # said so already
            return result
        log.info("the load in a new place failed; no model is loaded")
        return replace(
            result,
            error=f"{result.error} The model loaded before was unloaded first.",
            model_lost=True,
        )
