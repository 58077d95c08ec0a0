"""The one thread that owns the model and the conversation service.

Requests queue behind one another on it; the queue is bounded, so that a
client flooding the server is told to come back (``Busy``) rather than
piling up work nobody waits for. Until the model has loaded, jobs are
refused with ``Loading``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from app.conversation.service import ConversationService

log = logging.getLogger(__name__)

T = TypeVar("T")


class Loading(Exception):
    """The model is still loading."""


class Busy(Exception):
    """The queue is full."""


class EngineOwner:
    """Runs jobs on the engine's own thread, one at a time, in order.

    ``open_service`` loads the model and opens the service, on that thread;
    ``queue_limit`` is how many jobs may wait behind the running one.
    """

    def __init__(
        self, open_service: Callable[[], ConversationService], queue_limit: int
    ) -> None:
        self._open_service = open_service
        self._queue_limit = queue_limit
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="arbor-engine")
        self._service: ConversationService | None = None
        self._jobs = 0  # running and waiting
        self.loaded: asyncio.Future[None] | None = None

    def start(self) -> asyncio.Future[None]:
        """Begin loading the model; the future ends when it has (or failed)."""
        loop = asyncio.get_running_loop()
        self.loaded = loop.run_in_executor(self._executor, self._load)
        return self.loaded

    def _load(self) -> None:
        self._service = self._open_service()

    @property
    def ready(self) -> bool:
        """Whether the model has loaded."""
        return self._service is not None

    async def run(self, job: Callable[[ConversationService], T]) -> T:
        """Run ``job`` on the engine's thread; raise ``Loading`` or ``Busy``
        at once when it cannot be queued."""
        if self._service is None:
            raise Loading
        if self._jobs > self._queue_limit:
            raise Busy
        service = self._service
        self._jobs += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, job, service)
        finally:
            self._jobs -= 1

    def after(self, job: Callable[[ConversationService], object]) -> None:
        """Queue ``job`` behind the others without waiting for it (work that
        follows a reply, such as writing its checkpoints out)."""
        service = self._service
        if service is None:
            return

        def guarded() -> None:
            try:
                job(service)
            except Exception:
                log.warning("work after a reply failed", exc_info=True)

        self._executor.submit(guarded)

    def close(self) -> None:
        """Finish the queued jobs, then close the service and the model."""

        def closing() -> None:
            service = self._service
            self._service = None
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
