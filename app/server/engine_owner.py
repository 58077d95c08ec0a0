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

    def after(self, job: EngineJob) -> None:
        """Queue ``job`` behind the others without waiting for it (work that
        follows a reply, such as writing its checkpoints out)."""

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
