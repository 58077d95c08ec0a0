"""The tool loop: a message, the calls the model makes run, their results
stored, and the model answering them, until it answers in words.

Every step is a node of the tree, with its span and its checkpoint like any
other: the reply that calls (its calls stored with it, ``storage.tool_use``),
each result (a ``tool`` node, one under the other in the order of the
calls), the reply after them. Going back to any step restores it; editing
a result or regenerating a call is a sibling, as everywhere else.

One turn::

    reply = send(message)                 # shaped by `choice` (first reply only)
    while reply calls tools:
        stop if the step limit is reached     (its calls stay, not run)
        for each call, in order:
            never / unknown tool  -> a result that says so
            ask                   -> the caller decides: run, deny or wait
            always (or run)       -> the runner calls it (capped, never raises)
            wait                  -> stop here: the call stays unanswered
        reply = reply(last result)        # "auto": it may call again

The loop knows no MCP: it asks a ``ToolRunner`` for each tool's permission
and to run a call (``app.mcp.toolbox.McpToolRunner`` is the one that talks
to servers). The caller's Stop ends a reply, a running call (its result
says it was stopped) and the loop. No Qt here.

A call that waits for approval stays on its reply without a result;
``answer_calls`` takes the loop up again from that reply later, with the
caller's decision. ``go_on_from_result`` takes it up below a result (an
edited one: a sibling), ``regenerate`` from a new sibling of a reply; both
shape the replies with the tools of the branch's start, as ``send`` does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from app.conversation.errors import ServiceError
from app.conversation.reply_shape import FREE, ReplyShape
from app.conversation.results import StopReason
from storage import node_rows, tool_use
from storage.values import Role

if TYPE_CHECKING:
    from app.backend.values import SamplingParams
    from app.conversation.results import Reply
    from app.conversation.service import ConversationService
    from app.conversation.streams import Streams

# How many rounds of calls one message may lead to, unless told.
STEP_LIMIT = 8
# What the model reads for a call it may not make.
DENIED = "Error: the user did not allow this call; it was not run."
NO_OUTPUT = "(the tool returned no output)"


class Ending(StrEnum):
    """Why a turn ended."""

    ANSWERED = "answered"  # the last reply called no tool
    NEEDS_APPROVAL = "needs_approval"  # a call waits for the user's yes
    STEP_LIMIT = "step_limit"  # the last reply's calls would pass the limit
    STOPPED = "stopped"  # the caller stopped it


class CallStatus(StrEnum):
    """What became of one call."""

    RAN = "ran"  # run; its result is the tool's answer
    FAILED = "failed"  # run, and it failed (the result says how)
    STOPPED = "stopped"  # stopped while it ran (the result says so)
    DENIED = "denied"  # not allowed (never, or the caller said no)
    UNKNOWN = "unknown_tool"  # no tool of that name was offered
    NEEDS_APPROVAL = "needs_approval"  # waits for the user's yes: no result
    NOT_RUN = "not_run"  # after a call that waits, at the step limit, or stopped


class Decision(StrEnum):
    """The caller's answer about a call whose tool asks first."""

    RUN = "run"
    DENY = "deny"
    WAIT = "wait"  # store the call unanswered; the loop stops


class RunOutcome(Protocol):
    """A call's outcome as the loop reads it (``app.mcp.results.ToolOutcome``)."""

    @property
    def text(self) -> str:
        """What the model reads."""

    @property
    def outcome(self) -> str:
        """How the call ended, in a word (``"ok"``, ``"stopped"``, ...)."""

    @property
    def is_error(self) -> bool:
        """Whether the call did not give the tool's answer."""


class ToolRunner(Protocol):
    """What runs the calls: the tools' permissions, and running one."""

    def permission(self, name: str) -> str | None:
        """``"ask"``, ``"always"`` or ``"never"`` for the tool the model
        calls ``name``; None when no such tool was offered."""

    def run(
        self, name: str, arguments: str, should_stop: Callable[[], bool] | None
    ) -> RunOutcome:
        """Run the call (``arguments``: JSON text, as the model wrote it);
        never raises."""


