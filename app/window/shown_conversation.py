"""The shown conversation: which one, which node, its tree and its settings.

``ShownConversation`` is the floor the window's other parts stand on: the
reply in flight, the model session and the presenter read from here which
conversation and node the user sees and the tree they belong to. It reads
the database (the tree's snapshot, the conversation's record; WAL keeps
those reads from waiting on the engine worker), tells the view what it
shows, and submits the jobs that change the conversation's own settings.
What it cannot know itself (the loaded model, its checkpoint profile, whether
a reply streams here) is handed in by the caller.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from app import jobs
from app.backend.values import ModelInfo, SamplingParams
from app.conversation.presets import conversation_sampling, stored_sampling
from app.conversation.titles import title_from
from app.conversation.tree_snapshot import TreeSnapshot
from app.window import tool_turns
from app.window.view import Engine, View
from storage import conversation_rows, tree_reads
from storage.conversation_listing import ConversationRecord
from storage.db import Database
from storage.errors import NotFound, StorageUnavailable
from storage.tables import DEFAULT_TITLE


class Move(Protocol):
    """A keyboard move through the tree: (tree, active node) → node, or None."""

    def __call__(self, tree: TreeSnapshot, node_id: int, /) -> int | None:
        """The node the move leads to from ``node_id`` in ``tree``."""


class ShownConversation:
    """The conversation the window shows, and where in it the user is.

    Parameters
    ----------
    db
        The open database, for reads (the engine worker does every write).
    engine
        Where the jobs that change the conversation's settings go.
    view
        The window.
    """

    def __init__(self, db: Database, engine: Engine, view: View) -> None:
        self.db = db
        self.engine = engine
        self.view = view
        self.conversation_id: int | None = None
        # The conversation as stored (its title, settings, which model it was
        # made with), updated where a change is known without reading it back.
        self.record: ConversationRecord | None = None
        self.snapshot = TreeSnapshot.empty()
        self.active_id: int | None = None
        # The shown conversation's stored reasoning choice (None: the default).
        self.reasoning: str | None = None
        # Whether the next message offers the tools of the enabled MCP
        # servers (the composer's Tools menu: "off", "auto" for the model to
        # decide, "required" for a first reply that calls one), and the start
        # of a branch whose offer the menu last followed.
        self.tool_choice = "off"
        self._tools_start: int | None = None
        # Conversations the user chose to go on with the loaded model, though
        # they were made with another.
        self._keep_loaded: set[int] = set()

    # --- which conversation, which node -----------------------------------------

    def open(self, conversation_id: int) -> ConversationRecord | None:
        """Make ``conversation_id`` the shown one (its tree is not read yet);
        None, said to the user, when it cannot be read."""
        try:
            record = conversation_rows.get_conversation(self.db, conversation_id)
        except (StorageUnavailable, NotFound) as exc:
            self.view.show_error("Could not open the conversation", str(exc))
            return None
        self.conversation_id = conversation_id
        self.record = record
        self.reasoning = record.reasoning
        self.view.conversation_shown(record)
        return record

    def reload_tree(self, profile_id: int | None) -> None:
        """Read the shown conversation's tree again; its checkpoint marks are
        those of the backend profile ``profile_id`` (the loaded model's)."""
        if self.conversation_id is None:
            self.set_snapshot(TreeSnapshot.empty())
            return
        try:
            nodes = tree_reads.tree(self.db, self.conversation_id, profile_id)
        except (StorageUnavailable, NotFound) as exc:
            self.view.show_error("Could not read the conversation", str(exc))
            return
        self.set_snapshot(TreeSnapshot(self.conversation_id, nodes))

    def set_snapshot(self, snapshot: TreeSnapshot) -> None:
        """Show ``snapshot`` as the tree (read here, or by the engine thread)."""
        self.snapshot = snapshot
        self.view.show_tree(snapshot)

    def show_active(self, node_id: int | None, follow: bool) -> int | None:
        """Show ``node_id`` (the root if it is not in the tree) as the active
        node, without telling the engine; returns the node shown."""
        if node_id is None or node_id not in self.snapshot:
            node_id = self.snapshot.root_id
        self.active_id = node_id
        self._follow_tools_offer(node_id)
        self.view.show_path(node_id, follow)
        return node_id

    def is_unused(self, streaming_in: int | None) -> bool:
        """Whether the shown conversation holds nothing the user made: no
        message, no system prompt, no title of theirs, and no reply coming
        (``streaming_in``: the conversation a reply streams in, if any)."""
        record, snapshot = self.record, self.snapshot
        if (
            record is None
            or self.db.read_only
            or streaming_in == record.id
            or record.title != DEFAULT_TITLE
            or len(snapshot.nodes) != 1
            or snapshot.conversation_id != record.id
        ):
            return False
        root = snapshot.nodes[snapshot.root_id] if snapshot.root_id else None
        return root is not None and not root.text.strip()

    def most_recent(self, besides: int | None = None) -> int | None:
        """The most recently used conversation (other than ``besides``)."""
        try:
            listed = conversation_rows.list_conversations(self.db)
        except StorageUnavailable as exc:
            self.view.show_error("Cannot read the database", str(exc))
            return None
        return next((c.id for c in listed if c.id != besides), None)

    # --- reading the tree ---------------------------------------------------------

    def last_of_role(self, role: str) -> int | None:
        """The last message of ``role`` on the active path."""
        active = self.active_id
        if active is None or active not in self.snapshot:
            return None
        return self.snapshot.last_of_role(active, role)

    def active_role(self) -> str | None:
        """The role of the active node (None: nothing is shown)."""
        active = self.active_id
        node = self.snapshot.nodes.get(active) if active is not None else None
        return node.role if node is not None else None

    def parent_of(self, node_id: int) -> int:
        """The parent of message ``node_id`` (a message is never a root)."""
        parent = self.snapshot.nodes[node_id].parent_id
        assert parent is not None  # a reply is never the root
        return parent

    def step(self, move: Move) -> int | None:
        """Where ``move`` leads from the active node, if anywhere."""
        active = self.active_id
        if active is None or active not in self.snapshot:
            return None
        return move(self.snapshot, active)

    def branch_system_prompt(self) -> str:
        """The system prompt of the branch shown (the text of its root)."""
        if self.active_id is None or self.active_id not in self.snapshot:
            return ""
        return self.snapshot.nodes[self.snapshot.path(self.active_id)[0]].text

    def stored_record(self, conversation_id: int | None) -> ConversationRecord | None:
        """The conversation as stored, or None (none shown, or unreadable now)."""
        if conversation_id is None:
            return None
        try:
            return conversation_rows.get_conversation(self.db, conversation_id)
        except (StorageUnavailable, NotFound):
            return None

    def stored_active_node(self) -> int | None:
        """Where the shown conversation stands as stored (else the active node)."""
        if self.conversation_id is None:
            return None
        record = self.stored_record(self.conversation_id)
        return self.active_id if record is None else record.active_node_id

    # --- which model it was made with ---------------------------------------------

    def made_with_other(self, info: ModelInfo | None) -> str | None:
        """The model file the shown conversation was made with, when ``info``
        (the loaded model) is another and the user has not chosen to go on
        with that one."""
        record = self.record
        if (
            record is None
            or info is None
            or not record.model_identity
            or not record.model_path
            or record.model_identity == info.identity
            or record.id in self._keep_loaded
        ):
            return None
        return record.model_path

    def keep_loaded_model(self) -> bool:
        """Go on with the loaded model here; False when nothing is shown."""
        if self.conversation_id is None:
            return False
        self._keep_loaded.add(self.conversation_id)
        return True

    def after_reply(self, info: ModelInfo | None) -> None:
        """A reply's job ended: ``info`` is the model that wrote a reply (None:
        none was made, and the record is read again)."""
        record = self.record
        if info is not None and record is not None:
            # A reply records the loaded model on its conversation: known
            # here without reading it back.
            if record.title == DEFAULT_TITLE:
                # The first message named the conversation: read the name once.
                named = self.stored_record(record.id)
                if named is not None and named.title != record.title:
                    record = named
                    self.view.show_title(record.id, record.title)
            self.record = replace(
                record, model_path=info.path, model_identity=info.identity
            )
            return
        # A failed one may or may not have stored its message.
        self.record = self.stored_record(self.conversation_id)
        if self.conversation_id is not None:
            # A name shown at Send stays only if the message was stored.
            self.show_stored_title(self.conversation_id)

    # --- the shown conversation's settings ----------------------------------------
    # Stored on the conversation, changed by a job, shown at once and read
    # back when the job fails: its name, how it reasons, how it samples.

    def name_after(self, first_message: str) -> None:
        """Show the name a first message gives the conversation at once, as
        the worker stores it with the message (not once the reply is done)."""
        record, active = self.record, self.snapshot.nodes.get(self.active_id or 0)
        if (
            record is None
            or record.title != DEFAULT_TITLE
            or active is None
            or active.parent_id is not None  # not a first message
        ):
            return
        title = title_from(first_message)
        self.record = replace(record, title=title)
        self.view.show_title(record.id, title)

    def show_stored_title(self, conversation_id: int) -> None:
        """After a failed rename: show the title that is stored (show_title
        puts it back in the list's row too)."""
        record = self.stored_record(conversation_id)
        if record is not None:
            self.view.show_title(conversation_id, record.title)

    def set_reasoning(self, choice: str | None) -> None:
        """The user chose how the conversation's model reasons."""
        if self.conversation_id is None or choice == self.reasoning:
            return
        self.reasoning = choice
        self.engine.submit(jobs.SetReasoning(self.conversation_id, choice))

    @property
    def context_size(self) -> int | None:
        """The context size raised for the shown conversation (None: the
        Settings')."""
        return self.record.context_size if self.record else None

    def keep_context_size(self, size: int | None) -> None:
        """Remember ``size`` as the shown conversation's context size (None:
        the Settings' again)."""
        if self.conversation_id is None or self.record is None:
            return
        self.record = replace(self.record, context_size=size)
        self.engine.submit(jobs.SetContextSize(self.conversation_id, size))

    def show_stored_reasoning(self) -> None:
        """After a failed change: show what is stored, not what was asked for."""
        record = self.stored_record(self.conversation_id)
        if record is not None:
            self.reasoning = record.reasoning
            self.view.show_reasoning(record.reasoning)

    def sampling(self, preferred: SamplingParams) -> tuple[SamplingParams, str | None]:
        """The sampling the conversation's replies use, and its preset
        (``preferred``: the Settings', for a conversation with none stored)."""
        stored = self.record.sampling if self.record else None
        return conversation_sampling(stored, preferred)

    def change_settings(
        self, system_prompt: str, sampling: SamplingParams | None, preset: str | None
    ) -> None:
        """Give the conversation ``sampling`` (None: the Settings') and, where
        ``system_prompt`` is not the branch's, a new branch from a new start
        with it: the branches written with the old one stay."""
        record = self.record
        if record is None:
            return
        stored = stored_sampling(sampling, preset)
        if stored != record.sampling:
            self.engine.submit(jobs.SetSampling(record.id, sampling, preset))
            self.record = replace(record, sampling=stored)
        if system_prompt.strip() != self.branch_system_prompt().strip():
            self.engine.submit(jobs.NewSystemPrompt(record.id, system_prompt.strip()))

    def show_stored_sampling(self, conversation_id: int) -> None:
        """After a failed change: use what is stored, not what was asked for."""
        record, shown = self.stored_record(conversation_id), self.record
        if record is not None and shown is not None and shown.id == conversation_id:
            self.record = replace(shown, sampling=record.sampling)

    def _follow_tools_offer(self, node_id: int | None) -> None:
        """On a branch of another start, the Tools switch shows whether that
        start offers tools (a switch turned on stays on along its branch)."""
        if node_id is None or node_id not in self.snapshot:
            return
        start = self.snapshot.path(node_id)[0]
        if start != self._tools_start:
            self._tools_start = start
            offered = tool_turns.offers_tools(self.snapshot, node_id)
            self.tool_choice = "auto" if offered else "off"
