"""The engine in a child process, for a model placed on workers.

llama.cpp's RPC client has no way to fail softly: a worker that stops
answering while a model is loaded on it (or between the hello and the load)
aborts the whole process that uses it, at its next decode or capture (issue
25). So when a model goes to workers, the window's jobs run in a child
process started for it (``multiprocessing``'s "spawn": a fresh interpreter
that imports no Qt), on a ``JobRunner`` of its own over the same database
file; an abort ends the child, not the window.

The parent side, ``ChildEngine``, sends each job through a pipe and reads
back what the job streams (tokens, reasoning, alternatives, progress, each a
small tagged tuple) until its result, a plain picklable dataclass. Stop is a
byte in shared memory that the child's ``should_stop`` reads between tokens
and batches. A pipe that ends before the result means the child died: the
job ends as ``Failed`` with ``engine_lost``, and the workers that no longer
answer a hello are named (``lost_workers``); what the job stored before is
in the database, with every checkpoint written before it. A worker that
stops answering without closing its connection (its machine frozen, its
process stopped) would leave the child blocked in the network for good:
the child bounds each wait for a worker (``worker_sockets``: 60 s), after
which llama.cpp aborts it as for a worker that is gone, and its job ends
the same way, Stop or not. A child still silent long after a Stop (where
that bound does not reach) is ended too.
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import multiprocessing
import signal
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from enum import IntEnum
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

from app import jobs
from app.jobs.results import Failed, JobResult, ModelLoaded
from app.runner.job_runner import JobRunner, Reports
from app.runner.worker_sockets import WorkerSockets
from storage.db import open_database
from storage.errors import StorageUnavailable

log = logging.getLogger(__name__)

# A fresh interpreter, whatever the platform's default: a fork would copy the
# window's threads and Qt state into a process that must not have them.
_CONTEXT = multiprocessing.get_context("spawn")
# Seconds a worker has to answer the hello after the child died: one alive
# answers in milliseconds on any network.
LOST_HELLO_S = 2.0
# Seconds the child has to end after its exit status is asked for, and to
# write its checkpoints and free its model when told to close.
END_WAIT_S = 30.0
# Seconds of silence after a Stop before the child is ended: a worker whose
# machine vanished without closing its connection leaves the child blocked
# in the network for good, and Stop must still end the job. Long, because
# legitimate work can be silent a while after a Stop: reading a long reply's
# checkpoint back from workers is one round trip per V row.
STOP_GRACE_S = 60.0
# How often the wait for the child looks at the Stop byte.
_POLL_S = 0.25


class _Tag(IntEnum):
    """What a message from the child carries."""

    TOKEN = 0
    THINKING = 1
    ALTERNATIVE = 2
    PROGRESS = 3
    RESULT = 4
    BUG = 5


class ChildBug(RuntimeError):
    """A job raised an unexpected exception in the child: a bug, with the
    child's traceback in the message."""


class ChildEngine:
    """A child process running jobs on a model placed on ``workers``.

    Parameters
    ----------
    db_path
        The database file; the child opens it for itself.
    workers
        The workers (``HOST:PORT``) the child's loads use: the ones to ask
        after a death.
    reports
        Where what a job streams goes, in this process.
    stop_flag
        The shared byte the child polls for Stop (``stop_flag()`` makes one).
    """

    def __init__(
        self,
        db_path: Path,
        workers: tuple[str, ...],
        reports: Reports,
        stop_flag: Any,
    ) -> None:
        self.workers = workers
        # Whether the child holds a model now.
        self.has_model = False
        self._reports = reports
        self._stop = stop_flag
        self._connection, child_end = _CONTEXT.Pipe()
        self._process = _CONTEXT.Process(
            target=serve,
            args=(child_end, stop_flag, str(db_path), workers),
            name="arbor-engine",
            daemon=True,  # never outlives the window
        )
        self._process.start()
        # Only the child holds its end now, so a child that dies ends the
        # pipe (EOFError here) rather than leaving it open.
        child_end.close()

    @property
    def pid(self) -> int | None:
        """The child's process id (for logs and diagnostics)."""
        return self._process.pid

    def run(self, job: jobs.Job) -> JobResult:
        """Run ``job`` in the child: its result (its ``job`` is this one), or
        ``Failed`` with ``engine_lost`` if the child died. ``ChildBug`` for a
        bug in the child."""
        reports = self._reports
        try:
            self._connection.send(job)
            while True:
                match self._next_message():
                    case (_Tag.TOKEN, piece):
                        reports.on_token(piece)
                    case (_Tag.THINKING, piece):
                        reports.on_thinking(piece)
                    case (_Tag.ALTERNATIVE, index, piece):
                        reports.on_alternative(index, piece)
                    case (_Tag.PROGRESS, done, total):
                        reports.on_progress(done, total)
                    case (_Tag.BUG, text):
                        raise ChildBug(f"the engine's process failed:\n{text}")
                    case (_Tag.RESULT, result):
                        return self._answered(job, result)
        except (EOFError, OSError):
            return self._lost(job)

    def _next_message(self) -> Any:
        """The child's next message. A child silent for ``STOP_GRACE_S``
        after a Stop is killed (the read then ends with ``EOFError``)."""
        stopped_at: float | None = None
        while not self._connection.poll(_POLL_S):
            if not self._stop.value:
                stopped_at = None
            elif stopped_at is None:
                stopped_at = time.monotonic()
            elif time.monotonic() - stopped_at > STOP_GRACE_S:
                log.error("the engine's process did not stop; ending it")
                self._process.kill()
                self._process.join(END_WAIT_S)
        return self._connection.recv()

    def close(self) -> None:
        """Let the child write what it holds back and free its model, then
        end it (killed if it does not end in time)."""
        if self._process.is_alive():
            with contextlib.suppress(OSError):  # it is ending already
                self._connection.send(None)
            self._process.join(END_WAIT_S)
        if self._process.is_alive():
            log.error("the engine's process did not end; killing it")
            self._process.kill()
            self._process.join(END_WAIT_S)
        self._connection.close()

    def _answered(self, job: jobs.Job, result: JobResult) -> JobResult:
        if isinstance(result, ModelLoaded):
            self.has_model = True
        elif isinstance(result, Failed) and result.model_lost:
            self.has_model = False
        # The window matches results to the jobs it sent, not to copies. (Any:
        # mypy cannot check a replace over a union of result types.)
        return cast(JobResult, replace(cast(Any, result), job=job))

    def _lost(self, job: jobs.Job) -> Failed:
        """The child died under ``job``: which workers no longer answer."""
        self.has_model = False
        self._process.join(END_WAIT_S)
        code = self._process.exitcode
        self._connection.close()
        lost = unanswering(self.workers)
        log.error(
            "the engine's process ended (exit code %s) under %s; lost workers: %s",
            code,
            type(job).__name__,
            ", ".join(lost) or "none",
        )
        return Failed(
            job, lost_message(lost, code), engine_lost=True, lost_workers=lost
        )