@dataclass(frozen=True)
class PendingCall:
    """A call whose tool asks first, as the caller is asked about it."""

    reply_node: int
    call_id: str
    name: str
    arguments: str


Decide = Callable[[PendingCall], Decision]


def wait_for_approval(_call: PendingCall) -> Decision:
    """Approve nothing: every call that asks waits (the CLI without
    ``--approve-tools``)."""
    return Decision.WAIT


def approve_all(_call: PendingCall) -> Decision:
    """Run every call that asks (the user said yes to all, beforehand)."""
    return Decision.RUN


def deny_all(_call: PendingCall) -> Decision:
    """Deny every call that asks (the model reads that it was denied)."""
    return Decision.DENY


@dataclass(frozen=True)
class CallRecord:
    """One call of the turn and what became of it."""

    reply_node: int
    call_id: str
    name: str
    arguments: str
    permission: str | None
    status: CallStatus
    result_node: int | None = None
    # The runner's word for how a run call ended (``app.mcp.results.Outcome``).
    outcome: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON."""
        return {
            "reply_node": self.reply_node,
            "id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "permission": self.permission,
            "status": str(self.status),
            "result_node": self.result_node,
            **({"outcome": self.outcome} if self.outcome else {}),
        }


@dataclass
class TurnResult:
    """A turn: the replies, the calls, every node made in order, and why it
    ended. ``user_node`` is the message sent (None when the turn took up
    calls already made)."""

    user_node: int | None
    replies: list[Reply] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    nodes: list[int] = field(default_factory=list)
    ending: Ending = Ending.ANSWERED
    rounds: int = 0  # rounds of calls answered in full

    @property
    def last_reply(self) -> Reply | None:
        """The turn's last reply, if it generated one."""
        return self.replies[-1] if self.replies else None

    @property
    def pending(self) -> list[CallRecord]:
        """The calls that wait for the user's yes."""
        return [c for c in self.calls if c.status == CallStatus.NEEDS_APPROVAL]


def send(
    service: ConversationService,
    parent_id: int,
    text: str,
    params: SamplingParams,
    streams: Streams,
    runner: ToolRunner,
    choice: str = "auto",
    decide: Decide = wait_for_approval,
    step_limit: int = STEP_LIMIT,
    parallel: bool = True,
) -> TurnResult:
    """Send ``text`` under ``parent_id`` and go on while the model calls tools.

    The tools are those the conversation's start offers (see
    ``offering_start``). ``choice`` shapes the first reply: ``"auto"``,
    ``"required"`` (the grammar makes it a call), ``"none"`` (no call) or a
    tool's name; the replies after results are ``"auto"``. ``decide`` is
    asked about each call whose tool asks first; ``step_limit`` bounds the
    rounds of calls; ``streams.should_stop`` stops the turn.
    """
    tools = _offered(service, parent_id)
    _check_choice(tools, choice)
    reply = service.send(
        parent_id, text, params, streams, _shape(service, tools, choice, parallel)
    )
    turn = TurnResult(user_node=reply.user_node)
    if reply.user_node is not None:
        turn.nodes.append(reply.user_node)
    return _go_on(
        service, turn, reply, tools, params, streams, runner, decide, step_limit
    )


def answer_calls(
    service: ConversationService,
    reply_node: int,
    params: SamplingParams,
    streams: Streams,
    runner: ToolRunner,
    decide: Decide = wait_for_approval,
    step_limit: int = STEP_LIMIT,
) -> TurnResult:
    """Take the loop up at ``reply_node``, a reply whose calls are not all
    answered (one that waited for approval): the calls without a result
    are decided and run in order, and the loop goes on as in ``send``.
    The results already below it are kept."""
    path = service.path(reply_node)
    reply = path[-1]
    calls = tool_use.calls_of(reply.tool_use)
    if reply.role != Role.ASSISTANT or not calls:
        raise ServiceError(f"Node {reply_node} is not a reply that called tools.")
    tools = tool_use.tools_of(path[0].tool_use)
    node, answered = reply_node, 0
    for call in calls:
        found = _result_of(service, node, call["id"])
        if found is None:
            break
        node, answered = found, answered + 1
    if answered == len(calls):
        raise ServiceError(
            f"Every call of node {reply_node} has its result already "
            "(regenerate the reply after them for another answer)."
        )
    return _answer_and_go_on(
        service,
        TurnResult(user_node=None),
        reply_node,
        calls[answered:],
        node,
        tools,
        params,
        streams,
        runner,
        decide,
        step_limit,
    )


