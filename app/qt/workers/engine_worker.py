"""The engine worker: owns the model and the conversation service on one thread.

llama.cpp contexts are not safe under concurrent calls, so a single
``EngineWorker`` lives on one long-lived ``QThread`` and runs the jobs it is
sent one after another. It never touches widgets: it reports through signals.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import assert_never

from PySide6.QtCore import QObject, Signal, Slot

from app.backend.errors import BackendError, ContextFullError, Interrupted
from app.backend.model_file import check_model_file
from app.backend.settings import BackendSettings
from app.conversation.checkpoint_writer import CheckpointWriter
from app.conversation.errors import USER_ERRORS
from app.conversation.results import Reply
from app.conversation.service import ConversationService
from app.conversation.streams import AlternativeStreams, Streams
from app.conversation.tree_snapshot import TreeSnapshot
from app.preferences import save_preferences
from app.qt.workers.threads import quit_current_thread
from app.window import jobs
from app.window.job_results import (
    Counted,
    Created,
    Deleted,
    Done,
    Failed,
    Freed,
    JobResult,
    ModelLoaded,
    Moved,
    Replied,
    result_type_of,
)
from storage.db import Database
from storage.errors import NotFound, StorageUnavailable

log = logging.getLogger(__name__)


class PreviousModelLost(BackendError):
    """A model failed to load, and the one loaded before could not be loaded
    again: no model is loaded now."""


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
        self._db = db
        self._service = ConversationService(db)
        # Set from the GUI thread, polled here between tokens: a threading.Event
        # is the cheapest thread-safe flag and needs no event loop round trip.
        self.cancel_requested = threading.Event()

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
        name = type(job).__name__
        engine = self._service.engine
        if engine is not None:
            engine.decode_watch = self._watch_decode
        try:
            result = self._dispatch(job)
            if not isinstance(result, result_type_of(job)):  # pragma: no cover
                raise TypeError(f"{name} answered with {type(result).__name__}")
            # A job is finished once everything it wrote behind is on disk:
            # its checkpoints (the window then reads them: tree marks,
            # storage sizes; a failed write fails the job that made it) and
            # a restore's bookkeeping (the active node: what the window
            # reads next, or a window opened next, agrees). The reply and the
            # restore themselves never waited for them.
            self._service.flush_checkpoints()
            if isinstance(result, Replied):
                result = self._with_tree(result)
        except Interrupted as exc:
            # The user asked for it: no error dialog. What was stored stays
            # (a message sent is saved before its prompt is read).
            log.info("%s stopped: %s", name, exc)
            result = Failed(job, str(exc), stopped=True)
        except ContextFullError as exc:
            # Not an error dialog: the window offers the ways on instead.
            log.info("%s: the context is full: %s", name, exc)
            result = Failed(job, str(exc), context_full=True)
        except USER_ERRORS as exc:
            log.info("%s failed: %s", name, exc)
            self.failed.emit(job, str(exc))
            result = Failed(
                job, str(exc), model_lost=isinstance(exc, PreviousModelLost)
            )
        except Exception:
            # A bug: let the window leave its busy state, then let the exception
            # reach sys.excepthook (the crash dialog) with its traceback.
            self.finished.emit(Failed(job, "internal error"))
            raise
        finally:
            if engine is not None:
                engine.decode_watch = None
            # A Stop is used up by the job it reached. Cleared at the end, not
            # the start: one pressed while a reply waits in the queue (shown as
            # coming) stops that reply rather than being forgotten.
            self.cancel_requested.clear()
        self.finished.emit(result)

    def _serve(self, job: jobs.ServeRequest) -> Done:
        """Run the local server's work; what it raises goes to the server
        (an HTTP error for its client), not to the window's error dialog."""
        if not job.future.set_running_or_notify_cancel():
            return Done(job)
        try:
            job.future.set_result(job.run(self._service))
        except Exception as exc:
            job.future.set_exception(exc)
        return Done(job)

    def _watch_decode(self, done: int, total: int) -> bool:
        """Between the batches of a long decode: report, and go on unless the
        user asked to stop."""
        self.progress.emit(done, total)
        return not self.cancel_requested.is_set()

    def _watch_load(self) -> Callable[[float], bool]:
        """A model load's progress callback: reports each per mille once."""
        reported = -1

        def watch(progress: float) -> bool:
            nonlocal reported
            per_mille = int(progress * 1000)
            if per_mille != reported:
                reported = per_mille
                self.progress.emit(per_mille, 1000)
            return not self.cancel_requested.is_set()

        return watch

    @Slot()
    def shut_down(self) -> None:
        """Free the model and end the thread's event loop (runs on the thread)."""
        try:
            self.close()
        except StorageUnavailable as exc:  # nobody is left to tell
            log.error("checkpoints not written at shutdown: %s", exc)
        quit_current_thread()

    # --- jobs -------------------------------------------------------------------

    def _dispatch(self, job: jobs.Job) -> JobResult:
        service = self._service
        match job:
            case jobs.LoadModel():
                return self._load(job)
            case jobs.NewConversation(system_prompt=prompt, title=title):
                conversation, root = service.new_conversation(
                    prompt, title, job.sampling, job.preset
                )
                return Created(job, conversation, root)
            case jobs.NewSystemPrompt(conversation_id=conversation, system_prompt=text):
                return Created(
                    job, conversation, service.new_system_prompt(conversation, text)
                )
            case jobs.SetSampling(conversation_id=conversation):
                service.set_sampling(conversation, job.sampling, job.preset)
                return Done(job)
            case jobs.Restore(node_id=node_id):
                restored = service.restore(node_id)
                return Moved(
                    job,
                    restored.conversation_id,
                    restored.node_id,
                    restored,
                    *self._context(),
                )
            case jobs.SetActiveNode(node_id=node_id):
                return Moved(job, service.set_active_node(node_id), node_id)
            case jobs.DeleteBranch(node_id=node_id):
                deleted = service.delete_branch(node_id)
                return Moved(
                    job,
                    deleted.conversation_id,
                    deleted.active_node_id or deleted.parent_id,
                )
            case jobs.SetReasoning(conversation_id=conversation, choice=choice):
                service.set_reasoning(conversation, choice)
                return Done(job)
            case jobs.RenameConversation(conversation_id=conversation, title=title):
                service.rename_conversation(conversation, title)
                return Done(job)
            case jobs.DeleteConversation(conversation_id=conversation):
                service.delete_conversation(conversation)
                # The context is empty now if it held that conversation.
                return Deleted(job, *self._context())
            case jobs.ImportConversation(data=data):
                imported = service.import_conversation(data)
                return Created(job, imported.conversation_id)
            case jobs.EvictCheckpoints(budget_bytes=budget):
                return Freed(job, service.evict_checkpoints(budget, self.progress.emit))
            case jobs.ClearCheckpoints():
                return Freed(job, service.clear_checkpoints())
            case jobs.SavePreferences(prefs=prefs):
                # Not the service's: preferences are the user's, not a
                # conversation's; written here so that the window never waits
                # for the database's write lock.
                save_preferences(self._db, prefs)
                return Done(job)
            case jobs.ContinueWithSummary(node_id=node_id, params=params):
                conversation, root = service.continue_in_new_conversation(
                    node_id, params, self.cancel_requested.is_set
                )
                return Created(job, conversation, root)
            case jobs.CountTokens(text=text):
                return Counted(job, len(service.count_tokens(text)), *self._context())
            case jobs.ServeRequest():
                return self._serve(job)
            case jobs.RegenerateParallel():
                return self._alternatives(job)
            case (
                jobs.Send()
                | jobs.Edit()
                | jobs.Regenerate()
                | jobs.GenerateReply()
                | jobs.ContinueReply()
            ):
                return self._generate(job)
            case _:
                assert_never(job)

    def _with_tree(self, result: Replied) -> Replied:
        """``result`` with its conversation's tree as it now stands (the reply
        and its checkpoints written), which the window shows next.

        Read here, where the engine is idle once the reply is done, and not
        on the GUI thread, where it was the largest part of a reply's end. A
        failed read leaves the tree out: the reply itself succeeded, and the
        window reads the tree again (and says why if it cannot).
        """
        try:
            nodes = self._service.tree(result.conversation_id)
        except (StorageUnavailable, NotFound) as exc:
            log.info("the tree after a reply was not read here: %s", exc)
            return result
        return replace(result, tree=TreeSnapshot(result.conversation_id, nodes))

    def close(self) -> None:
        """Write the queued checkpoints and free the model; jobs that need no
        model still run. Raises ``StorageUnavailable`` if a write failed."""
        old = self._service
        self._service = ConversationService(self._db)
        try:
            old.close()  # its checkpoints are written (each job flushed them)
        finally:
            if old.engine is not None:
                old.engine.close()

    def _load(self, job: jobs.LoadModel) -> ModelLoaded:
        """Load ``job``'s model in place of the loaded one.

        The old model is freed first (two may not fit in memory together). If
        the new one fails, the old one is loaded again, so that a bad file or
        a setting too large leaves the window with the model it had; the
        error is still the new one's.
        """
        old = self._service.engine
        previous = (old.path, old.settings) if old is not None else None
        check_model_file(Path(job.path))  # not a GGUF at all: nothing is unloaded
        self.close()  # free the old model's memory before loading the next
        try:
            return self._open_model(job, job.path, job.settings, self._watch_load())
        except USER_ERRORS as exc:
            if previous is None:
                raise
            try:
                # Not stoppable: a Stop that ended the first load must not
                # end this one, and the window would be left without a model.
                self._open_model(job, *previous)
            except USER_ERRORS as again:
                raise PreviousModelLost(
                    f"{exc} The model loaded before could not be loaded again "
                    f"either: {again}"
                ) from again
            log.info("%s failed; %s is loaded again", job.path, previous[0].name)
            raise

    def _open_model(
        self,
        job: jobs.LoadModel,
        path: Path,
        settings: BackendSettings,
        watch: Callable[[float], bool] | None = None,
    ) -> ModelLoaded:
        # Imported here: loading llama.cpp's library is only needed once a
        # model is asked for, and the window must appear before that.
        from app.backend.engine import LlamaEngine

        engine = LlamaEngine(path, settings, watch)
        self._service = ConversationService(
            self._db, engine, CheckpointWriter(self._db)
        )
        return ModelLoaded(job, engine.info, engine.n_ctx, self._service.profile_id)

    def _generate(
        self,
        job: jobs.Send
        | jobs.Edit
        | jobs.Regenerate
        | jobs.GenerateReply
        | jobs.ContinueReply,
    ) -> Replied:
        streams = Streams(
            on_token=self.token_received.emit,
            on_thinking=self.thinking_received.emit,
            should_stop=self.cancel_requested.is_set,
        )
        service = self._service
        match job:
            case jobs.Send(parent_id=parent, text=text, params=params):
                reply = service.send(parent, text, params, streams)
            case jobs.Edit(node_id=node_id, text=text, params=params):
                reply = service.edit(node_id, text, params, streams)
            case jobs.Regenerate(node_id=node_id, params=params):
                reply = service.regenerate(node_id, params, streams)
            case jobs.GenerateReply(node_id=node_id, params=params):
                reply = service.reply(node_id, params, streams)
            case jobs.ContinueReply(node_id=node_id, params=params):
                reply = service.continue_reply(node_id, params, streams)
            case _:  # _dispatch sends only these five
                assert_never(job)
        return self._replied(job, [reply], job.budget_bytes)

    def _alternatives(self, job: jobs.RegenerateParallel) -> Replied:
        replies = self._service.regenerate_parallel(
            job.node_id,
            job.params,
            job.n,
            AlternativeStreams(
                on_token=self.alternative_received.emit,
                should_stop=self.cancel_requested.is_set,
            ),
        )
        return self._replied(job, replies, job.budget_bytes)

    def _replied(
        self, job: jobs.Job, replies: list[Reply], budget_bytes: int | None
    ) -> Replied:
        """The result of a job that made ``replies`` (the first is shown), after
        evicting checkpoints beyond the budget."""
        evicted = 0
        if budget_bytes is not None:
            evicted = self._service.evict_checkpoints(budget_bytes)
        return Replied(job, tuple(replies), evicted)

    def _context(self) -> tuple[int, int]:
        """How full the engine's context is: tokens held, and its size."""
        engine = self._service.engine
        return (engine.n_past, engine.n_ctx) if engine is not None else (0, 0)
