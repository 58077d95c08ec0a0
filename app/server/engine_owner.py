"""The server's way to the one thread that owns the model and the service.

Requests queue behind one another there; the queue is bounded, so that a
client flooding the server is told to come back (``Busy``) rather than
piling up work nobody waits for. Who owns that thread differs: ``arbor
serve`` has its own (``EngineThread``), the window lends its engine worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from app.conversation.service import ConversationService

log = logging.getLogger(__name__)

T = TypeVar("T")

# A job for the engine's thread: it gets the service, and its result (or
# exception) ends the future.
EngineJob = Callable[["ConversationService"], Any]
Submit = Callable[[EngineJob], "Future[Any]"]


# Work that follows a reply waits for a pause in the requests, so that a
# client that sends its next request at once does not wait behind it: it runs
# once no request has run or waited for QUIET_S, and at the latest LATEST_S
# after it was asked for while requests keep coming.
QUIET_S = 0.1
LATEST_S = 2.0


class Busy(Exception):
    """The queue is full."""


class EngineOwner:
    """Runs the server's jobs on the engine's thread, at most
    ``queue_limit`` waiting behind the running one.

    ``submit`` hands a job to that thread and returns its future.
    """

    def __init__(self, submit: Submit, queue_limit: int) -> None:
        self._submit = submit
        self._queue_limit = queue_limit
        self._jobs = 0  # running and waiting
        self._later: EngineJob | None = None  # work after replies, not yet queued
        self._later_since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    async def run(self, job: Callable[[ConversationService], T]) -> T:
        """Run ``job`` on the engine's thread; raise ``Busy`` at once when
        the queue is full."""
        if self._jobs > self._queue_limit:
            raise Busy
        self._jobs += 1
        try:
            result: T = await asyncio.wrap_future(self._submit(job))
            return result
        finally:
            self._jobs -= 1
            self._wait_for_quiet()

    def after(self, job: EngineJob) -> None:
        """Queue ``job``, work that follows a reply (writing its checkpoints
        out, keeping the storage budget), for the next pause in the requests
        (``QUIET_S``), without waiting for it. Such work does the same each
        time: one asked for later stands for those still waiting."""
        if self._later is None:
            self._later_since = asyncio.get_running_loop().time()
        self._later = job
        self._wait_for_quiet()

    def close(self) -> None:
        """Queue the work after replies still waiting for a pause, now (the
        server stops)."""
        if self._timer is not None:
            self._timer.cancel()
        self._later_since = -LATEST_S  # overdue
        self._queue_later()

    def _wait_for_quiet(self) -> None:
        # (Re)start the wait for a pause, within LATEST_S of the first ask.
        if self._later is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        when = min(loop.time() + QUIET_S, self._later_since + LATEST_S)
        self._timer = loop.call_at(when, self._queue_later)

    def _queue_later(self) -> None:
        self._timer = None
        overdue = asyncio.get_running_loop().time() >= self._later_since + LATEST_S
        if self._jobs and not overdue:
            return  # a request runs or waits: its end starts the wait again
        job, self._later = self._later, None
        if job is None:
            return

        def reported(future: Future[Any]) -> None:
            if not future.cancelled() and future.exception() is not None:
                log.warning("work after a reply failed", exc_info=future.exception())

        self._submit(job).add_done_callback(reported)


class EngineThread:
    """``arbor serve``'s own engine thread: loads the model and opens the
    service there, then runs the jobs it is given, in order."""

    def __init__(self, open_service: Callable[[], ConversationService]) -> None:
        self._open_service = open_service
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="arbor-engine")
        self._service: ConversationService | None = None

    def load(self) -> Future[None]:
        """Begin loading; the future ends when the service is open (or failed)."""
        return self._executor.submit(self._load)

    def _load(self) -> None:
        self._service = self._open_service()

    def submit(self, job: EngineJob) -> Future[Any]:
        """Run ``job`` with the service on the thread (after the load)."""
        return self._executor.submit(self._with_service, job)

    def _with_service(self, job: EngineJob) -> Any:
        if self._service is None:
            raise RuntimeError("the model did not load")
        return job(self._service)

    def close(self) -> None:
        """Finish the queued jobs, then close the service and the model."""

        def closing() -> None:
            service, self._service = self._service, None
            if service is None:
                return
            try:
                service.close()
            finally:
                if service.engine is not None:
                    service.engine.close()
                service.db.close()

        self._executor.submit(closing).result()
        self._executor.shutdown()