def go_on_from_result(
    service: ConversationService,
    result_node: int,
    params: SamplingParams,
    streams: Streams,
    runner: ToolRunner,
    decide: Decide = wait_for_approval,
    step_limit: int = STEP_LIMIT,
) -> TurnResult:
    """Take the loop up below tool result ``result_node`` (an edited result,
    say, which has nothing below it yet).

    The results on its path since the reply that called answer some of that
    reply's calls; the others are decided and run in order under
    ``result_node``, as ``answer_calls`` does them. Once every call has its
    result, the model replies after the last and the loop goes on as in
    ``send``.
    """
    path = service.path(result_node)
    if path[-1].role != Role.TOOL:
        raise ServiceError(f"Node {result_node} is not a tool result.")
    # The results of one reply's calls hang one under the other below it.
    index = len(path) - 1
    while index > 0 and path[index].role == Role.TOOL:
        index -= 1
    reply = path[index]
    calls = tool_use.calls_of(reply.tool_use)
    if reply.role != Role.ASSISTANT or not calls:
        raise ServiceError(
            f"Node {result_node} does not follow a reply that called tools."
        )
    answered = {tool_use.answered_call(n.tool_use)[0] for n in path[index + 1 :]}
    return _answer_and_go_on(
        service,
        TurnResult(user_node=None),
        reply.id,
        [call for call in calls if call["id"] not in answered],
        result_node,
        tool_use.tools_of(path[0].tool_use),
        params,
        streams,
        runner,
        decide,
        step_limit,
    )


def regenerate(
    service: ConversationService,
    reply_node: int,
    params: SamplingParams,
    streams: Streams,
    runner: ToolRunner,
    choice: str = "auto",
    decide: Decide = wait_for_approval,
    step_limit: int = STEP_LIMIT,
    parallel: bool = True,
) -> TurnResult:
    """A new reply beside ``reply_node`` (a sibling: the reply stays),
    shaped by the tools of its branch's start and ``choice`` as in ``send``,
    and the loop after it: a reply that calls again has its calls decided
    and run, and so on."""
    path = service.path(reply_node)
    reply = path[-1]
    if reply.role != Role.ASSISTANT or reply.parent_id is None:
        raise ServiceError(f"Node {reply_node} is not an assistant reply.")
    tools = tool_use.tools_of(path[0].tool_use)
    _check_choice(tools, choice)
    again = service.reply(
        reply.parent_id, params, streams, _shape(service, tools, choice, parallel)
    )
    return _go_on(
        service,
        TurnResult(user_node=None),
        again,
        tools,
        params,
        streams,
        runner,
        decide,
        step_limit,
    )


def _answer_and_go_on(
    service: ConversationService,
    turn: TurnResult,
    reply_node: int,
    calls: list[dict[str, str]],
    after: int,
    tools: list[dict[str, Any]],
    params: SamplingParams,
    streams: Streams,
    runner: ToolRunner,
    decide: Decide,
    step_limit: int,
) -> TurnResult:
    """Answer ``calls`` (those of ``reply_node`` still without a result)
    under ``after``; then, unless one waits or the turn was stopped, the
    reply after the last result and the loop from it."""
    last, ending = _run_calls(
        service, turn, reply_node, calls, after, runner, decide, streams
    )
    if ending is not None:
        turn.ending = ending
        return turn
    turn.rounds = 1
    following = service.reply(last, params, streams, _shape(service, tools, "auto"))
    return _go_on(
        service, turn, following, tools, params, streams, runner, decide, step_limit
    )


