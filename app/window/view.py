"""What the window's logic asks of its surroundings, as protocols.

``View`` is the window (``app/qt/views/chrome/main_window.py`` implements it; tests
record its calls); ``Engine`` is the engine thread that runs the jobs
(``EngineController``; tests run them inline). The presenter and its parts
speak only to these, so that the window's logic runs without Qt.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from app import jobs
from app.backend.values import ModelInfo
from app.conversation.tree_snapshot import TreeSnapshot
from app.preferences import Preferences
from storage.conversation_listing import ConversationRecord

if TYPE_CHECKING:
    from app.conversation.results import ReplyStats, SyncStats


class Engine(Protocol):
    """What the presenter needs of the engine thread (``EngineController``)."""

    @property
    def busy(self) -> bool:
        """Whether a job is queued or running."""
        ...

    def submit(self, job: jobs.Job) -> None:
        """Queue a job; its result comes back through ``on_finished``."""
        ...

    def stop(self) -> None:
        """Ask the running generation to stop."""
        ...


class View(Protocol):
    """What the presenter asks of the window."""

    def conversation_shown(self, record: ConversationRecord) -> None:
        """A conversation is now shown: its title, its reasoning choice."""

    def show_title(self, conversation_id: int, title: str) -> None:
        """A conversation has this title now (in the list, and the window's)."""

    def show_tree(self, snapshot: TreeSnapshot) -> None:
        """The tree of the shown conversation changed."""

    def show_path(self, node_id: int | None, follow: bool) -> None:
        """Show the path to the active node; ``follow`` keeps the newest in sight."""

    def begin_reply(self, prefix_id: int, pending_text: str | None, n: int) -> None:
        """A reply starts streaming after ``prefix_id`` (``n`` > 0: ``n`` of them,
        side by side)."""

    def refresh_list(self, selected: int | None) -> None:
        """Re-read the conversation list and highlight ``selected``."""

    def offer_choice(self, replies: list[tuple[int, str]]) -> None:
        """Replies made together (node id, text): side by side, to keep one."""

    def conversation_removed(self, conversation_id: int) -> None:
        """Take a conversation out of the list at once (it is being deleted)."""

    def set_busy(self, text: str | None) -> None:
        """Say what the engine is doing (None: nothing)."""

    def show_progress(self, done: int, total: int) -> None:
        """How far the engine's long work got (``total`` 0: no figure)."""

    def show_generating(self, conversation_id: int, text: str | None) -> None:
        """Say in the list that a reply is being written in a conversation
        (None: no longer)."""

    def append_stream(self, piece: str) -> None:
        """A piece of the streaming reply's answer."""

    def show_reply_progress(self, text: str) -> None:
        """Say in the streaming reply what it waits for (a prompt being read)."""

    def append_thinking(self, piece: str) -> None:
        """A piece of the streaming reply's reasoning."""

    def append_alternative(self, index: int, piece: str) -> None:
        """A piece of alternative ``index``'s answer."""

    def show_message(self, text: str) -> None:
        """A passing note in the status bar."""

    def show_error(self, title: str, text: str) -> None:
        """Something the user asked for failed."""

    def show_restore(self, stats: SyncStats, context_tokens: int, n_ctx: int) -> None:
        """How the engine reached the active node, and how full the context is."""

    def show_context_full(self) -> None:
        """The shown branch does not fit the loaded context."""

    def show_reply_stats(self, stats: ReplyStats) -> None:
        """A reply's figures: its speed, the context, how its parent was reached."""

    def model_loaded(self, info: ModelInfo, n_ctx: int) -> None:
        """A model is loaded: show it and the chat."""

    def model_missing(self) -> None:
        """No model could be loaded: ask for one."""

    def show_chat(self, chat: bool) -> None:
        """Show the conversation (True) or the page that asks for a model."""

    def give_back_text(self, text: str) -> None:
        """A message that was not sent goes back to the composer, if it is empty."""

    def attachment_counted(self, name: str, n_tokens: int) -> None:
        """A file in the composer takes ``n_tokens`` of the context."""

    def refuse_attachment(self, name: str, reason: str) -> None:
        """A file in the composer cannot go: take it out, say why ("": said)."""

    def show_reasoning(self, choice: str | None) -> None:
        """The conversation's stored reasoning choice (after a failed change)."""

    def offer_ways_on(
        self, message: str, n_ctx: int, n_ctx_train: int, needed: int | None
    ) -> None:
        """The branch filled the context: let the user pick a ``WayOn`` (a
        larger context only if one holds ``needed`` tokens, where known)."""

    def offer_shorter(
        self, needed: int, n_ctx: int, n_ctx_train: int, stored: bool
    ) -> None:
        """A message with nothing before it needs ``needed`` tokens, more than
        the context holds: say so, with what can work (a ``WayOn``). The
        message is back in the composer, or ``stored`` already (unanswered)."""

    def offer_reload(self, message: str, remaining: tuple[str, ...]) -> None:
        """The engine's process ended (a worker was lost) and no model is
        loaded: offer to load it again on the ``remaining`` workers (if any)
        or on this computer alone (``reload_after_loss``)."""

    def focus_tree(self) -> None:
        """Show the tree and give it the keyboard."""

    def offer_model_switch(self, made_with: str | None) -> None:
        """The shown conversation was made with the model in ``made_with``, not
        the loaded one: offer to switch back or go on (None: offer nothing)."""

    def preferences_changed(self, prefs: Preferences) -> None:
        """The preferences changed (e.g. the recent models)."""

    def state_changed(self) -> None:
        """Anything the enabled actions or the composer depend on changed."""
