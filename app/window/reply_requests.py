"""The jobs that ask for a reply, and the files the next message takes along.

Send, an edit, a reply to a message, regenerate, continue, alternatives side
by side, a tool call run, denied or edited: each builds its job from the
shown conversation (where, with which sampling and tool choice) and the
model session (the checkpoint budget), and hands it to the reply in flight.
Each asks only when a reply can begin (none is being written, the database
is writable, a model is loaded).

The files attached in the composer are counted by the engine as they come:
one that leaves the context too little room is refused at once.
"""

from __future__ import annotations

from app import jobs
from app.backend.values import SamplingParams
from app.jobs.results import Counted
from app.window.actions import DEFAULT_ALTERNATIVES
from app.window.model_session import ModelSession
from app.window.reply_in_flight import ReplyInFlight
from app.window.shown_conversation import ShownConversation
from app.window.view import Engine, View
from storage.values import Role

# Tokens kept free beside attached files: the typed words, the turn's markup
# and the first tokens of a reply.
ATTACH_MARGIN = 64


class ReplyRequests:
    """What the user asks a reply for, turned into the jobs that make it.

    Parameters
    ----------
    engine
        Where the counting jobs go (a reply's job goes through ``reply``).
    view
        The window.
    shown
        The conversation shown: where a reply goes.
    model
        The model session: the preferences' checkpoint budget.
    reply
        The reply in flight, which submits a reply's job.
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
        # The tokens of each file attached in the composer, once counted.
        self.attached_tokens: dict[str, int] = {}

    # --- from the composer ----------------------------------------------------------

    def send(self, text: str, editing: int | None) -> bool:
        """Send the composer's ``text`` (an edit of ``editing``, when given).

        With the active node a user message, ``text`` becomes a new version of
        it (a sibling: two user turns in a row would not be a chat), and with
        no text its reply is generated. Returns whether the text was taken:
        the composer then clears and leaves editing.
        """
        shown = self.shown
        active = shown.active_id
        if not self.reply.can_begin or self.model.loading_model or active is None:
            return False
        made_with = shown.made_with_other(self.model.model_info)
        if made_with is not None and shown.keep_loaded_model():
            # Writing on is choosing the loaded model.
            self.view.offer_model_switch(None)
        text = text.strip()
        budget = self.model.prefs.checkpoint_budget_bytes
        if editing is not None and editing in shown.snapshot:
            if not text:
                return False
            edited = shown.snapshot.nodes[editing]
            parent = edited.parent_id
            assert parent is not None  # a message is never the root
            if edited.role == Role.TOOL:
                # An edited result: a sibling the model goes on from.
                result = jobs.EditToolResult(editing, text, self._sampling(), budget)
                self._begin(result, parent, None)
                return True
            job: jobs.Job = jobs.Edit(editing, text, self._sampling(), budget)
            self._begin(job, parent, text)
            return True
        if shown.active_role() == Role.USER:
            if text:
                return self.send(text, editing=active)
            self.reply_to_active()
            return False
        if not text:
            return False
        if shown.tool_choice != "off" and self.model.tools_available:
            job = jobs.SendWithTools(
                active, text, self._sampling(), budget, shown.tool_choice
            )
        else:
            job = jobs.Send(active, text, self._sampling(), budget)
        shown.name_after(text)
        self._begin(job, active, text)
        return True

    def reply_to_active(self) -> None:
        """Generate a reply to the active node, a user message."""
        if (
            not self.reply.can_begin
            or self.model.loading_model
            or self.shown.active_role() != Role.USER
        ):
            return
        active = self.shown.active_id
        assert active is not None
        budget = self.model.prefs.checkpoint_budget_bytes
        self._begin(jobs.GenerateReply(active, self._sampling(), budget), active, None)

    def attach(self, name: str, text: str) -> None:
        """A file was attached in the composer: count what it takes of the
        context (the engine tokenizes; the answer comes back as a job's)."""
        self.attached_tokens.pop(name, None)
        if self.model.model_info is not None:
            self.engine.submit(jobs.CountTokens(name, text))

    def detach(self, name: str) -> None:
        """A file was taken out of the composer."""
        self.attached_tokens.pop(name, None)

    def counted(self, name: str, result: Counted) -> None:
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

    # --- from a reply's card, or the menu -----------------------------------------

    def regenerate(self, node_id: int) -> None:
        """A new reply beside reply ``node_id``."""
        if self.reply.can_begin:
            budget = self.model.prefs.checkpoint_budget_bytes
            job = jobs.Regenerate(node_id, self._sampling(), budget)
            self._begin(job, self.shown.parent_of(node_id), None)

    def continue_reply(self, node_id: int) -> None:
        """A longer version of reply ``node_id``, cut at the length limit."""
        if self.reply.can_begin:
            budget = self.model.prefs.checkpoint_budget_bytes
            job = jobs.ContinueReply(node_id, self._sampling(), budget)
            self._begin(job, self.shown.parent_of(node_id), None)

    def alternatives(self, node_id: int, n: int) -> None:
        """``n`` new replies beside reply ``node_id``, generated side by side."""
        if self.reply.can_begin:
            budget = self.model.prefs.checkpoint_budget_bytes
            job = jobs.RegenerateParallel(node_id, self._sampling(), n, budget)
            self._begin(job, self.shown.parent_of(node_id), None)

    def regenerate_last(self) -> None:
        """Regenerate the last reply on the active path."""
        reply = self.shown.last_of_role(Role.ASSISTANT)
        if reply is not None:
            self.regenerate(reply)

    def alternatives_last(self) -> None:
        """Regenerate the last reply on the active path, side by side."""
        reply = self.shown.last_of_role(Role.ASSISTANT)
        if reply is not None:
            self.alternatives(reply, DEFAULT_ALTERNATIVES)

    # --- a tool call that waits -------------------------------------------------------

    def run_call(self, node_id: int, call_id: str) -> None:
        """Run the waiting call ``call_id`` of reply ``node_id`` (the user
        said yes), and go on."""
        self._answer_call(node_id, call_id, "run")

    def deny_call(self, node_id: int, call_id: str) -> None:
        """Deny the waiting call ``call_id`` of reply ``node_id``: the model
        reads that it was not run, and goes on."""
        self._answer_call(node_id, call_id, "deny")

    def _answer_call(self, node_id: int, call_id: str, decision: str) -> None:
        if not self.reply.can_begin or node_id not in self.shown.snapshot:
            return
        budget = self.model.prefs.checkpoint_budget_bytes
        job = jobs.AnswerCalls(
            node_id, ((call_id, decision),), self._sampling(), budget
        )
        self._begin(job, node_id, None)

    def run_edited_call(self, node_id: int, call_id: str, arguments: str) -> None:
        """Run call ``call_id`` of reply ``node_id`` with ``arguments``
        instead: a sibling reply holds the edited call; nothing is erased."""
        if not self.reply.can_begin or node_id not in self.shown.snapshot:
            return
        budget = self.model.prefs.checkpoint_budget_bytes
        job = jobs.EditCallArguments(
            node_id, call_id, arguments, self._sampling(), budget
        )
        self._begin(job, self.shown.parent_of(node_id), None)

    def _sampling(self) -> SamplingParams:
        return self.shown.sampling(self.model.prefs.sampling)[0]

    def _begin(self, job: jobs.Job, prefix_id: int, pending_text: str | None) -> None:
        if pending_text is not None:
            self.attached_tokens.clear()  # the files went with the message
        self.reply.begin(job, prefix_id, pending_text)
