"""Moving the user: to a conversation, to a node, and the engine after them.

``Navigation`` shows what the user picks (in the list, the tree, a search
hit, a keyboard step), or the conversation left to show when one is deleted
or created. The reply being generated is shown again where it streams; any
other node becomes the shown conversation's active node, and the engine is
taken there in the background (a restore, or only the place to reopen), or
not yet, where the conversation was made with another model: the view then
offers that model.

It holds no state of its own: it moves the shown conversation, and reads
the model session and the reply in flight to decide.
"""

from __future__ import annotations

from pathlib import Path

from app import jobs
from app.conversation.presets import Preset
from app.conversation.tree_snapshot import TreeSnapshot
from app.window.model_session import ModelSession
from app.window.reply_in_flight import ReplyInFlight
from app.window.shown_conversation import Move, ShownConversation
from app.window.view import Engine, View


class Navigation:
    """Where the user is, and the engine after them.

    Parameters
    ----------
    engine
        Where the restores and the conversations' jobs go.
    view
        The window.
    shown
        The conversation shown, which this moves.
    model
        The model session (what is loaded decides what a move restores).
    reply
        The reply in flight (shown again where it streams).
    """

    def __init__(
        self,
        engine: Engine,
        view: View,
        shown: ShownConversation,
        model: ModelSession,
        reply: ReplyInFlight,
    ) -> None:
        self.engine = engine
        self.view = view
        self.shown = shown
        self.model = model
        self.reply = reply

    def show_conversation(
        self, conversation_id: int, node_id: int | None = None
    ) -> None:
        """Show a conversation at ``node_id`` (by default, its active node)."""
        left = self.shown.conversation_id if self._shown_is_unused() else None
        record = self.shown.open(conversation_id)
        if record is None:
            return
        self.reload_tree()
        if left is not None and left != conversation_id:
            self._drop_unused(left)
        if node_id is None and self.reply.conversation_id == conversation_id:
            self.reply.show()  # back where the reply streams
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
        if self.reply.streams_at(node_id):
            self.reply.show()
            return
        self.reply.stream_shown = False  # the user reads something else
        node_id = self.shown.show_active(node_id, follow)
        made_with = self.made_with_other_model()
        self.view.offer_model_switch(made_with)
        if node_id is not None and not self.reply.generating:
            if restore and self.model.model_info is not None and made_with is None:
                # Restoring also records the node as where to reopen; with a
                # context size of its own the model loads again first, and
                # the restore comes once it is loaded.
                if not self.model.follow_context():
                    self.engine.submit(jobs.Restore(node_id))
            elif not self.shown.db.read_only:  # where to reopen: worth no error
                # With another model's conversation nothing is restored until
                # the user says which model: restoring under this one would
                # tokenize its messages anew.
                self.engine.submit(jobs.SetActiveNode(node_id))
        self.view.state_changed()

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

    def reload_tree(self) -> None:
        """Read the shown conversation's tree again."""
        self.shown.reload_tree(self.model.profile_id)

    # --- the model a conversation was made with ---------------------------------

    def made_with_other_model(self) -> str | None:
        """The model file the shown conversation was made with, when another
        model is loaded and the user has not chosen to go on with that one."""
        return self.shown.made_with_other(self.model.model_info)

    def switch_to_made_with(self) -> None:
        """Load the model the shown conversation was made with."""
        made_with = self.made_with_other_model()
        writable = not self.reply.generating and not self.shown.db.read_only
        if made_with is not None and writable:
            self.model.load_model(Path(made_with))

    def keep_loaded_model(self) -> None:
        """Go on with the loaded model in the shown conversation."""
        if self.shown.keep_loaded_model():
            self.activate(self.shown.active_id, follow=False)

    # --- conversations that come and go ------------------------------------------

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

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation; the most recent other one is shown (or a new one).

        It leaves the list at once; the worker deletes it (and drops it from
        the engine's context) before it runs anything asked for after.
        """
        self.engine.submit(jobs.DeleteConversation(conversation_id))
        if self.shown.db.read_only:
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

    def _shown_is_unused(self) -> bool:
        """Whether the shown conversation holds nothing the user made."""
        return self.shown.is_unused(streaming_in=self.reply.conversation_id)

    def _drop_unused(self, conversation_id: int) -> None:
        """Delete a conversation the user left without writing in it, so that
        New conversation (Ctrl+N) leaves no empty ones behind."""
        self.engine.submit(jobs.DeleteConversation(conversation_id))
        self.view.conversation_removed(conversation_id)

    def _walk(self, move: Move) -> None:
        """Activate where ``move`` leads from the active node, if anywhere."""
        target = self.shown.step(move)
        if target is not None:
            self.activate(target)