def _go_on(
    service: ConversationService,
    turn: TurnResult,
    reply: Reply,
    tools: list[dict[str, Any]],
    params: SamplingParams,
    streams: Streams,
    runner: ToolRunner,
    decide: Decide,
    step_limit: int,
) -> TurnResult:
    """From ``reply`` (just generated) on: run its calls, answer, repeat."""
    while True:
        turn.replies.append(reply)
        turn.nodes.append(reply.assistant_node)
        calls = list(reply.tool_calls)
        if _stopped(streams) or reply.stats.stop_reason == StopReason.STOPPED:
            turn.ending = Ending.STOPPED
            return turn
        if not calls:
            turn.ending = Ending.ANSWERED
            return turn
        if turn.rounds >= step_limit:
            _not_run(turn, reply.assistant_node, calls, runner)
            turn.ending = Ending.STEP_LIMIT
            return turn
        last, ending = _run_calls(
            service,
            turn,
            reply.assistant_node,
            calls,
            reply.assistant_node,
            runner,
            decide,
            streams,
        )
        if ending is not None:
            turn.ending = ending
            return turn
        turn.rounds += 1
        reply = service.reply(last, params, streams, _shape(service, tools, "auto"))


def _run_calls(
    service: ConversationService,
    turn: TurnResult,
    reply_node: int,
    calls: list[dict[str, str]],
    after: int,
    runner: ToolRunner,
    decide: Decide,
    streams: Streams,
) -> tuple[int, Ending | None]:
    """Answer ``calls`` of ``reply_node`` in order, each result under the
    one before (the first under ``after``); return the last node, and the
    ending when the turn cannot go on."""
    node = after
    for index, call in enumerate(calls):
        if _stopped(streams):
            _not_run(turn, reply_node, calls[index:], runner)
            return node, Ending.STOPPED
        permission = runner.permission(call["name"])
        answer = _answer(reply_node, call, permission, runner, decide, streams)
        if answer is None:
            waiting = _record(reply_node, call, permission, CallStatus.NEEDS_APPROVAL)
            turn.calls.append(waiting)
            _not_run(turn, reply_node, calls[index + 1 :], runner)
            return node, Ending.NEEDS_APPROVAL
        text, status, outcome = answer
        node = service.add_message(
            node, Role.TOOL, text, tool_use.answering(call["id"], call["name"])
        )
        turn.nodes.append(node)
        turn.calls.append(_record(reply_node, call, permission, status, node, outcome))
        if status == CallStatus.STOPPED:
            _not_run(turn, reply_node, calls[index + 1 :], runner)
            return node, Ending.STOPPED
    return node, Ending.STOPPED if _stopped(streams) else None


def _answer(
    reply_node: int,
    call: dict[str, str],
    permission: str | None,
    runner: ToolRunner,
    decide: Decide,
    streams: Streams,
) -> tuple[str, CallStatus, str | None] | None:
    """What the model reads for ``call``, what became of it, and the
    runner's word for how it ran; None when it waits for the user's yes."""
    name, arguments = call["name"], call["arguments"]
    if permission is None:
        return f"Error: there is no tool called {name!r}.", CallStatus.UNKNOWN, None
    if permission == "never":
        return DENIED, CallStatus.DENIED, None
    if permission != "always":
        decision = decide(PendingCall(reply_node, call["id"], name, arguments))
        if decision == Decision.WAIT:
            return None
        if decision == Decision.DENY:
            return DENIED, CallStatus.DENIED, None
    ran = runner.run(name, arguments, streams.should_stop)
    outcome = str(ran.outcome)
    if outcome == "stopped":
        status = CallStatus.STOPPED
    else:
        status = CallStatus.FAILED if ran.is_error else CallStatus.RAN
    return ran.text or NO_OUTPUT, status, outcome


def _record(
    reply_node: int,
    call: dict[str, str],
    permission: str | None,
    status: CallStatus,
    result_node: int | None = None,
    outcome: str | None = None,
) -> CallRecord:
    return CallRecord(
        reply_node,
        call["id"],
        call["name"],
        call["arguments"],
        permission,
        status,
        result_node,
        outcome,
    )


