"""The reply being generated: where it goes, what it streamed, how it ended.

One reply (or ``n`` side by side) is generated at a time. While it streams
the user may read another conversation or another branch; the transcript
then shows that instead. What the engine streamed is kept in a
``ReplyStream``, so that coming back shows the reply as far as it got, and it
goes on streaming from there. When its job ends (``Replied``, or ``Failed``:
stopped, the context full, an error said already) ``ReplyInFlight.end``
shows where the conversation now stands and what the user can do next.

It stands on the shown conversation (where the reply goes, its tree) and the
model session (what the reply was made with, the context's size).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from app import jobs
from app.conversation.results import StopReason
from app.jobs.results import Failed, JobResult, Replied
from app.mcp.config import STEP_LIMIT
from app.window import tool_turns
from app.window.model_session import ModelSession
from app.window.shown_conversation import ShownConversation
from app.window.view import Engine, View
from storage import node_rows
from storage.errors import NotFound, StorageUnavailable
from storage.values import Role, Status


@dataclass
class ReplyStream:
    """One generation: where it goes and what it has streamed.

    ``prefix_id`` is the node the reply follows (the user's message for a
    reply, the parent of a message being edited or sent); ``pending_text`` the
    user's text not yet in the tree when it began; ``n`` how many replies
    stream side by side (0: one).
    """

    conversation_id: int
    prefix_id: int
    pending_text: str | None
    n: int
    answer: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    alternatives: dict[int, list[str]] = field(default_factory=dict)

    @property
    def pieces(self) -> int:
        """How many pieces of answer have streamed (all replies together)."""
        return len(self.answer) + sum(map(len, self.alternatives.values()))

    def add_answer(self, piece: str) -> None:
        """Keep a piece of the answer."""
        self.answer.append(piece)

    def add_thinking(self, piece: str) -> None:
        """Keep a piece of the reasoning."""
        self.thinking.append(piece)

    def add_alternative(self, index: int, piece: str) -> None:
        """Keep a piece of alternative ``index``."""
        self.alternatives.setdefault(index, []).append(piece)

    def show_in(self, view: View) -> None:
        """Show the reply as far as it got: room for it, then what streamed,
        joined (one piece each, not one call per token)."""
        view.begin_reply(self.prefix_id, self.pending_text, self.n)
        if self.thinking:
            view.append_thinking("".join(self.thinking))
        if self.answer:
            view.append_stream("".join(self.answer))
        for index, pieces in sorted(self.alternatives.items()):
            view.append_alternative(index, "".join(pieces))


class _Keep(Protocol):
    """Keeps a streamed piece in a ``ReplyStream``."""

    def __call__(self, stream: ReplyStream, piece: str, /) -> None: ...


class _Show(Protocol):
    """Shows a streamed piece in the view."""

    def __call__(self, piece: str, /) -> None: ...


class ReplyInFlight:
    """The reply being generated, from its job's start to its end.

    Parameters
    ----------
    engine
        Where the reply's job goes.
    view
        The window.
    shown
        The conversation shown (the reply goes to it, the user may leave it).
    model
        The model session (the loaded model writes the reply).
    """

    def __init__(
        self,
        engine: Engine,
        view: View,
        shown: ShownConversation,
        model: ModelSession,
    ) -> None:
        self.engine = engine
        self.view = view
        self.shown = shown
        self.model = model
        # The reply's job, what it streamed so far, and whether the
        # transcript shows it (the user may be reading something else).
        self.job: jobs.Job | None = None
        self.stream: ReplyStream | None = None
        self.stream_shown = False
        # Whether the tree shows the message sent and the reply being
        # generated: read again once the job has stored each, not only when
        # the reply has ended (``_show_stored``).
        self._message_in_tree = self._reply_in_tree = False

    @property
    def generating(self) -> bool:
        """Whether a reply is being generated."""
        return self.job is not None

    @property
    def can_begin(self) -> bool:
        """Whether a reply can be asked for: none is being generated, the
        database is writable and a model is loaded."""
        return (
            not self.generating
            and not self.shown.db.read_only
            and self.model.model_info is not None
        )

    @property
    def out_of_sight(self) -> bool:
        """Whether a reply streams where the transcript does not show it (the
        user reads another conversation or branch)."""
        return self.stream is not None and not self.stream_shown

    @property
    def conversation_id(self) -> int | None:
        """The conversation the reply goes to (None: no reply streams)."""
        return self.stream.conversation_id if self.stream is not None else None

    # --- beginning, and showing it again ------------------------------------------

    def begin(self, job: jobs.Job, prefix_id: int, pending_text: str | None) -> None:
        """Submit ``job``, a reply after ``prefix_id`` in the shown conversation
        (``pending_text``: the user's message, not stored yet)."""
        n = job.n if isinstance(job, jobs.RegenerateParallel) else 0
        conversation_id = self.shown.conversation_id
        assert conversation_id is not None  # a node is shown
        self.stream = ReplyStream(conversation_id, prefix_id, pending_text, n)
        self._message_in_tree = self._reply_in_tree = False
        self.view.begin_reply(prefix_id, pending_text, n)
        self.stream_shown = True
        self.job = job
        self.view.show_generating(conversation_id, "Writing a reply…")
        self.view.state_changed()
        self.engine.submit(job)

    def streams_at(self, node_id: int | None) -> bool:
        """Whether showing ``node_id`` means showing the reply that streams:
        the node it follows, or the reply itself (stored as it streams)."""
        stream = self.stream
        if (
            stream is None
            or self.shown.conversation_id != stream.conversation_id
            or node_id is None
        ):
            return False
        if node_id == stream.prefix_id:
            return True
        node = self.shown.snapshot.nodes.get(node_id)
        return node is not None and node.status == Status.GENERATING

    def show(self) -> None:
        """Show the reply being generated as far as it got; it streams on."""
        stream = self.stream
        assert stream is not None  # only asked for while one streams
        self.view.show_path(stream.prefix_id, True)  # the tree marks it
        self.shown.active_id = stream.prefix_id
        stream.show_in(self.view)
        self.stream_shown = True
        self.view.offer_model_switch(None)
        self.view.state_changed()

    # --- what streams --------------------------------------------------------------

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

    def on_progress(self, job: jobs.Job, done: int, total: int) -> None:
        """The running ``job``'s long work got this far: said in the status
        bar, and also in the reply's card and list row when it is the
        reply's (a prompt being read, its checkpoints being saved)."""
        stream = self.stream
        if (
            stream is not None
            and job is self.job
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
        if stream is not None and job is self.job:
            self.view.show_generating(stream.conversation_id, text)
            if self.stream_shown:
                self.view.show_reply_progress(text)

    def _streamed(self, piece: str, keep: _Keep, show: _Show) -> None:
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
        self.shown.reload_tree(self.model.profile_id)
        nodes = self.shown.snapshot.nodes
        self._reply_in_tree = any(
            node.status == Status.GENERATING
            and node.parent_id is not None
            and stream.prefix_id in (node.parent_id, nodes[node.parent_id].parent_id)
            for node in nodes.values()
        )

    # --- the end --------------------------------------------------------------------

    def end(self, result: JobResult) -> None:
        """The reply's job ended: ``Replied``, or ``Failed`` (stopped before
        the reply began, the context full, or an error said already).

        Ended ``out_of_sight``, it leaves the user where they read; the caller
        then takes the engine there.
        """
        # A reply asked for around the presenter (a tool, a test) has no
        # stream: it ends where the user is, as if they watched it.
        stream = self.stream
        shown = stream is None or self.stream_shown
        self.job, self.stream, self.stream_shown = None, None, False
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
        self.shown.after_reply(self.model.model_info if reply is not None else None)
        tree = replied.tree if replied is not None else None
        if tree is not None and tree.conversation_id == self.shown.conversation_id:
            self.shown.set_snapshot(tree)  # read by the engine thread, not here
        else:
            self.shown.reload_tree(self.model.profile_id)
        if target is None and stream is not None:
            target = self._unanswered(stream)
        if target is None:
            target = self.shown.stored_active_node()
        # Same path, now complete: a user reading higher up stays there. The
        # job stored it as the place to reopen already: nothing to write.
        self.shown.show_active(target, follow=False)
        if replied is not None and isinstance(replied.job, jobs.RegenerateParallel):
            # Made together: side by side, to keep one (the first is active).
            self.view.offer_choice(
                [(r.assistant_node, r.text) for r in replied.replies]
            )
        self.view.refresh_list(self.shown.conversation_id)
        cut = reply is not None and reply.stats.stop_reason == StopReason.CONTEXT_FULL
        active = self.shown.active_id
        if failed is not None and failed.context_full and stream is not None:
            needed = failed.needed
            if needed is not None and not self._earlier_messages(stream):
                # Nothing before the message filled anything: no branch to
                # go back on, no summary to make. Only its own length counts.
                self.model.offer_shorter(needed, stored=stream.pending_text is None)
            else:
                self.model.offer_ways_on(active, failed.error, needed)
        elif (failed is not None and failed.context_full) or cut:
            message = failed.error if failed is not None else ""
            self.model.offer_ways_on(active, message or "The reply was cut off.")
        if replied is not None:
            said = tool_turns.ending_text(replied.ending, STEP_LIMIT)
            if said is not None:
                self.view.show_message(said)

    def _earlier_messages(self, stream: ReplyStream) -> bool:
        """Whether the message of ``stream`` follows earlier messages (not
        only the conversation's start)."""
        snapshot = self.shown.snapshot
        if stream.prefix_id not in snapshot:
            return True  # not known: the branch's ways on say no less
        before = snapshot.path(stream.prefix_id)[1:]
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
            children = node_rows.get_children(self.shown.db, stream.prefix_id)
        except (StorageUnavailable, NotFound):
            return False
        text = stream.pending_text.strip()
        return any(c.role == Role.USER and c.text == text for c in children)

    def _unanswered(self, stream: ReplyStream) -> int | None:
        """The user's message a stopped generation left without a reply."""
        snapshot = self.shown.snapshot
        if stream.pending_text is None or stream.prefix_id not in snapshot:
            return None
        children = snapshot.children
        for child in reversed(children.get(stream.prefix_id, [])):
            node = snapshot.nodes[child]
            text = stream.pending_text.strip()
            if node.role == Role.USER and node.text == text and not children.get(child):
                return child
        return None

    def _ended_elsewhere(self, stream: ReplyStream, context_full: bool) -> None:
        """A reply ended while the user read something else: leave them there
        and show what changed (the caller takes the engine to where they are)."""
        if self.shown.conversation_id == stream.conversation_id:
            self.shown.reload_tree(self.model.profile_id)
        self.view.refresh_list(self.shown.conversation_id)
        if context_full:
            self.view.show_message(
                "The reply in the other conversation filled the context; "
                "open it to choose how to go on."
            )
