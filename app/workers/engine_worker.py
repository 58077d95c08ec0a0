"""The engine worker: owns the model and the conversation service on one thread.

llama.cpp contexts are not safe under concurrent calls, so a single
``EngineWorker`` lives on one long-lived ``QThread`` and runs the jobs it is
sent one after another. It never touches widgets: it reports through signals.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from app.backend.errors import ContextFullError
from app.conversation.checkpoint_writer import CheckpointWriter
from app.conversation.errors import USER_ERRORS
from app.conversation.service import ConversationService, Reply
from app.workers import jobs
from app.workers.jobs import JobResult
from storage import repository
from storage.db import Database
from storage.errors import StorageUnavailable

log = logging.getLogger(__name__)


class EngineWorker(QObject):
    """Runs jobs on the engine thread.

    Signals
    -------
    started(str)
        A job of this kind began.
    token_received(str)
        A piece of streamed reply text (the answer).
    thinking_received(str)
        A piece of streamed reasoning ("thinking"), which comes before the
        answer in models that reason.
    alternative_received(int, str)
        A piece of the answer of alternative ``index`` (replies generated
        together); their reasoning is not streamed.
    failed(str, str)
        A job of this kind failed with a message written for a person.
    finished(object)
        A job ended (after success *and* failure) with its ``JobResult``.
    """

    started = Signal(str)
    token_received = Signal(str)
    thinking_received = Signal(str)
    alternative_received = Signal(int, str)
    failed = Signal(str, str)
    finished = Signal(object)

    def __init__(self, db: Database) -> None:
        super().__init__()
        self._db = db
        self._service = ConversationService(db)
        # Set from the GUI thread, polled here between tokens: a threading.Event
        # is the cheapest thread-safe flag and needs no event loop round trip.
        self.cancel_requested = threading.Event()

    @Slot(object)
    def run(self, job: jobs.Job) -> None:
        """Run one job and report it; never raises expected errors."""
        self.cancel_requested.clear()
        self.started.emit(job.kind)
        try:
            result = self._dispatch(job)
            # A job ends with its checkpoints written: the window then reads
            # them (tree marks, storage sizes), and a failed write fails the
            # job that made it, as when checkpoints were written directly.
            self._service.flush_checkpoints()
        except ContextFullError as exc:
            # Not an error dialog: the window offers the ways on instead.
            log.info("%s: the context is full: %s", job.kind, exc)
            result = JobResult(kind=job.kind, error=str(exc), context_full=True)
        except USER_ERRORS as exc:
            log.info("%s failed: %s", job.kind, exc)
            self.failed.emit(job.kind, str(exc))
            result = JobResult(kind=job.kind, error=str(exc))
        except Exception:
            # A bug: let the window leave its busy state, then let the exception
            # reach sys.excepthook (the crash dialog) with its traceback.
            self.finished.emit(JobResult(kind=job.kind, error="internal error"))
            raise
        self.finished.emit(result)

    @Slot()
    def shut_down(self) -> None:
        """Free the model and end the thread's event loop (runs on the thread)."""
        old = self._service
        self._service = ConversationService(self._db)
        try:
            old.close()
        except StorageUnavailable as exc:  # nobody is left to tell
            log.error("checkpoints not written at shutdown: %s", exc)
        if old.engine is not None:
            old.engine.close()
        thread = QThread.currentThread()
        if thread is not None:
            thread.quit()

    # --- jobs -------------------------------------------------------------------

    def _dispatch(self, job: jobs.Job) -> JobResult:
        if isinstance(job, jobs.LoadModel):
            return self._load(job)
        if isinstance(job, jobs.NewConversation):
            conversation, root = self._service.new_conversation(
                job.system_prompt, job.title
            )
            return JobResult(kind=job.kind, conversation_id=conversation, node_id=root)
        if isinstance(job, jobs.Restore):
            sync = self._service.restore(job.node_id)
            return self._positioned(job.kind, job.node_id, sync=sync)
        if isinstance(job, jobs.DeleteBranch):
            parent = self._service.delete_branch(job.node_id)
            active = repository.get_conversation(
                self._db, repository.get_node(self._db, parent).conversation_id
            ).active_node_id
            return JobResult(kind=job.kind, node_id=active or parent)
        if isinstance(job, jobs.SetReasoning):
            self._service.set_reasoning(job.conversation_id, job.choice)
            return JobResult(kind=job.kind, conversation_id=job.conversation_id)
        if isinstance(job, jobs.RegenerateParallel):
            return self._alternatives(job)
        if isinstance(job, jobs.ContinueWithSummary):
            conversation, root = self._service.continue_in_new_conversation(
                job.node_id, job.params, self.cancel_requested.is_set
            )
            return JobResult(kind=job.kind, conversation_id=conversation, node_id=root)
        return self._generate(job)

    def _load(self, job: jobs.LoadModel) -> JobResult:
        # Imported here: loading llama.cpp's library is only needed once a
        # model is asked for, and the window must appear before that.
        from app.backend.engine import LlamaEngine

        old = self._service
        self._service = ConversationService(self._db)
        old.close()  # its checkpoints are written (each job flushed them)
        if old.engine is not None:
            old.engine.close()  # free the old model's memory before the next
        engine = LlamaEngine(job.path, job.settings)
        self._service = ConversationService(
            self._db, engine, CheckpointWriter(self._db)
        )
        return JobResult(kind=job.kind, model=engine.info, n_ctx=engine.n_ctx)

    def _generate(self, job: jobs.Job) -> JobResult:
        kwargs: dict[str, Any] = {
            "on_token": self.token_received.emit,
            "on_thinking": self.thinking_received.emit,
            "should_stop": self.cancel_requested.is_set,
        }
        reply: Reply
        if isinstance(job, jobs.Send):
            reply = self._service.send(job.parent_id, job.text, job.params, **kwargs)
        elif isinstance(job, jobs.Edit):
            reply = self._service.edit(job.node_id, job.text, job.params, **kwargs)
        elif isinstance(job, jobs.Regenerate):
            reply = self._service.regenerate(job.node_id, job.params, **kwargs)
        elif isinstance(job, jobs.GenerateReply):
            reply = self._service.reply(job.node_id, job.params, **kwargs)
        else:  # pragma: no cover - every job type is handled above
            raise TypeError(f"unknown job {job!r}")
        return self._replied(job.kind, [reply], job.budget_bytes)

    def _alternatives(self, job: jobs.RegenerateParallel) -> JobResult:
        replies = self._service.regenerate_parallel(
            job.node_id,
            job.params,
            job.n,
            on_token=self.alternative_received.emit,
            should_stop=self.cancel_requested.is_set,
        )
        return self._replied(job.kind, replies, job.budget_bytes)

    def _replied(
        self, kind: str, replies: list[Reply], budget_bytes: int | None
    ) -> JobResult:
        """The result of a job that made ``replies`` (the first is shown), after
        evicting checkpoints beyond the budget."""
        evicted = 0
        if budget_bytes is not None:
            evicted = self._service.evict_checkpoints(budget_bytes)
        first = replies[0]
        return JobResult(
            kind=kind,
            conversation_id=repository.get_node(
                self._db, first.assistant_node
            ).conversation_id,
            node_id=first.assistant_node,
            reply=first,
            replies=tuple(replies) if len(replies) > 1 else (),
            context_tokens=first.stats.context_tokens,
            n_ctx=first.stats.n_ctx,
            evicted_bytes=evicted,
        )

    def _positioned(self, kind: str, node_id: int, **extra: Any) -> JobResult:
        engine = self._service.engine
        return JobResult(
            kind=kind,
            conversation_id=repository.get_node(self._db, node_id).conversation_id,
            node_id=node_id,
            context_tokens=engine.n_past if engine is not None else 0,
            n_ctx=engine.n_ctx if engine is not None else 0,
            **extra,
        )
