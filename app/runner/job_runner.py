"""The window's jobs run on the conversation service, without Qt.

``JobRunner`` owns the model (a ``LlamaEngine``, once loaded) and the
``ConversationService`` on it, and runs the jobs of ``app/jobs`` one at a
time, answering each with one result of ``app/jobs/results.py`` (the job's
``result_type``). What a job streams (tokens, reasoning, alternatives,
progress) goes to the callbacks of its ``Reports``, and it stops when
``Reports.should_stop`` says so. It runs wherever it is put: on the window's
engine thread (``app/qt/workers/engine_worker.py`` turns the callbacks into
signals) or in a child process of its own (``app/runner/child_process.py``,
when the model is placed on workers).

Tool jobs (``SendWithTools`` and the others that take the tool loop up)
run on the MCP servers of its ``ToolSessions``, which outlive model loads;
``shutdown`` stops them with the model when the runner ends for good.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import assert_never

from app import jobs
from app.backend.errors import BackendError, ContextFullError, Interrupted
from app.backend.model_file import check_model_file
from app.backend.settings import BackendSettings
from app.conversation.checkpoint_writer import CheckpointWriter
from app.conversation.errors import USER_ERRORS
from app.conversation.results import Reply
from app.conversation.service import ConversationService
from app.conversation.streams import AlternativeStreams, Streams
from app.conversation.tool_loop import Ending
from app.conversation.tree_snapshot import TreeSnapshot
from app.jobs.results import (
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
)
from app.preferences import save_preferences
from app.runner.tool_sessions import ToolSessions, offers_tools, run_tool_job
from storage.db import Database
from storage.errors import NotFound, StorageUnavailable

log = logging.getLogger(__name__)


class PreviousModelLost(BackendError):
    """A model failed to load, and the one loaded before could not be loaded
    again: no model is loaded now."""


@dataclass(frozen=True)
class Reports:
    """Where a running job's streams go, and whether it should stop.

    Attributes
    ----------
    on_token
        A piece of the reply's answer.
    on_thinking
        A piece of the reply's reasoning.
    on_alternative
        A piece of the answer of alternative ``index``.
    on_progress
        How far long work got: tokens decoded and in all, or a model load's
        per mille and 1000.
    should_stop
        Polled between tokens, batches and load reports: whether the user
        pressed Stop. Its owner clears it when a job ends.
    """

    on_token: Callable[[str], None]
    on_thinking: Callable[[str], None]
    on_alternative: Callable[[int, str], None]
    on_progress: Callable[[int, int], None]
    should_stop: Callable[[], bool]


class JobRunner:
    """Runs jobs on a conversation service over the database ``db``.

    Parameters
    ----------
    db
        The open database; every write of a job goes through it.
    reports
        Where what a job streams goes.
    """

    def __init__(self, db: Database, reports: Reports) -> None:
        self._db = db
        self._reports = reports
        self.service = ConversationService(db)
        # Not the service's: a model load replaces the service, and must
        # not restart the servers.
        self.tools = ToolSessions(db)

    def loaded(self) -> jobs.LoadModel | None:
        """The load that would bring the loaded model back (None: none loaded)."""
        engine = self.service.engine
        return jobs.LoadModel(engine.path, engine.settings) if engine else None

    def run(self, job: jobs.Job) -> JobResult:
        """Run one job: its result, or ``Failed`` for what a person can act on
        (or a Stop). A bug raises."""
        name = type(job).__name__
        engine = self.service.engine
        if engine is not None:
            engine.decode_watch = self._watch_decode
        try:
            result = self._dispatch(job)
            if not isinstance(result, job.result_type):  # pragma: no cover
                raise TypeError(f"{name} answered with {type(result).__name__}")
            # A job is finished once everything it wrote behind is on disk:
            # its checkpoints (the window then reads them: tree marks,
            # storage sizes; a failed write fails the job that made it) and
            # a restore's bookkeeping (the active node: what the window
            # reads next, or a window opened next, agrees). The reply and the
            # restore themselves never waited for them.
            self.service.flush_checkpoints()
            if isinstance(result, Replied):
                result = self._with_tree(result)
        except Interrupted as exc:
            # The user asked for it: no error dialog. What was stored stays
            # (a message sent is saved before its prompt is read).
            log.info("%s stopped: %s", name, exc)
            return Failed(job, str(exc), stopped=True)
        except ContextFullError as exc:
            # Not an error dialog: the window offers the ways on instead.
            log.info("%s: the context is full: %s", name, exc)
            return Failed(job, str(exc), context_full=True, needed=exc.needed)
        except USER_ERRORS as exc:
            log.info("%s failed: %s", name, exc)
            return Failed(job, str(exc), model_lost=isinstance(exc, PreviousModelLost))
        finally:
            if engine is not None:
                engine.decode_watch = None
        return result

    def close(self) -> None:
        """Write the queued checkpoints and free the model; jobs that need no
        model still run. Raises ``StorageUnavailable`` if a write failed."""
        old = self.service
        self.service = ConversationService(self._db)
        try:
            old.close()  # its checkpoints are written (each job flushed them)
        finally:
            if old.engine is not None:
                old.engine.close()

    def shutdown(self) -> None:
        """End for good: ``close``, and the MCP servers stop. Raises
        ``StorageUnavailable`` if a checkpoint write failed (the servers
        stop all the same)."""
        try:
            self.close()
        finally:
            self.tools.close()

    def context(self) -> tuple[int, int]:
        """How full the engine's context is: tokens held, and its size."""
        engine = self.service.engine
        return (engine.n_past, engine.n_ctx) if engine is not None else (0, 0)

    # --- jobs -------------------------------------------------------------------

    def _dispatch(self, job: jobs.Job) -> JobResult:
        service = self.service
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
                    *self.context(),
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
            case jobs.SetContextSize(conversation_id=conversation, size=size):
                service.set_context_size(conversation, size)
                return Done(job)
            case jobs.RenameConversation(conversation_id=conversation, title=title):
                service.rename_conversation(conversation, title)
                return Done(job)
            case jobs.DeleteConversation(conversation_id=conversation):
                service.delete_conversation(conversation)
                # The context is empty now if it held that conversation.
                return Deleted(job, *self.context())
            case jobs.ImportConversation(data=data):
                imported = service.import_conversation(data)
                return Created(job, imported.conversation_id)
            case jobs.EvictCheckpoints(budget_bytes=budget):
                return Freed(
                    job, service.evict_checkpoints(budget, self._reports.on_progress)
                )
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
                    node_id, params, self._reports.should_stop
                )
                return Created(job, conversation, root)
            case jobs.CountTokens(text=text):
                return Counted(job, len(service.count_tokens(text)), *self.context())
            case jobs.ServeRequest():
                return self._serve(job)
            case jobs.RegenerateParallel():
                return self._alternatives(job)
            case jobs.SaveToolServers(servers=servers):
                self.tools.save(servers)
                return Done(job)
            case jobs.Regenerate(node_id=node_id) if offers_tools(service, node_id):
                return self._tool_turn(job)
            case (
                jobs.SendWithTools()
                | jobs.AnswerCalls()
                | jobs.EditCallArguments()
                | jobs.EditToolResult()
            ):
                return self._tool_turn(job)
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

    def _serve(self, job: jobs.ServeRequest) -> Done:
        """Run the local server's work; what it raises goes to the server
        (an HTTP error for its client), not to the window's error dialog."""
        if not job.future.set_running_or_notify_cancel():
            return Done(job)
        try:
            job.future.set_result(job.run(self.service))
        except Exception as exc:
            job.future.set_exception(exc)
        return Done(job)

    def _watch_decode(self, done: int, total: int) -> bool:
        """Between the batches of a long decode: report, and go on unless the
        user asked to stop."""
        self._reports.on_progress(done, total)
        return not self._reports.should_stop()

    def _watch_load(self) -> Callable[[float], bool]:
        """A model load's progress callback: reports each per mille once."""
        reported = -1

        def watch(progress: float) -> bool:
            nonlocal reported
            per_mille = int(progress * 1000)
            if per_mille != reported:
                reported = per_mille
                self._reports.on_progress(per_mille, 1000)
            return not self._reports.should_stop()

        return watch

    def _with_tree(self, result: Replied) -> Replied:
        """``result`` with its conversation's tree as it now stands (the reply
        and its checkpoints written), which the window shows next.

        Read here, where the engine is idle once the reply is done, and not
        on the GUI thread, where it was the largest part of a reply's end. A
        failed read leaves the tree out: the reply itself succeeded, and the
        window reads the tree again (and says why if it cannot).
        """
        try:
            nodes = self.service.tree(result.conversation_id)
        except (StorageUnavailable, NotFound) as exc:
            log.info("the tree after a reply was not read here: %s", exc)
            return result
        return replace(result, tree=TreeSnapshot(result.conversation_id, nodes))

    def _load(self, job: jobs.LoadModel) -> ModelLoaded:
        """Load ``job``'s model in place of the loaded one.

        The old model is freed first (two may not fit in memory together). If
        the new one fails, the old one is loaded again, so that a bad file or
        a setting too large leaves the window with the model it had; the
        error is still the new one's.
        """
        previous = self.loaded()
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
                self._open_model(job, previous.path, previous.settings)
            except USER_ERRORS as again:
                raise PreviousModelLost(
                    f"{exc} The model loaded before could not be loaded again "
                    f"either: {again}"
                ) from again
            log.info("%s failed; %s is loaded again", job.path, previous.path.name)
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
        self.service = ConversationService(self._db, engine, CheckpointWriter(self._db))
        return ModelLoaded(job, engine.info, engine.n_ctx, self.service.profile_id)

    def _generate(
        self,
        job: jobs.Send
        | jobs.Edit
        | jobs.Regenerate
        | jobs.GenerateReply
        | jobs.ContinueReply,
    ) -> Replied:
        streams = self._streams()
        service = self.service
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

    def _streams(self) -> Streams:
        reports = self._reports
        return Streams(
            on_token=reports.on_token,
            on_thinking=reports.on_thinking,
            should_stop=reports.should_stop,
        )

    def _tool_turn(
        self,
        job: jobs.SendWithTools
        | jobs.AnswerCalls
        | jobs.EditCallArguments
        | jobs.EditToolResult
        | jobs.Regenerate,
    ) -> Replied:
        """Run a tool job's turn (``app.runner.tool_sessions``); a turn
        stopped after its last reply (while a tool ran) ends as a Stop."""
        done = run_tool_job(self.service, self.tools, job, self._streams())
        turn = done.turn
        last = turn.last_reply
        if turn.ending == Ending.STOPPED and (
            last is None or done.last_node != last.assistant_node
        ):
            # What it stored stays: the calls, and a stopped call's result.
            raise Interrupted("Stopped while a tool ran; its call is kept.")
        replied = self._replied(job, turn.replies, job.budget_bytes)
        return replace(
            replied,
            nodes=done.nodes,
            ending=str(done.turn.ending),
            shown_node=done.last_node,
            calls=done.calls,
            unavailable=done.unavailable,
            conversation=done.conversation_id,
            context=self.context(),
        )

    def _alternatives(self, job: jobs.RegenerateParallel) -> Replied:
        replies = self.service.regenerate_parallel(
            job.node_id,
            job.params,
            job.n,
            AlternativeStreams(
                on_token=self._reports.on_alternative,
                should_stop=self._reports.should_stop,
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
            evicted = self.service.evict_checkpoints(budget_bytes)
        return Replied(job, tuple(replies), evicted)