def stop_flag() -> Any:
    """A byte in shared memory for Stop: set here (``value = 1``), read by
    the child; no lock, since one writer sets it and a reader only looks."""
    return _CONTEXT.RawValue("b", 0)


def unanswering(workers: Sequence[str]) -> tuple[str, ...]:
    """The workers that do not answer a hello now, in order.

    Asked once the child is gone: it was their only client, so one that
    accepts the connection and says nothing (a frozen machine, a hung
    server) is as lost as one that refuses it.
    """
    # Imported here: it loads ggml's library, which the window's process
    # needs only once a model is asked for.
    from app.backend.rpc_worker import hello

    lost = []
    for address in workers:
        host, _colon, port = address.rpartition(":")
        try:
            hello(host, int(port), LOST_HELLO_S)
        except OSError:
            lost.append(address)
    return tuple(lost)


def lost_message(lost: Sequence[str], exit_code: int | None) -> str:
    """What the user reads when the engine's process died."""
    kept = "Your messages and checkpoints are saved."
    if len(lost) == 1:
        return f"Worker {lost[0]} was lost (it stopped answering). {kept}"
    if lost:
        return (
            f"Workers {', '.join(lost[:-1])} and {lost[-1]} were lost (they "
            f"stopped answering). {kept}"
        )
    if exit_code is not None and exit_code < 0:
        how = f"it was ended by {signal.Signals(-exit_code).name}"
    else:
        how = f"exit status {exit_code}"
    return (
        f"The engine's process ended ({how}), though every worker still answers. {kept}"
    )


def serve(
    connection: Connection, stop: Any, db_path: str, workers: Sequence[str] = ()
) -> None:
    """The child's main: run the jobs that come through ``connection`` until
    ``None`` or the end of the pipe, then write what is held back.

    Parameters
    ----------
    connection
        The child's end of the pipe.
    stop
        The shared Stop byte (``stop_flag``).
    db_path
        The database file.
    workers
        The workers its loads use: each wait for one of them is bounded.
    """
    # Ctrl+C in a terminal reaches the whole process group: the window
    # decides when its engine ends, not the terminal.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A native abort skips Python's handlers; this says where, on stderr.
    faulthandler.enable()
    # A worker that stops answering ends this process, as one that dies.
    sockets = WorkerSockets(workers)
    if workers:
        sockets.start()
    db = open_database(Path(db_path))
    send = connection.send
    runner = JobRunner(
        db,
        Reports(
            on_token=lambda piece: send((_Tag.TOKEN, piece)),
            on_thinking=lambda piece: send((_Tag.THINKING, piece)),
            on_alternative=lambda i, piece: send((_Tag.ALTERNATIVE, i, piece)),
            on_progress=lambda done, total: send((_Tag.PROGRESS, done, total)),
            should_stop=lambda: bool(stop.value),
        ),
    )
    try:
        while (job := connection.recv()) is not None:
            try:
                result = runner.run(job)
            except Exception:
                connection.send((_Tag.BUG, traceback.format_exc()))
                continue
            # The sockets a load made are bounded before the next job uses
            # them, not up to a look later.
            sockets.bound_now()
            connection.send((_Tag.RESULT, result))
    except EOFError:
        pass  # the window is gone
    finally:
        try:
            runner.shutdown()  # the model freed, its MCP servers stopped
        except StorageUnavailable as exc:  # nobody is left to tell
            log.error("checkpoints not written at the end: %s", exc)
        db.close()
