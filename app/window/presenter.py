"""The window's state machine, without Qt: what is shown, what may be done next.

``WindowPresenter`` holds which conversation and node are shown, whether a
model is loaded or loading, whether a reply is being generated, and whether
the database can be written. The window forwards what the user asks for
(send, click a node, rename, ...) and what the engine reports; the presenter
decides, submits jobs to the engine worker (the only writer, see
``app/jobs``) and tells its ``View`` what to show. Tests drive it
with plain Python: a recording view and an engine that runs jobs inline.

It reads the database directly (a snapshot of the tree, a conversation's
record): reads are cheap, and WAL keeps them from waiting on the worker.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from app import jobs
from app.backend.settings import BackendSettings
from app.backend.values import ModelInfo, SamplingParams
from app.conversation.presets import Preset
from app.conversation.results import StopReason
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
from app.mcp.config import STEP_LIMIT, ServerConfig
from app.preferences import Preferences
from app.window import tool_turns
from app.window.actions import ACTIONS, DEFAULT_ALTERNATIVES, When
from app.window.model_session import ModelSession
from app.window.reply_in_flight import ReplyStream
from app.window.shown_conversation import Move, ShownConversation
from app.window.view import Engine, View
from storage import node_rows
from storage.db import Database
from storage.errors import NotFound, StorageUnavailable
from storage.tables import DEFAULT_TITLE
from storage.values import Role, Status

# Said when tools are turned on for a model whose template has no tool support.
GENERIC_TOOLS_NOTE = (
    "This model's chat template has no tool support: its calls use a generic "
    "JSON format, which small models may follow poorly (Models lists those "
    "that call tools in their own format)."
)

# Tokens kept free beside attached files: the typed words, the turn's markup
# and the first tokens of a reply.
ATTACH_MARGIN = 64


class WayOn(Enum):
    """What the user chose to do about a branch that filled the context."""

    BRANCH = "branch"  # pick an earlier message and branch from there
    RAISE = "raise"  # reload the model with a larger context
    SUMMARY = "summary"  # a new conversation from the model's summary
    MODELS = "models"  # a model with a longer context (the Models dialog)
    NOTHING = "nothing"


class WindowPresenter:
    """The window's state and decisions.

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
        self.model = ModelSession(db, engine, prefs, view)
        self.shown = ShownConversation(db, engine, view)
        # The reply being generated, what it streamed so far, and whether the
        # transcript shows it (the user may be reading something else).
        self.generating_job: jobs.Job | None = None
        self.stream: ReplyStream | None = None
        self.stream_shown = False
        # Whether the tree shows the message sent and the reply being
        # generated: read again once the job has stored each, not only when
        # the reply has ended (``_show_stored``).
        self._message_in_tree = self._reply_in_tree = False
        # The job the engine runs now (what a progress report is about).
        self.running_job: jobs.Job | None = None
        # The tokens of each file attached in the composer, once counted.
        self.attached_tokens: dict[str, int] = {}

    # --- state --------------------------------------------------------------------
    # What the window reads of its parts, under the names it has always used.

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
        return self.generating_job is not None

    @property
    def writable(self) -> bool:
        """Whether the user can change anything now (idle, database writable)."""
        return not self.generating and not self.read_only

    @property
    def can_reply(self) -> bool:
        """Whether a reply can be asked for (writable, a model loaded)."""
        return self.writable and self.model.model_info is not None

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
        if self.generating and not self.stream_shown:
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

    def load_model(self, path: Path, settings: BackendSettings | None = None) -> None:
        """Load a model in the background (the composer waits for it), with
        ``settings`` (by default, the preferences')."""
        self.model.load_model(path, settings)

    # --- showing ------------------------------------------------------------------

    def show_conversation(
        self, conversation_id: int, node_id: int | None = None
    ) -> None:
        """Show a conversation at ``node_id`` (by default, its active node)."""
        shown = self.shown
        left = shown.conversation_id if self._shown_is_unused() else None
        record = shown.open(conversation_id)
        if record is None:
            return
        self.reload_tree()
        if left is not None and left != conversation_id:
            self._drop_unused(left)
        stream = self.stream
        if node_id is None and stream and stream.conversation_id == conversation_id:
            self._show_stream(stream)  # back where the reply streams
            return
        if node_id not in self.shown.snapshot:
            node_id = record.active_node_id or self.shown.snapshot.root_id
        self.activate(node_id)

    def activate(
        self, node_id: int | None, restore: bool = True, follow: bool = True
    ) -> None:
        """Make ``node_id`` the active node: the view follows at once, the engine
        restores to it in the background and the place is remembered.

        ``follow`` False leaves the transcript where the user scrolled to.
        While a reply is generated the engine is busy: the view follows, and
        the engine restores to where the user is once the reply is done.
        """
        stream = self.stream
        if stream is not None and self._streams_at(stream, node_id):
            self._show_stream(stream)
            return
        node_id = self._show_active(node_id, follow)
        made_with = self.made_with_other_model()
        self.view.offer_model_switch(made_with)
        if node_id is not None and not self.generating:
            if restore and self.model.model_info is not None and made_with is None:
                # Restoring also records the node as where to reopen.
                self.engine.submit(jobs.Restore(node_id))
            elif not self.read_only:  # where to reopen: worth no error
                # With another model's conversation nothing is restored until
                # the user says which model: restoring under this one would
                # tokenize its messages anew.
                self.engine.submit(jobs.SetActiveNode(node_id))
        self.view.state_changed()

    def made_with_other_model(self) -> str | None:
        """The model file the shown conversation was made with, when another
        model is loaded and the user has not chosen to go on with that one."""
        return self.shown.made_with_other(self.model.model_info)

    def switch_to_made_with(self) -> None:
        """Load the model the shown conversation was made with."""
        made_with = self.made_with_other_model()
        if made_with is not None and self.writable:
            self.load_model(Path(made_with))

    def keep_loaded_model(self) -> None:
        """Go on with the loaded model in the shown conversation."""
        if self.shown.keep_loaded_model():
            self.activate(self.shown.active_id, follow=False)

    def reload_tree(self) -> None:
        """Read the shown conversation's tree again."""
        self.shown.reload_tree(self.model.profile_id)

    def select_conversation(self, conversation_id: int) -> None:
        """The user picked a conversation in the list."""
        if conversation_id != self.shown.conversation_id:
            self.show_conversation(conversation_id)

    def choose_node(self, node_id: int) -> None:
        """The user picked a node (in the tree, or "Branch from here")."""
        if node_id != self.shown.active_id:
            self.activate(node_id)

    def choose_sibling(self, node_id: int) -> None:
        """The user stepped to a sibling: show the newest leaf below it."""
        self.activate(self.shown.snapshot.latest_leaf(node_id))

    def open_search_hit(self, conversation_id: int, node_id: int) -> None:
        """Show a search hit (also while a reply streams: the user reads)."""
        if conversation_id != self.shown.conversation_id:
            self.show_conversation(conversation_id, node_id)
        elif node_id != self.shown.active_id:
            self.activate(node_id)

    def _walk(self, move: Move) -> None:
        """Activate where ``move`` leads from the active node, if anywhere."""
        target = self.shown.step(move)
        if target is not None:
            self.activate(target)

    def previous_branch(self) -> None:
        """Go to the previous sibling at the nearest fork above the active node."""
        self._walk(lambda tree, node: tree.sibling_step(node, -1))

    def next_branch(self) -> None:
        """Go to the next sibling at the nearest fork above the active node."""
        self._walk(lambda tree, node: tree.sibling_step(node, 1))

    def parent_message(self) -> None:
        """Go to the active node's parent."""
        self._walk(TreeSnapshot.parent_of)

    def child_message(self) -> None:
        """Go to the active node's newest child."""
        self._walk(TreeSnapshot.newest_child)

    def last_of_role(self, role: str) -> int | None:
        """The last message of ``role`` on the active path."""
        return self.shown.last_of_role(role)

    # --- generating ---------------------------------------------------------------

    def send(self, text: str, editing: int | None) -> bool:
        """Send the composer's ``text`` (an edit of ``editing``, when given).

        With the active node a user message, ``text`` becomes a new version of
        it (a sibling: two user turns in a row would not be a chat), and with
        no text its reply is generated. Returns whether the text was taken:
        the composer then clears and leaves editing.
        """
        if (
            not self.can_reply
            or self.model.loading_model
            or self.shown.active_id is None
        ):
            return False
        if self.made_with_other_model() is not None and self.shown.conversation_id:
            # Writing on is choosing the loaded model.
            self.shown.keep_loaded_model()
            self.view.offer_model_switch(None)
        text = text.strip()
        budget = self.model.prefs.checkpoint_budget_bytes
        if editing is not None and editing in self.shown.snapshot:
            if not text:
                return False
            edited = self.shown.snapshot.nodes[editing]
            parent = edited.parent_id
            assert parent is not None  # a message is never the root
            if edited.role == Role.TOOL:
                # An edited result: a sibling the model goes on from.
                result = jobs.EditToolResult(editing, text, self._sampling(), budget)
                self._begin_generation(result, parent, None)
                return True
            job: jobs.Job = jobs.Edit(editing, text, self._sampling(), budget)
            self._begin_generation(job, parent, text)
            return True
        if self.shown.active_role() == Role.USER:
            if text:
                return self.send(text, editing=self.shown.active_id)
            self.reply_to_active()
            return False
        if not text:
            return False
        if self.tools_on:
            job = jobs.SendWithTools(
                self.shown.active_id,
                text,
                self._sampling(),
                budget,
                self.shown.tool_choice,
            )
        else:
            job = jobs.Send(self.shown.active_id, text, self._sampling(), budget)
        self.shown.name_after(text)
        self._begin_generation(job, self.shown.active_id, text)
        return True

    def attach(self, name: str, text: str) -> None:
        """A file was attached in the composer: count what it takes of the
        context (the engine tokenizes; the answer comes back as a job's)."""
        self.attached_tokens.pop(name, None)
        if self.model.model_info is not None:
            self.engine.submit(jobs.CountTokens(name, text))

    def detach(self, name: str) -> None:
        """A file was taken out of the composer."""
        self.attached_tokens.pop(name, None)

    def reply_to_active(self) -> None:
        """Generate a reply to the active node, a user message."""
        if (
            not self.can_reply
            or self.model.loading_model
            or self.shown.active_role() != Role.USER
        ):
            return
        assert self.shown.active_id is not None
        budget = self.model.prefs.checkpoint_budget_bytes
        job = jobs.GenerateReply(self.shown.active_id, self._sampling(), budget)
        self._begin_generation(job, self.shown.active_id, None)

    @property
    def stoppable(self) -> bool:
        """Whether Stop has something to stop: a reply, a model being loaded,
        or other long work that reports its progress."""
        return self.generating or isinstance(self.running_job, jobs.LoadModel)

    def stop(self) -> bool:
        """Stop the reply being generated, or the model being loaded; False if
        there is nothing to stop."""
        if self.stoppable:
            self.engine.stop()
            return True
        return False

    def regenerate(self, node_id: int) -> None:
        """A new reply beside reply ``node_id``."""
        if not self.can_reply:
            return
        budget = self.model.prefs.checkpoint_budget_bytes
        self._begin_generation(
            jobs.Regenerate(node_id, self._sampling(), budget),
            self.shown.parent_of(node_id),
            None,
        )

    def continue_reply(self, node_id: int) -> None:
        """A longer version of reply ``node_id``, cut at the length limit."""
        if not self.can_reply:
            return
        budget = self.model.prefs.checkpoint_budget_bytes
        self._begin_generation(
            jobs.ContinueReply(node_id, self._sampling(), budget),
            self.shown.parent_of(node_id),
            None,
        )

    def alternatives(self, node_id: int, n: int) -> None:
        """``n`` new replies beside reply ``node_id``, generated side by side."""
        if not self.can_reply:
            return
        budget = self.model.prefs.checkpoint_budget_bytes
        self._begin_generation(
            jobs.RegenerateParallel(node_id, self._sampling(), n, budget),
            self.shown.parent_of(node_id),
            None,
        )

    # --- tools ----------------------------------------------------------------------

    @property
    def tools_on(self) -> bool:
        """Whether the next message offers the enabled servers' tools."""
        return self.shown.tool_choice != "off" and self.model.tools_available

    def set_tools(self, choice: str) -> None:
        """The composer's Tools menu: ``"off"``, ``"auto"`` (the model
        decides) or ``"required"`` (the message's first reply calls a tool)."""
        self.shown.tool_choice = choice
        info = self.model.model_info
        if choice != "off" and info is not None and info.tool_format == "generic":
            self.view.show_message(GENERIC_TOOLS_NOTE)
        self.view.state_changed()

    def run_call(self, node_id: int, call_id: str) -> None:
        """Run the waiting call ``call_id`` of reply ``node_id`` (the user
        said yes), and go on."""
        self._answer_calls(node_id, call_id, "run")

    def deny_call(self, node_id: int, call_id: str) -> None:
        """Deny the waiting call ``call_id`` of reply ``node_id``: the model
        reads that it was not run, and goes on."""
        self._answer_calls(node_id, call_id, "deny")

    def run_edited_call(self, node_id: int, call_id: str, arguments: str) -> None:
        """Run call ``call_id`` of reply ``node_id`` with ``arguments``
        instead: a sibling reply holds the edited call; nothing is erased."""
        if not self.can_reply or node_id not in self.shown.snapshot:
            return
        budget = self.model.prefs.checkpoint_budget_bytes
        job = jobs.EditCallArguments(
            node_id, call_id, arguments, self._sampling(), budget
        )
        self._begin_generation(job, self.shown.parent_of(node_id), None)

    def save_tool_servers(self, servers: list[ServerConfig]) -> None:
        """Store the MCP servers as Settings → Tools left them."""
        self.model.save_tool_servers(servers)

    def _answer_calls(self, node_id: int, call_id: str, decision: str) -> None:
        if not self.can_reply or node_id not in self.shown.snapshot:
            return
        budget = self.model.prefs.checkpoint_budget_bytes
        job = jobs.AnswerCalls(
            node_id, ((call_id, decision),), self._sampling(), budget
        )
        self._begin_generation(job, node_id, None)

    def regenerate_last(self) -> None:
        """Regenerate the last reply on the active path."""
        reply = self.last_of_role(Role.ASSISTANT)
        if reply is not None:
            self.regenerate(reply)

    def alternatives_last(self) -> None:
        """Regenerate the last reply on the active path, side by side."""
        reply = self.last_of_role(Role.ASSISTANT)
        if reply is not None:
            self.alternatives(reply, DEFAULT_ALTERNATIVES)

    def set_reasoning(self, choice: str | None) -> None:
        """The user chose how the shown conversation's model reasons."""
        self.shown.set_reasoning(choice)

    def way_on_chosen(self, choice: WayOn, size: int | None) -> None:
        """The user chose how to go on from a full context (``size``: new n_ctx)."""
        if choice is WayOn.BRANCH:
            self.view.focus_tree()
            self.view.show_message("Click an earlier message to branch from it.")
        elif choice is WayOn.RAISE and size is not None:
            backend = replace(self.model.prefs.backend, n_ctx=size)
            self.apply_preferences(replace(self.model.prefs, backend=backend))
        elif choice is WayOn.SUMMARY and self.shown.active_id is not None:
            job = jobs.ContinueWithSummary(self.shown.active_id, self._sampling())
            self.view.set_busy(job.busy)
            self.engine.submit(job)

    def reload_after_loss(self, on_workers: bool) -> None:
        """Load the model lost with its engine again: on the workers that
        still answer (``on_workers``), or on this computer alone."""
        if not self.generating:
            self.model.reload_after_loss(on_workers)

    # --- changing conversations ---------------------------------------------------

    def new_conversation(
        self,
        system_prompt: str | None = None,
        title: str | None = None,
        preset: Preset | None = None,
    ) -> None:
        """Start a conversation; ``system_prompt`` None: the preferred one.
        With a ``preset``, its replies use the preset's sampling.

        The conversation shown is new already (nothing written in it, no
        system prompt, no title of the user's): it is kept, not doubled.
        """
        if system_prompt is None:
            system_prompt = self.model.prefs.system_prompt or None
        if (
            self._shown_is_unused()
            and not system_prompt
            and not title
            and preset is None
        ):
            self.view.show_message("This conversation is new: write the first message.")
            return
        sampling, name = (preset.sampling, preset.name) if preset else (None, None)
        self.engine.submit(jobs.NewConversation(system_prompt, title, sampling, name))

    def branch_system_prompt(self) -> str:
        """The system prompt of the branch shown (the text of its root)."""
        return self.shown.branch_system_prompt()

    def conversation_sampling(self) -> tuple[SamplingParams, str | None]:
        """The sampling the shown conversation's replies use, and its preset."""
        return self.shown.sampling(self.model.prefs.sampling)

    def change_conversation_settings(
        self, system_prompt: str, sampling: SamplingParams | None, preset: str | None
    ) -> None:
        """Give the shown conversation ``sampling`` (None: the Settings') and,
        where ``system_prompt`` is not the branch's, a new branch from a new
        start with it: the branches written with the old one stay."""
        if not self.generating:
            self.shown.change_settings(system_prompt, sampling, preset)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Give a conversation a new title (shown at once, stored by the worker)."""
        self.engine.submit(jobs.RenameConversation(conversation_id, title))
        if not self.read_only:
            self.view.show_title(conversation_id, title)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation; the most recent other one is shown (or a new one).

        It leaves the list at once; the worker deletes it (and drops it from
        the engine's context) before it runs anything asked for after.
        """
        self.engine.submit(jobs.DeleteConversation(conversation_id))
        if self.read_only:
            return  # the job fails and says why
        self.view.conversation_removed(conversation_id)
        if conversation_id != self.shown.conversation_id:
            return
        self.shown.conversation_id = None
        recent = self.shown.most_recent(besides=conversation_id)
        if recent is not None:
            self.show_conversation(recent)
            return
        self.reload_tree()
        self.activate(None)
        self.new_conversation()

    def delete_branch(self, node_id: int) -> None:
        """Delete a node and everything below it (the user has confirmed)."""
        if not self.generating:
            self.engine.submit(jobs.DeleteBranch(node_id))

    def import_conversation(self, data: Any) -> None:
        """Import a conversation from an exported file's JSON; it is then shown."""
        if not self.generating:
            self.engine.submit(jobs.ImportConversation(data))

    # --- preferences --------------------------------------------------------------

    def save_preferences(self, prefs: Preferences) -> None:
        """Use ``prefs`` now; the worker stores them (not on a read-only database)."""
        self.model.save_preferences(prefs)

    def apply_preferences(self, prefs: Preferences) -> None:
        """Save new preferences; reload the model if it or its settings changed."""
        self.model.apply_preferences(prefs)

    # --- what the engine reports --------------------------------------------------

    def on_started(self, job: jobs.Job) -> None:
        """A job began on the engine thread."""
        self.running_job = job
        self.view.set_busy(job.busy)
        self.view.state_changed()  # e.g. Stop now stops a model load

    def on_progress(self, done: int, total: int) -> None:
        """The running job's long work got this far."""
        job = self.running_job
        stream = self.stream
        if job is None:
            return
        if (
            stream is not None
            and job is self.generating_job
            and not stream.pieces
            and not self._message_in_tree
        ):
            # A prompt being read: the message sent is stored (before any
            # model work), so the tree can show it now.
            self._show_stored(stream)
        if done >= total:
            # Read: the job goes on with what it does otherwise (generating).
            self.view.set_busy(job.busy)
            self.view.show_progress(0, 0)
            return
        text = job.progress(done, total)
        if stream is not None and stream.pieces:
            # After the replies streamed: their checkpoints being made.
            text = f"Saving the replies… {done:,} of {total:,} tokens"
        if text is None:
            return
        self.view.set_busy(text)
        # A progress bar counts in 32-bit ints; bytes freed can be more.
        self.view.show_progress(done * 1000 // total, 1000)
        if stream is not None and job is self.generating_job:
            self.view.show_generating(stream.conversation_id, text)
            if self.stream_shown:
                self.view.show_reply_progress(text)

    def on_token(self, piece: str) -> None:
        """A piece of the reply's answer streamed."""
        self._streamed(piece, ReplyStream.add_answer, self.view.append_stream)

    def on_thinking(self, piece: str) -> None:
        """A piece of the reply's reasoning streamed."""
        self._streamed(piece, ReplyStream.add_thinking, self.view.append_thinking)

    def on_alternative(self, index: int, piece: str) -> None:
        """A piece of alternative ``index``'s answer streamed."""
        stream = self.stream
        if stream is None:
            return
        stream.add_alternative(index, piece)
        if self.stream_shown:
            self.view.append_alternative(index, piece)
        self._say_writing(stream)

    def on_failed(self, job: jobs.Job, message: str) -> None:
        """A job failed with a message for the user."""
        self.view.show_error(job.failure, message)

    def on_finished(self, result: JobResult) -> None:
        """A job ended, after success or failure."""
        self.running_job = None
        if not self.engine.busy:
            self.view.set_busy(None)
        self.view.show_progress(0, 0)
        if isinstance(result, Failed) and result.engine_lost:
            self.model.engine_lost(result)
        match result:
            case ModelLoaded() | Failed(job=jobs.LoadModel()):
                if self.model.loaded(result) and self.shown.active_id is not None:
                    # The tree's checkpoint marks are the new model's now.
                    self.reload_tree()
                    self.activate(self.shown.active_id, follow=False)
            case _ if isinstance(result.job, jobs.Generating):
                self._end_generation(result)
            case Created(job=jobs.NewSystemPrompt(conversation_id=changed)):
                if changed == self.shown.conversation_id and result.node_id is not None:
                    self.reload_tree()
                    self.activate(result.node_id)
                    self.view.refresh_list(changed)
            case Created():
                self.view.refresh_list(result.conversation_id)
                self.show_conversation(result.conversation_id)
            case Failed(job=jobs.SetSampling(conversation_id=changed)):
                self.shown.show_stored_sampling(changed)
            case Counted(job=jobs.CountTokens(name=name)):
                self._counted(name, result)
            case Failed(job=jobs.CountTokens(name=name)):
                self.view.refuse_attachment(name, "")  # said already (it failed)
            case Failed(job=jobs.Restore(), context_full=True):
                # The conversation does not fit the loaded context: say so
                # now it is shown, with the ways on, not at the next Send.
                self.view.show_context_full()
                self._offer_ways_on(result.error or "This branch does not fit.")
            case Moved(job=jobs.Restore(), sync=sync) if sync is not None:
                self.view.show_restore(sync, result.context_tokens, result.n_ctx)
                if sync.reprocessed_tokens:
                    # Reprocessing renders spans and writes checkpoints: show them.
                    self.reload_tree()
                    self.view.refresh_list(self.shown.conversation_id)
            case Moved(job=jobs.DeleteBranch()) | Failed(job=jobs.DeleteBranch()):
                target = result.node_id if isinstance(result, Moved) else None
                self.reload_tree()
                self.activate(target or self.shown.stored_active_node(), restore=False)
                self.view.refresh_list(self.shown.conversation_id)
            case Failed(job=jobs.SetReasoning()):
                self.shown.show_stored_reasoning()
            case Failed(job=jobs.RenameConversation(conversation_id=renamed)):
                self.shown.show_stored_title(renamed)
            case Deleted() | Failed(job=jobs.DeleteConversation()):
                self.view.refresh_list(self.shown.conversation_id)
            case Done(job=jobs.ServeRequest()) | Failed(job=jobs.ServeRequest()):
                # A client's request added nodes (or a conversation): the
                # list, and the tree if its conversation is the one shown.
                self.view.refresh_list(self.shown.conversation_id)
                if self.shown.conversation_id is not None:
                    self.reload_tree()
            case (
                Freed() | Failed(job=jobs.EvictCheckpoints() | jobs.ClearCheckpoints())
            ):
                # The tree's checkpoint marks and the list's sizes changed;
                # read once the job is done, even if its dialog closed before.
                self.reload_tree()
                self.view.refresh_list(self.shown.conversation_id)
        self.view.state_changed()

    # --- internals ----------------------------------------------------------------

    def _show_active(self, node_id: int | None, follow: bool) -> int | None:
        """Show ``node_id`` as the active node (not the reply streaming), without
        telling the engine; returns the node shown."""
        self.stream_shown = False
        return self.shown.show_active(node_id, follow)

    def _shown_is_unused(self) -> bool:
        """Whether the shown conversation holds nothing the user made."""
        streaming_in = self.stream.conversation_id if self.stream else None
        return self.shown.is_unused(streaming_in)

    def _drop_unused(self, conversation_id: int) -> None:
        """Delete a conversation the user left without writing in it, so that
        New conversation (Ctrl+N) leaves no empty ones behind."""
        self.engine.submit(jobs.DeleteConversation(conversation_id))
        self.view.conversation_removed(conversation_id)

    def _streams_at(self, stream: ReplyStream, node_id: int | None) -> bool:
        """Whether showing ``node_id`` means showing the reply that streams:
        the node it follows, or the reply itself (stored as it streams)."""
        if self.shown.conversation_id != stream.conversation_id or node_id is None:
            return False
        if node_id == stream.prefix_id:
            return True
        node = self.shown.snapshot.nodes.get(node_id)
        return node is not None and node.status == Status.GENERATING

    def _show_stream(self, stream: ReplyStream) -> None:
        """Show the reply being generated as far as it got; it streams on."""
        self.view.show_path(stream.prefix_id, True)  # the tree marks it
        self.shown.active_id = stream.prefix_id
        stream.show_in(self.view)
        self.stream_shown = True
        self.view.offer_model_switch(None)
        self.view.state_changed()

    def _streamed(
        self,
        piece: str,
        keep: _Keep,
        show: _Show,
    ) -> None:
        stream = self.stream
        if stream is None:
            return
        keep(stream, piece)
        if self.stream_shown:
            show(piece)
        self._say_writing(stream)

    def _say_writing(self, stream: ReplyStream) -> None:
        # The list's row says how far the reply got; every 8 pieces is enough
        # for a figure that moves, at no cost per token.
        if stream.pieces % 8 == 1:
            self.view.show_generating(
                stream.conversation_id, f"Writing a reply… {stream.pieces:,} tokens"
            )
            if not self._reply_in_tree:
                self._show_stored(stream)

    def _show_stored(self, stream: ReplyStream) -> None:
        """Show in the tree what the reply's job has stored so far: the
        message sent, and the reply once it is stored. The engine thread
        stores the reply as its first token comes out, so the first piece
        may arrive before it: read again at later pieces until it is there."""
        self._message_in_tree = True
        if stream.conversation_id != self.shown.conversation_id:
            self._reply_in_tree = True  # read when the user goes back there
            return
        self.reload_tree()
        nodes = self.shown.snapshot.nodes
        self._reply_in_tree = any(
            node.status == Status.GENERATING
            and node.parent_id is not None
            and stream.prefix_id in (node.parent_id, nodes[node.parent_id].parent_id)
            for node in nodes.values()
        )

    def _sampling(self) -> SamplingParams:
        return self.conversation_sampling()[0]

    def _begin_generation(
        self, job: jobs.Job, prefix_id: int, pending_text: str | None
    ) -> None:
        n = job.n if isinstance(job, jobs.RegenerateParallel) else 0
        assert self.shown.conversation_id is not None  # a node is shown
        self.stream = ReplyStream(
            self.shown.conversation_id, prefix_id, pending_text, n
        )
        self._message_in_tree = self._reply_in_tree = False
        if pending_text is not None:
            self.attached_tokens.clear()  # the files went with the message
        self.view.begin_reply(prefix_id, pending_text, n)
        self.stream_shown = True
        self.generating_job = job
        self.view.show_generating(self.shown.conversation_id, "Writing a reply…")
        self.view.state_changed()
        self.engine.submit(job)

    def _end_generation(self, result: JobResult) -> None:
        """A reply's job ended: ``Replied``, or ``Failed`` (stopped before
        the reply began, the context full, or an error said already)."""
        # A reply asked for around the presenter (a tool, a test) has no
        # stream: it ends where the user is, as if they watched it.
        stream = self.stream
        shown = stream is None or self.stream_shown
        self.generating_job, self.stream, self.stream_shown = None, None, False
        if stream is not None:
            self.view.show_generating(stream.conversation_id, None)
        replied = result if isinstance(result, Replied) else None
        failed = result if isinstance(result, Failed) else None
        # A tool turn may end without a new reply (its next call asks first).
        reply = replied.reply if replied is not None and replied.replies else None
        target: int | None = None
        if replied is not None:
            if reply is not None:
                self.view.show_reply_stats(reply.stats)
            # A tool turn ends where it stopped (a waiting call, a result).
            target = replied.node_id
        elif failed is not None and failed.stopped:
            # Stopped before the reply began: the user's message is stored,
            # without a reply; it is where the conversation stands now.
            self.view.show_message(
                "Stopped before the reply began. Your message is kept: "
                "Ctrl+Enter with an empty box generates its reply."
            )
        else:
            # The user's message may have been saved before the failure; show
            # wherever the conversation now stands, and give back unsent text.
            if (
                stream is not None
                and stream.pending_text
                and not (failed is not None and self._kept_after_loss(failed, stream))
            ):
                self.view.give_back_text(stream.pending_text)
            target = self.shown.stored_active_node()
        if stream is not None and not shown:
            self._ended_elsewhere(stream, failed is not None and failed.context_full)
            return
        # A reply records the loaded model on its conversation: known here
        # without reading it back (a failed one may or may not have).
        record, info = self.shown.record, self.model.model_info
        if reply is not None and record is not None and info is not None:
            if record.title == DEFAULT_TITLE:
                # The first message named the conversation: read the name once.
                named = self.shown.stored_record(record.id)
                if named is not None and named.title != record.title:
                    record = named
                    self.view.show_title(record.id, record.title)
            self.shown.record = replace(
                record, model_path=info.path, model_identity=info.identity
            )
        else:
            self.shown.record = self.shown.stored_record(self.shown.conversation_id)
            if self.shown.conversation_id is not None:
                # A name shown at Send stays only if the message was stored.
                self.shown.show_stored_title(self.shown.conversation_id)
        tree = replied.tree if replied is not None else None
        if tree is not None and tree.conversation_id == self.shown.conversation_id:
            self.shown.set_snapshot(tree)  # read by the engine thread, not here
        else:
            self.reload_tree()
        if target is None and stream is not None:
            target = self._unanswered(stream)
        if target is None:
            target = self.shown.stored_active_node()
        # Same path, now complete: a user reading higher up stays there. The
        # job stored it as the place to reopen already: nothing to write.
        self._show_active(target, follow=False)
        if replied is not None and isinstance(replied.job, jobs.RegenerateParallel):
            # Made together: side by side, to keep one (the first is active).
            self.view.offer_choice(
                [(r.assistant_node, r.text) for r in replied.replies]
            )
        self.view.refresh_list(self.shown.conversation_id)
        cut = reply is not None and reply.stats.stop_reason == StopReason.CONTEXT_FULL
        if failed is not None and failed.context_full and stream is not None:
            needed = failed.needed
            if needed is not None and not self._earlier_messages(stream):
                # Nothing before the message filled anything: no branch to
                # go back on, no summary to make. Only its own length counts.
                self.model.offer_shorter(needed, stored=stream.pending_text is None)
            else:
                self._offer_ways_on(failed.error, needed)
        elif (failed is not None and failed.context_full) or cut:
            message = failed.error if failed is not None else ""
            self._offer_ways_on(message or "The reply was cut off.")
        if replied is not None:
            said = tool_turns.ending_text(replied.ending, STEP_LIMIT)
            if said is not None:
                self.view.show_message(said)

    def _earlier_messages(self, stream: ReplyStream) -> bool:
        """Whether the message of ``stream`` follows earlier messages (not
        only the conversation's start)."""
        if stream.prefix_id not in self.shown.snapshot:
            return True  # not known: the branch's ways on say no less
        before = self.shown.snapshot.path(stream.prefix_id)[1:]
        if stream.pending_text is None:
            before = before[:-1]  # the stored message being answered
        return bool(before)

    def _kept_after_loss(self, failed: Failed, stream: ReplyStream) -> bool:
        """Whether the engine was lost after storing the message of
        ``stream`` (it is saved before its prompt is read): the transcript
        shows it, so the composer does not get it back to send twice."""
        if not failed.engine_lost or stream.pending_text is None:
            return False
        try:
            children = node_rows.get_children(self.db, stream.prefix_id)
        except (StorageUnavailable, NotFound):
            return False
        text = stream.pending_text.strip()
        return any(c.role == Role.USER and c.text == text for c in children)

    def _counted(self, name: str, result: Counted) -> None:
        """A file's tokens are known: keep it if the context has room for it
        beside the conversation and the other files, else refuse it."""
        others = sum(n for other, n in self.attached_tokens.items() if other != name)
        # Some room stays for the typed words, the turn's markup and a reply.
        room = result.n_ctx - result.context_tokens - others - ATTACH_MARGIN
        if result.n_tokens > room:
            self.view.refuse_attachment(
                name,
                f"{name} takes {result.n_tokens:,} tokens, but the context has "
                f"room for about {max(room, 0):,} more ({result.n_ctx:,} in all). "
                "Attach a shorter file or part of it, or raise the context size "
                "in the settings.",
            )
            return
        self.attached_tokens[name] = result.n_tokens
        self.view.attachment_counted(name, result.n_tokens)

    def _unanswered(self, stream: ReplyStream) -> int | None:
        """The user's message a stopped generation left without a reply."""
        if stream.pending_text is None or stream.prefix_id not in self.shown.snapshot:
            return None
        children = self.shown.snapshot.children
        for child in reversed(children.get(stream.prefix_id, [])):
            node = self.shown.snapshot.nodes[child]
            text = stream.pending_text.strip()
            if node.role == Role.USER and node.text == text and not children.get(child):
                return child
        return None

    def _ended_elsewhere(self, stream: ReplyStream, context_full: bool) -> None:
        """A reply ended while the user read something else: leave them there,
        show what changed, and take the engine to where they are."""
        if self.shown.conversation_id == stream.conversation_id:
            self.reload_tree()
        self.view.refresh_list(self.shown.conversation_id)
        if context_full:
            self.view.show_message(
                "The reply in the other conversation filled the context; "
                "open it to choose how to go on."
            )
        self.activate(self.shown.active_id, follow=False)

    def _offer_ways_on(self, message: str, needed: int | None = None) -> None:
        """The branch filled the context: the view lets the user choose how on."""
        self.model.offer_ways_on(self.shown.active_id, message, needed)


class _Keep(Protocol):
    """Keeps a streamed piece in a ``ReplyStream``."""

    def __call__(self, stream: ReplyStream, piece: str, /) -> None: ...


class _Show(Protocol):
    """Shows a streamed piece in the view."""

    def __call__(self, piece: str, /) -> None: ...