def _not_run(
    turn: TurnResult,
    reply_node: int,
    calls: list[dict[str, str]],
    runner: ToolRunner,
) -> None:
    """Record ``calls`` as not run (after one that waits, at the step
    limit, after a stop)."""
    for call in calls:
        permission = runner.permission(call["name"])
        turn.calls.append(_record(reply_node, call, permission, CallStatus.NOT_RUN))


def _stopped(streams: Streams) -> bool:
    return streams.should_stop is not None and streams.should_stop()


def _check_choice(tools: list[dict[str, Any]], choice: str) -> None:
    """Refuse a choice that needs a call where no tool is offered."""
    if choice not in ("none", "auto") and not tools:
        raise ServiceError("This conversation's start offers no tools to call.")


def _offered(service: ConversationService, node_id: int) -> list[dict[str, Any]]:
    """The tools the start of ``node_id``'s branch offers."""
    return tool_use.tools_of(service.path(node_id)[0].tool_use)


def _shape(
    service: ConversationService,
    tools: list[dict[str, Any]],
    choice: str,
    parallel: bool = True,
) -> ReplyShape:
    """A reply that may (or must) call ``tools``, in the model's syntax."""
    if not tools or choice == "none" or service.engine is None:
        return FREE
    syntax = service.engine.chat_format.tool_syntax
    return ReplyShape(syntax.constraint(tools, choice, parallel), syntax)


def _result_of(service: ConversationService, node: int, call_id: str) -> int | None:
    """The newest result of call ``call_id`` right under ``node``."""
    for child in node_rows.child_texts(service.db, node)[::-1]:
        if child.role == Role.TOOL and (
            tool_use.answered_call(child.tool_use)[0] == call_id
        ):
            return child.id
    return None


# --- the start that offers the tools ------------------------------------------


@dataclass(frozen=True)
class Offering:
    """Where to send from so that the start offers the tools.

    ``node`` is the node asked for, or its copy under ``start``; ``made``
    whether ``start`` was made now; ``copied`` the nodes added under it (the
    path's messages, copied: nothing is moved or erased).
    """

    node: int
    start: int
    made: bool = False
    copied: tuple[int, ...] = ()


def offering_start(
    service: ConversationService,
    node_id: int,
    tools: list[dict[str, Any]],
    servers: Mapping[str, str] | None = None,
) -> Offering:
    """Where to continue ``node_id``'s branch with ``tools`` offered.

    Templates render the tools with the system prompt, so the tools are
    part of a conversation's start: a branch whose start offers other tools
    goes on under a start of the same system prompt that offers these (one
    made now, as ``new_system_prompt`` makes it, if the conversation has
    none), where the branch's messages are found, or copied (with their
    calls and results), down to the copy of ``node_id``.

    ``servers`` (offered name -> MCP server name) is stored on a start made
    now, for the window to name each call's server; it is no part of the
    offer: a start that offers the same tools is used whatever it says.
    """
    path = service.path(node_id)
    root = path[0]
    if tool_use.tools_of(root.tool_use) == tools:
        return Offering(node_id, root.id)
    conversation = root.conversation_id
    start = next(
        (
            s.id
            for s in node_rows.root_texts(service.db, conversation)
            if s.text == root.text and tool_use.tools_of(s.tool_use) == tools
        ),
        None,
    )
    made = start is None
    if start is None:
        start = service.new_system_prompt(conversation, root.text, tools, servers)
    node, copied = start, []
    for message in path[1:]:
        child = next(
            (
                c.id
                for c in node_rows.child_texts(service.db, node)[::-1]
                if c.role == message.role
                and c.text == message.text
                and c.tool_use == message.tool_use
            ),
            None,
        )
        if child is None:
            child = service.add_message(
                node, message.role, message.text, message.tool_use
            )
            copied.append(child)
        node = child
    return Offering(node, start, made, tuple(copied))
