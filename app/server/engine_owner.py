"""The server's way to the one thread that owns the model and the service.

Requests queue behind one another there; the queue is bounded, so that a
client flooding the server is told to come back (``Busy``) rather than
piling up work nobody waits for. Who owns that thread differs: ``arbor
serve`` has its own (``ServeEngineThread``), the window lends its engine worker.

The owner hands that thread one job at a time and picks the next itself, so
that a person's request never waits behind a client's background tasks
(``Background``: titles, tags, follow-ups, see ``tasks``): requests go
first, in the order they came, then background jobs, in theirs. A request
that comes while a background job runs sets that job's ``stop`` event,
which the reply checks between tokens: the job ends at its next token (or,
still decoding its prompt, at its first), and the request starts then. A
job whose answer is not sent yet is run again from the start once no request
waits (a partial title is no title); one that has streamed part of its
answer ends with what it had. A job gives way at most ``MAX_YIELDS`` times,
then runs to its end, so that steady requests cannot starve it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast

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

# How often a background job gives way to requests before it runs to its
# end whatever waits (its answer is due too: Open WebUI shows the title).
MAX_YIELDS = 3


class Busy(Exception):
    """The queue is full."""


@dataclass(frozen=True)
class Background:
    """A background job: it runs after every waiting request, and ``stop``
    is set when a request comes while it runs (the job must end soon after:
    a reply checks it between tokens). ``again``: whether it is then run
    again from the start (its answer is not sent yet) or ends with what it
    had (it streamed part of it)."""

    job: EngineJob
    stop: threading.Event
    again: bool

    def __call__(self, service: ConversationService) -> Any:
        """Run the job."""
        return self.job(service)


@dataclass(eq=False)  # found in the queues by identity
class _Queued:
    """A job handed to ``run``, and where its result goes."""

    job: EngineJob
    done: asyncio.Future[Any]
    yields: int = 0  # how often it gave way so far
    stopped: bool = False  # asked to give way while it runs now

    @property
    def background(self) -> Background | None:
        return self.job if isinstance(self.job, Background) else None


class EngineOwner:
    """Runs the server's jobs on the engine's thread, at most
    ``queue_limit`` waiting behind the running one.

    ``submit`` hands a job to that thread and returns its future.
    """

    def __init__(self, submit: Submit, queue_limit: int) -> None:
        self._submit = submit
        self._queue_limit = queue_limit
        self._jobs = 0  # running and waiting
        self._requests: deque[_Queued] = deque()  # waiting, in order
        self._background: deque[_Queued] = deque()  # waiting, in order
        self._running: _Queued | None = None
        self._later: EngineJob | None = None  # work after replies, not yet queued
        self._later_since = 0.0
        self._timer: asyncio.TimerHandle | None = None

    async def run(self, job: Callable[[ConversationService], T]) -> T:
        """Run ``job`` on the engine's thread, after the requests queued
        before it (a ``Background`` job: after every request, see the module
        docstring); raise ``Busy`` at once when the queue is full."""
        if self._jobs > self._queue_limit:
            raise Busy
        self._jobs += 1
        queued = _Queued(job, asyncio.get_running_loop().create_future())
        try:
            if queued.background is not None:
                self._background.append(queued)
            else:
                self._requests.append(queued)
                self._make_way()
            self._next()
            return cast(T, await queued.done)
        finally:
            # Cancelled while waiting (the server stops): it never runs.
            for waiting in (self._requests, self._background):
                if queued in waiting:
                    waiting.remove(queued)
            self._jobs -= 1
            self._wait_for_quiet()

    def _make_way(self) -> None:
        # A request waits: a background job running now stops at its next
        # token, unless it gave way often enough already.
        running = self._running
        if running is None or running.stopped:
            return
        background = running.background
        if background is not None and running.yields < MAX_YIELDS:
            running.stopped = True
            background.stop.set()

    def _next(self) -> None:
        # Hand the engine's thread the next job, if it is free.
        if self._running is not None:
            return
        waiting = self._requests or self._background
        if not waiting:
            return
        queued = self._running = waiting.popleft()
        try:
            future = self._submit(queued.job)
        except Exception as exc:  # the engine's thread refused it
            self._running = None
            queued.done.set_exception(exc)
            self._next()
            return
        asyncio.wrap_future(future).add_done_callback(
            lambda ended: self._ended(queued, ended)
        )

    def _ended(self, queued: _Queued, ended: asyncio.Future[Any]) -> None:
        self._running = None
        background = queued.background
        if (
            queued.stopped
            and background is not None
            and background.again
            and not queued.done.done()
            and (ended.cancelled() or ended.exception() is None)
        ):
            # It gave way before its answer was sent: again, from the start,
            # before the background jobs that came after it.
            queued.stopped = False
            queued.yields += 1
            background.stop.clear()
            self._background.appendleft(queued)
        elif not queued.done.done():  # not cancelled while it ran
            if ended.cancelled():
                queued.done.cancel()
            elif (error := ended.exception()) is not None:
                queued.done.set_exception(error)
            else:
                queued.done.set_result(ended.result())
        self._next()

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


class ServeEngineThread:
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
