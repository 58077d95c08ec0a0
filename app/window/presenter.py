"""The window's logic without Qt: the presenter composes its parts and routes.

The window forwards what the user asks for (send, click a node, rename, ...)
and what the engine reports to ``WindowPresenter``; it decides, submits jobs
to the engine worker (the only writer, see ``app/jobs``) and tells its
``View`` what to show. Tests drive it with plain Python: a recording view and
an engine that runs jobs inline.

The state lives in parts, one module each; a part knows only those below it:

- ``ShownConversation``: which conversation and node are shown, its tree
  and its settings (the floor: it knows no other part);
- ``ModelSession``: the model loaded or loading, the preferences, the tools;
- ``ReplyInFlight``: the reply being generated, from its job to its end;
- ``ReplyRequests``: the jobs that ask for a reply, and the composer's files;
- ``Navigation``: moving the user to a conversation or a node, and the
  engine after them (no state of its own).

The presenter holds only what spans them (the job the engine runs, whether
the database is writable) and the steps that need several, gives the window
each part's own steps under the names it calls, and routes each job's result
to the part it concerns: the one ``match`` in ``on_finished``.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from app import jobs
from app.backend.values import ModelInfo, SamplingParams
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
)
from app.preferences import Preferences
from app.window.actions import ACTIONS, When
from app.window.model_session import ModelSession
from app.window.navigation import Navigation
from app.window.reply_in_flight import ReplyInFlight
from app.window.reply_requests import ReplyRequests
from app.window.shown_conversation import ShownConversation
from app.window.view import Engine, View
from storage.db import Database
from storage.values import Role

# Said when tools are turned on for a model whose template has no tool support.
GENERIC_TOOLS_NOTE = (
    "This model's chat template has no tool support: its calls use a generic "
    "JSON format, which small models may follow poorly (Models lists those "
    "that call tools in their own format)."
)


class WayOn(Enum):
    """What the user chose to do about a branch that filled the context."""

    BRANCH = "branch"  # pick an earlier message and branch from there
    RAISE = "raise"  # reload the model with a larger context
    SUMMARY = "summary"  # a new conversation from the model's summary
    MODELS = "models"  # a model with a longer context (the Models dialog)
    NOTHING = "nothing"


class WindowPresenter:
    """The window's decisions, over the parts that hold its state.

    Parameters
    ----------
    db
        The open database, for reads (the engine worker does every write).
    engine
        Where jobs go.
    prefs
        The user's preferences.
    view
        The window.
    """

    def __init__(
        self, db: Database, engine: Engine, prefs: Preferences, view: View
    ) -> None:
        self.db = db
        self.engine = engine
        self.view = view
        self.read_only = db.read_only
        self.shown = ShownConversation(db, engine, view)
        self.model = ModelSession(db, engine, prefs, view, self.shown)
        self.reply = ReplyInFlight(engine, view, self.shown, self.model)
        self.requests = ReplyRequests(engine, view, self.shown, self.model, self.reply)
        self.navigation = Navigation(engine, view, self.shown, self.model, self.reply)
        # The job the engine runs now (what a progress report is about).
        self.running_job: jobs.Job | None = None
        self._take_parts_steps()

    def _take_parts_steps(self) -> None:
        """The window's steps that one part takes alone are that part's own
        methods, under the names the window calls (their docstrings are there)."""
        shown, model, reply = self.shown, self.model, self.reply
        moves, requests = self.navigation, self.requests
        self.show_conversation = moves.show_conversation
        self.activate = moves.activate
        self.select_conversation = moves.select_conversation
        self.choose_node = moves.choose_node
        self.choose_sibling = moves.choose_sibling
        self.open_search_hit = moves.open_search_hit
        self.previous_branch = moves.previous_branch
        self.next_branch = moves.next_branch
        self.parent_message = moves.parent_message
        self.child_message = moves.child_message
        self.reload_tree = moves.reload_tree
        self.made_with_other_model = moves.made_with_other_model
        self.switch_to_made_with = moves.switch_to_made_with
        self.keep_loaded_model = moves.keep_loaded_model
        self.new_conversation = moves.new_conversation
        self.delete_conversation = moves.delete_conversation
        self.last_of_role = shown.last_of_role
        self.branch_system_prompt = shown.branch_system_prompt
        self.set_reasoning = shown.set_reasoning
        self.load_model = model.load_model
        self.save_preferences = model.save_preferences
        self.apply_preferences = model.apply_preferences
        self.save_tool_servers = model.save_tool_servers
        self.send = requests.send
        self.attach = requests.attach
        self.detach = requests.detach
        self.reply_to_active = requests.reply_to_active
        self.regenerate = requests.regenerate
        self.continue_reply = requests.continue_reply
        self.alternatives = requests.alternatives
        self.regenerate_last = requests.regenerate_last
        self.alternatives_last = requests.alternatives_last
        self.run_call = requests.run_call
        self.deny_call = requests.deny_call
        self.run_edited_call = requests.run_edited_call
        self.on_token = reply.on_token
        self.on_thinking = reply.on_thinking
        self.on_alternative = reply.on_alternative

    # --- what the window reads --------------------------------------------------------

    @property
    def conversation_id(self) -> int | None:
        """The conversation shown."""
        return self.shown.conversation_id

    @property
    def active_id(self) -> int | None:
        """The node shown last on the transcript's path."""
        return self.shown.active_id

    @property
    def snapshot(self) -> TreeSnapshot:
        """The shown conversation's tree."""
        return self.shown.snapshot

    @property
    def reasoning(self) -> str | None:
        """The shown conversation's reasoning choice (None: the default)."""
        return self.shown.reasoning

    @property
    def tool_choice(self) -> str:
        """The composer's Tools menu on the shown branch: off, auto, required."""
        return self.shown.tool_choice

    @property
    def prefs(self) -> Preferences:
        """The user's preferences (setting them stores nothing: see
        ``apply_preferences``)."""
        return self.model.prefs

    @prefs.setter
    def prefs(self, prefs: Preferences) -> None:
        self.model.prefs = prefs

    @property
    def model_info(self) -> ModelInfo | None:
        """The loaded model, if any."""
        return self.model.model_info

    @property
    def loading_model(self) -> str | None:
        """The model file being loaded, if any."""
        return self.model.loading_model

    @property
    def tools_available(self) -> bool:
        """Whether any MCP server is enabled (the composer offers their tools)."""
        return self.model.tools_available

    @property
    def generating(self) -> bool:
        """Whether a reply is being generated."""
        return self.reply.generating

    @property
    def writable(self) -> bool:
        """Whether the user can change anything now (idle, database writable)."""
        return not self.generating and not self.read_only

    @property
    def can_reply(self) -> bool:
        """Whether a reply can be asked for (writable, a model loaded)."""
        return self.reply.can_begin

    @property
    def stoppable(self) -> bool:
        """Whether Stop has something to stop: a reply, a model being loaded,
        or other long work that reports its progress."""
        return self.generating or isinstance(self.running_job, jobs.LoadModel)

    def allows(self, when: When) -> bool:
        """Whether an action enabled ``when`` is enabled now."""
        match when:
            case When.ALWAYS:
                return True
            case When.WRITABLE:
                return self.writable

    def action_states(self) -> dict[str, bool]:
        """Every action of ``app.window.actions.ACTIONS`` by name: enabled or not."""
        return {spec.name: self.allows(spec.when) for spec in ACTIONS}

    def composer_state(self) -> tuple[bool, str]:
        """Whether the composer takes text, and what it says when empty."""
        if self.read_only:
            return False, "Read-only: you can read, not write."
        unavailable = self.model.unavailable()
        if unavailable is not None:
            return False, unavailable
        if self.generating and not self.reply.stream_shown:
            return (
                False,
                "A reply is being written elsewhere: read on, or Stop it (Esc); "
                "you can write here when it is done.",
            )
        if self.shown.active_role() == Role.USER:
            return (
                True,
                "Type to send a new version of the message above (a new branch); "
                "leave empty and press Ctrl+Enter for a reply to it.",
            )
        return True, "Write a message…  (Ctrl+Enter to send)"

    # --- starting -----------------------------------------------------------------

    def start(self, model: Path | None) -> None:
        """Show the most recent conversation (or a new one) and load ``model``.

        With no model, the view asks for one.
        """
        self.view.refresh_list(None)
        recent = self.shown.most_recent()
        if recent is not None:
            self.show_conversation(recent)
        elif not self.read_only:
            self.new_conversation()
        if self.read_only:
            # Nothing can be written, so no reply can be made: no model needed.
            self.view.show_chat(True)
        elif model is not None:
            self.load_model(model)
            if len(self.shown.snapshot.nodes) > 1:
                # A restart: the conversation is there to read while the
                # model loads (the composer waits for it), not the first
                # start's page that offers models. A load that fails brings
                # that page back, with the reason (``model_missing``).
                self.view.show_chat(True)
        else:
            # Conversations stay readable without a model; the page that asks
            # for one is for a first start, with nothing to read.
            self.view.show_chat(len(self.shown.snapshot.nodes) > 1)

    # --- the user's steps that span parts ---------------------------------------

    def stop(self) -> bool:
        """Stop the reply being generated, or the model being loaded; False if
        there is nothing to stop."""
        if self.stoppable:
            self.engine.stop()
            return True
        return False

    def set_tools(self, choice: str) -> None:
        """The composer's Tools menu: ``"off"``, ``"auto"`` (the model
        decides) or ``"required"`` (the message's first reply calls a tool)."""
        self.shown.tool_choice = choice
        info = self.model.model_info
        if choice != "off" and info is not None and info.tool_format == "generic":
            self.view.show_message(GENERIC_TOOLS_NOTE)
        self.view.state_changed()

    def way_on_chosen(self, choice: WayOn, size: int | None) -> None:
        """The user chose how to go on from a full context (``size``: new n_ctx)."""
        if choice is WayOn.BRANCH:
            self.view.focus_tree()
            self.view.show_message("Click an earlier message to branch from it.")
        elif choice is WayOn.RAISE and size is not None:
            # This conversation's alone: the Settings' size stays for others.
            self.shown.keep_context_size(size)
            self.model.follow_context()
        elif choice is WayOn.SUMMARY and self.shown.active_id is not None:
            sampling = self.conversation_sampling()[0]
            job = jobs.ContinueWithSummary(self.shown.active_id, sampling)
            self.view.set_busy(job.busy)
            self.engine.submit(job)

    def use_settings_context(self) -> None:
        """The shown conversation gives up the context size raised for it:
        the model loads again with the Settings' size."""
        if self.generating or self.shown.context_size is None:
            return
        self.shown.keep_context_size(None)
        self.model.follow_context()

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Give a conversation a new title (shown at once, stored by the worker)."""
        self.engine.submit(jobs.RenameConversation(conversation_id, title))
        if not self.read_only:
            self.view.show_title(conversation_id, title)

    def delete_branch(self, node_id: int) -> None:
        """Delete a node and everything below it (the user has confirmed)."""
        if not self.generating:
            self.engine.submit(jobs.DeleteBranch(node_id))

    def import_conversation(self, data: Any) -> None:
        """Import a conversation from an exported file's JSON; it is then shown."""
        if not self.generating:
            self.engine.submit(jobs.ImportConversation(data))

    def conversation_sampling(self) -> tuple[SamplingParams, str | None]:
        """The sampling the shown conversation's replies use, and its preset."""
        return self.shown.sampling(self.model.prefs.sampling)

    def change_conversation_settings(
        self, system_prompt: str, sampling: SamplingParams | None, preset: str | None
    ) -> None:
        """Give the shown conversation ``sampling`` and ``system_prompt`` (a
        new start, if it is not the branch's); see ``ShownConversation``."""
        if not self.generating:
            self.shown.change_settings(system_prompt, sampling, preset)

    def reload_after_loss(self, on_workers: bool) -> None:
        """Load the model lost with its engine again: on the workers that
        still answer (``on_workers``), or on this computer alone."""
        if not self.generating:
            self.model.reload_after_loss(on_workers)

    # --- what the engine reports --------------------------------------------------

    def on_started(self, job: jobs.Job) -> None:
        """A job began on the engine thread."""
        self.running_job = job
        self.view.set_busy(job.busy)
        self.view.state_changed()  # e.g. Stop now stops a model load

    def on_progress(self, done: int, total: int) -> None:
        """The running job's long work got this far."""
        if self.running_job is not None:
            self.reply.on_progress(self.running_job, done, total)

    def on_failed(self, job: jobs.Job, message: str) -> None:
        """A job failed with a message for the user."""
        self.view.show_error(job.failure, message)

    def on_finished(self, result: JobResult) -> None:
        """A job ended, after success or failure: its result goes to the part
        it concerns (a job whose result needs nothing has no case)."""
        self.running_job = None
        if not self.engine.busy:
            self.view.set_busy(None)
        self.view.show_progress(0, 0)
        if isinstance(result, Failed) and result.engine_lost:
            self.model.engine_lost(result)
        shown = self.shown
        match result:
            case ModelLoaded() | Failed(job=jobs.LoadModel()):
                own_failed = isinstance(result, Failed) and self.model.loading_own
                if self.model.loaded(result) and shown.active_id is not None:
                    # The tree's checkpoint marks are the new model's now.
                    self.reload_tree()
                    self.activate(shown.active_id, follow=False)
                elif own_failed and shown.context_size is not None:
                    # A context this computer could not give: the
                    # conversation goes back to the Settings' size.
                    shown.keep_context_size(None)
            case _ if isinstance(result.job, jobs.Generating):
                elsewhere = self.reply.out_of_sight
                self.reply.end(result)
                if elsewhere:  # the user stays there: take the engine there
                    self.activate(shown.active_id, follow=False)
            case Created(job=jobs.NewSystemPrompt(conversation_id=changed)):
                if changed == shown.conversation_id and result.node_id is not None:
                    self.reload_tree()
                    self.activate(result.node_id)
                    self.view.refresh_list(changed)
            case Created():
                self.view.refresh_list(result.conversation_id)
                self.show_conversation(result.conversation_id)
            case Failed(job=jobs.SetSampling(conversation_id=changed)):
                shown.show_stored_sampling(changed)
            case Counted(job=jobs.CountTokens(name=name)):
                self.requests.counted(name, result)
            case Failed(job=jobs.CountTokens(name=name)):
                self.view.refuse_attachment(name, "")  # said already (it failed)
            case Failed(job=jobs.Restore(), context_full=True):
                # The conversation does not fit the loaded context: say so
                # now it is shown, with the ways on, not at the next Send.
                self.view.show_context_full()
                message = result.error or "This branch does not fit."
                self.model.offer_ways_on(shown.active_id, message)
            case Moved(job=jobs.Restore(), sync=sync) if sync is not None:
                self.view.show_restore(sync, result.context_tokens, result.n_ctx)
                if sync.reprocessed_tokens:
                    # Reprocessing renders spans and writes checkpoints: show them.
                    self.reload_tree()
                    self.view.refresh_list(shown.conversation_id)
            case Moved(job=jobs.DeleteBranch()) | Failed(job=jobs.DeleteBranch()):
                target = result.node_id if isinstance(result, Moved) else None
                self.reload_tree()
                self.activate(target or shown.stored_active_node(), restore=False)
                self.view.refresh_list(shown.conversation_id)
            case Failed(job=jobs.SetReasoning()):
                shown.show_stored_reasoning()
            case Failed(job=jobs.RenameConversation(conversation_id=renamed)):
                shown.show_stored_title(renamed)
            case Deleted() | Failed(job=jobs.DeleteConversation()):
                self.view.refresh_list(shown.conversation_id)
            case Done(job=jobs.ServeRequest()) | Failed(job=jobs.ServeRequest()):
                # A client's request added nodes (or a conversation): the
                # list, and the tree if its conversation is the one shown.
                self.view.refresh_list(shown.conversation_id)
                if shown.conversation_id is not None:
                    self.reload_tree()
            case (
                Freed() | Failed(job=jobs.EvictCheckpoints() | jobs.ClearCheckpoints())
            ):
                # The tree's checkpoint marks and the list's sizes changed;
                # read once the job is done, even if its dialog closed before.
                self.reload_tree()
                self.view.refresh_list(shown.conversation_id)
        self.view.state_changed()
