"""What a job did, one result type per kind of job (Qt-free).

The engine worker answers every job with exactly one of these, through its
``finished`` signal, after success and failure alike: ``Failed`` when the job
did not do what was asked, else the type its job names (its ``result_type``,
``app.jobs``). Each carries only the fields its job fills, so a reader
matches on the type and mypy checks what it reads.

Each names the job it answers as a ``BaseJob`` (one of ``app.jobs.Job``): the
jobs name these results as theirs, and the results naming the jobs' own
classes back would make the two modules import each other. A reader matches
the job's class (``Failed(job=jobs.LoadModel())``) where it needs the fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.jobs.base import BaseJob

if TYPE_CHECKING:
    from app.backend.values import ModelInfo
    from app.conversation.results import Reply, SyncStats
    from app.conversation.tree_snapshot import TreeSnapshot


@dataclass(frozen=True)
class Failed:
    """``job`` did not do what was asked; ``error`` says why.

    The user heard it already through the worker's ``failed`` signal unless
    the job was ``stopped`` (by the user: nothing to show), the branch is
    ``context_full`` or the ``engine_lost`` (the window offers the ways on
    instead): ``for_dialog``.
    """

    job: BaseJob
    error: str
    context_full: bool = False
    # With ``context_full``: the tokens the message and its reply's opening
    # needed, where known (a larger context is offered only if it holds them).
    needed: int | None = None
    # A model load failed and the model loaded before could not come back:
    # none is loaded now (otherwise a failed load keeps the one there was).
    model_lost: bool = False
    # What was stored before the Stop stays (a message sent is saved before
    # its prompt is read).
    stopped: bool = False
    # The engine's process ended under the job (llama.cpp aborts a process
    # whose worker stops answering): no model is loaded now, and
    # ``lost_workers`` are the workers that no longer answer. Messages and
    # checkpoints are in the database; the window offers the ways on.
    engine_lost: bool = False
    lost_workers: tuple[str, ...] = ()

    @property
    def for_dialog(self) -> bool:
        """Whether this is an error the worker's ``failed`` signal shows, not
        a Stop, a full context or a lost engine (the window's own offers)."""
        return not (self.stopped or self.context_full or self.engine_lost)


@dataclass(frozen=True)
class ModelLoaded:
    """A model is loaded; ``profile_id`` names whose checkpoints count now."""

    job: BaseJob  # a LoadModel
    model: ModelInfo
    n_ctx: int
    profile_id: int | None


@dataclass(frozen=True)
class Replied:
    """A job that generated: its replies (the first is the one shown; several
    when alternatives were generated together).

    A tool turn (``SendWithTools``, ``AnswerCalls``, ``EditCallArguments``,
    ``EditToolResult``, a ``Regenerate`` where the start offers tools) has
    ``ending`` set: its ``replies`` are those it generated, in order (the
    last is shown), and none where it only stored results before a call
    that waits; ``nodes`` every node it made; ``shown_node`` the node it
    ended on (a reply, or a result whose next call waits).
    """

    job: BaseJob
    replies: tuple[Reply, ...]
    # Checkpoint bytes deleted after the reply to keep within the budget.
    evicted_bytes: int = 0
    # The conversation's tree after the reply, checkpoints written: read on
    # the engine thread, which is idle then, so that the window need not.
    tree: TreeSnapshot | None = None
    # --- a tool turn's (``app.conversation.tool_loop``) ---
    # Every node it made, in order: a start made for the tools and the
    # branch copied under it first, then the messages, replies and results.
    nodes: tuple[int, ...] = ()
    # Why it ended: an ``Ending`` value ("answered", "needs_approval",
    # "step_limit", "stopped"); None for a job without tools.
    ending: str | None = None
    # The node the turn ended on: where the conversation stands now.
    shown_node: int | None = None
    # Each call of the turn and what became of it: ``CallRecord.as_dict()``
    # with "server" (the MCP server of the tool; None: none offered).
    calls: tuple[dict[str, Any], ...] = ()
    # The enabled servers whose tools could not be offered: (name, why).
    unavailable: tuple[tuple[str, str], ...] = ()
    # Where a tool turn generated no reply: its conversation, and the
    # context's tokens and size as they stand.
    conversation: int | None = None
    context: tuple[int, int] = (0, 0)

    @property
    def reply(self) -> Reply:
        """The reply shown: the first (of alternatives), or a tool turn's
        last. ``LookupError`` for a tool turn that generated none."""
        if not self.replies:
            raise LookupError("This tool turn generated no reply (see nodes).")
        return self.replies[-1] if self.ending is not None else self.replies[0]

    @property
    def conversation_id(self) -> int:
        """The conversation replied in."""
        if self.conversation is not None:
            return self.conversation
        return self.reply.conversation_id

    @property
    def node_id(self) -> int:
        """The node shown, the conversation's active node now: a tool turn's
        last node, else the reply shown."""
        if self.shown_node is not None:
            return self.shown_node
        return self.reply.assistant_node

    @property
    def context_tokens(self) -> int:
        """Tokens the context holds after the reply."""
        return self.reply.stats.context_tokens if self.replies else self.context[0]

    @property
    def n_ctx(self) -> int:
        """The context's size."""
        return self.reply.stats.n_ctx if self.replies else self.context[1]


@dataclass(frozen=True)
class Created:
    """A conversation (or a start in one) was made; ``node_id`` is where it
    opens, None for an imported one (it opens where it was left)."""

    job: BaseJob
    conversation_id: int
    node_id: int | None = None


@dataclass(frozen=True)
class Moved:
    """The conversation stands at ``node_id`` now (a restore, a delete below
    it, a remembered place); ``sync`` says what a restore took."""

    job: BaseJob
    conversation_id: int
    node_id: int | None
    sync: SyncStats | None = None
    context_tokens: int = 0
    n_ctx: int = 0


@dataclass(frozen=True)
class Counted:
    """The tokens a file's text takes, beside how full the context is."""

    job: BaseJob  # a CountTokens
    n_tokens: int
    context_tokens: int
    n_ctx: int


@dataclass(frozen=True)
class Freed:
    """Checkpoint bytes deleted (the messages stay)."""

    job: BaseJob
    evicted_bytes: int


@dataclass(frozen=True)
class Deleted:
    """A conversation is gone; the context is empty now if it held it."""

    job: BaseJob  # a DeleteConversation
    context_tokens: int
    n_ctx: int


@dataclass(frozen=True)
class Done:
    """A job with nothing to report beyond having been done."""

    job: BaseJob


JobResult = (
    Failed | ModelLoaded | Replied | Created | Moved | Counted | Freed | Deleted | Done
)

Succeeded = ModelLoaded | Replied | Created | Moved | Counted | Freed | Deleted | Done
