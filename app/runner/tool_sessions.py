"""The runner's MCP servers, and the window's tool jobs run on them.

``ToolSessions`` owns the sessions with the enabled servers
(``app.mcp.client.McpClients``) and what they offer (a ``Toolbox``). They
start at the first tool use, not before: a window that never uses tools
starts no server. They are kept across model loads, because the servers
are the user's, not the model's, and one may hold state (a browser, a
login) that a restart would lose. They stop when the user saves servers
(``SaveToolServers``), when a tool use finds the stored servers changed
(saved by another process: the runner in a child process, the CLI), and
when the runner ends for good (``JobRunner.shutdown``).

``run_tool_job`` runs one tool job through ``app.conversation.tool_loop``
on the loaded model: what it made and why it ended, which the runner turns
into a ``Replied``. A server that cannot be listed offers no tools, and the
turn goes on without them (``ToolTurn.unavailable`` says why).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from app import jobs
from app.conversation import tool_loop
from app.conversation.errors import ServiceError
from app.conversation.service import ConversationService
from app.conversation.streams import Streams
from app.conversation.tool_loop import Decide, Decision, PendingCall, TurnResult
from app.mcp import config
from app.mcp.client import McpClients
from app.mcp.config import ServerConfig
from app.mcp.toolbox import McpToolRunner, Toolbox, build_toolbox
from storage import node_rows, tool_use
from storage.db import Database
from storage.values import Role

ToolJob = (
    jobs.SendWithTools
    | jobs.AnswerCalls
    | jobs.EditCallArguments
    | jobs.EditToolResult
    | jobs.Regenerate
)


class ToolSessions:
    """The sessions with the enabled MCP servers of ``db``, started lazily.

    Parameters
    ----------
    db
        Where the user's servers are stored (``app.mcp.config``).
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        # The enabled servers the sessions were started for (None: none yet).
        self._servers: list[ServerConfig] | None = None
        self._clients: McpClients | None = None
        self._toolbox = Toolbox()

    @property
    def started(self) -> bool:
        """Whether sessions were made (servers may be running)."""
        return self._clients is not None

    def toolbox(self) -> Toolbox:
        """What the enabled servers offer, listed at their first use (each
        server started then), or again once the stored servers changed."""
        servers = [s for s in config.load_servers(self._db) if s.enabled]
        if self._clients is None or servers != self._servers:
            self.close()
            clients = McpClients(servers)
            self._clients, self._servers = clients, servers
            self._toolbox = build_toolbox(
                servers, clients.list_all() if servers else {}
            )
        return self._toolbox

    def runner(self, service: ConversationService) -> McpToolRunner:
        """What runs the calls of a turn on ``service``: results capped in
        its model's tokens, as the CLI caps them."""
        toolbox = self.toolbox()
        assert self._clients is not None  # made by toolbox()
        return McpToolRunner(
            self._clients,
            toolbox,
            config.CALL_TIMEOUT_S,
            config.RESULT_TOKENS,
            lambda text: len(service.count_tokens(text)),
        )

    def save(self, servers: Iterable[ServerConfig]) -> None:
        """Store ``servers`` as the user's and stop the running ones: the
        next tool use starts the servers as configured now."""
        config.save_servers(self._db, servers)
        self.close()

    def close(self) -> None:
        """Stop the servers (within ``McpClients.close``'s bound)."""
        clients, self._clients, self._servers = self._clients, None, None
        self._toolbox = Toolbox()
        if clients is not None:
            clients.close()


@dataclass(frozen=True)
class ToolTurn:
    """A tool job's turn and what the runner reports of it.

    ``made`` are the nodes the job added before the loop began (a start
    made for the tools and the branch copied under it, an edited sibling);
    ``at`` is where the turn began (shown if it made no node at all);
    ``calls`` each call as ``CallRecord.as_dict()`` with its "server".
    """

    turn: TurnResult
    made: tuple[int, ...]
    at: int
    conversation_id: int
    calls: tuple[dict[str, Any], ...]
    unavailable: tuple[tuple[str, str], ...]

    @property
    def nodes(self) -> tuple[int, ...]:
        """Every node the job made, in order."""
        return (*self.made, *self.turn.nodes)

    @property
    def last_node(self) -> int:
        """The node the turn ended on."""
        return self.nodes[-1] if self.nodes else self.at


def offers_tools(service: ConversationService, node_id: int) -> bool:
    """Whether the start of ``node_id``'s branch offers tools."""
    return bool(tool_use.tools_of(service.path(node_id)[0].tool_use))


def run_tool_job(
    service: ConversationService,
    sessions: ToolSessions,
    job: ToolJob,
    streams: Streams,
) -> ToolTurn:
    """Run ``job``'s turn: its first step, then the loop with the enabled
    servers' tools; calls whose tool asks wait unless the job decided them."""
    runner = sessions.runner(service)
    step_limit = config.STEP_LIMIT
    made: tuple[int, ...] = ()
    match job:
        case jobs.SendWithTools():
            at = job.parent_id
            if service.path(at)[-1].role == Role.USER:
                # Checked before a start with the tools is made for it.
                raise ServiceError(
                    f"Node {at} is a user message; a message is sent after "
                    "a reply or the conversation's start."
                )
            offered = runner.toolbox.openai_tools()
            if job.tool_choice not in ("auto", "none") and not offered:
                raise ServiceError(
                    "No enabled MCP server offers a tool to call (see the "
                    "tool servers' settings)."
                )
            offering = tool_loop.offering_start(
                service,
                at,
                offered,
                {tool.name: tool.server for tool in runner.toolbox.tools},
            )
            made = (*((offering.start,) if offering.made else ()), *offering.copied)
            turn = tool_loop.send(
                service,
                offering.node,
                job.text,
                job.params,
                streams,
                runner,
                choice=job.tool_choice,
                step_limit=step_limit,
            )
        case jobs.AnswerCalls():
            at = job.node_id
            turn = tool_loop.answer_calls(
                service,
                at,
                job.params,
                streams,
                runner,
                decide=_decided(service, at, job.decisions),
                step_limit=step_limit,
            )
        case jobs.EditCallArguments():
            at = _edited_calls(service, job)
            made = (at,)
            turn = tool_loop.answer_calls(
                service,
                at,
                job.params,
                streams,
                runner,
                decide=_only(at, {job.call_id: Decision.RUN}),
                step_limit=step_limit,
            )
        case jobs.EditToolResult():
            at = _edited_result(service, job)
            made = (at,)
            turn = tool_loop.go_on_from_result(
                service, at, job.params, streams, runner, step_limit=step_limit
            )
        case jobs.Regenerate():
            at = job.node_id
            turn = tool_loop.regenerate(
                service,
                at,
                job.params,
                streams,
                runner,
                choice=job.tool_choice,
                step_limit=step_limit,
            )
        case _:
            assert_never(job)
    calls = tuple(
        {**call.as_dict(), "server": runner.server_of(call.name)} for call in turn.calls
    )
    unavailable = tuple(sorted((runner.toolbox.unavailable or {}).items()))
    ended = turn.nodes[-1] if turn.nodes else (made[-1] if made else at)
    conversation = service.path(ended)[0].conversation_id
    return ToolTurn(turn, made, at, conversation, calls, unavailable)


def _decided(
    service: ConversationService, reply_node: int, decisions: Iterable[tuple[str, str]]
) -> Decide:
    """The user's decisions on reply ``reply_node``'s calls, checked."""
    reply = node_rows.get_node(service.db, reply_node)
    made = {call["id"] for call in tool_use.calls_of(reply.tool_use)}
    decided: dict[str, Decision] = {}
    for call_id, word in decisions:
        if call_id not in made:
            raise ServiceError(f"Reply {reply_node} made no call {call_id!r}.")
        try:
            decided[call_id] = Decision(word)
        except ValueError:
            raise ServiceError(
                f"{word!r} is no decision on a call (run, deny or wait)."
            ) from None
    return _only(reply_node, decided)


def _only(reply_node: int, decided: Mapping[str, Decision]) -> Decide:
    """Decide the calls of ``reply_node`` as ``decided`` says; every other
    call waits, those of the replies the loop makes later too (their ids
    may repeat those of ``reply_node``'s calls)."""

    def decide(call: PendingCall) -> Decision:
        if call.reply_node != reply_node:
            return Decision.WAIT
        return decided.get(call.call_id, Decision.WAIT)

    return decide


def _edited_calls(service: ConversationService, job: jobs.EditCallArguments) -> int:
    """Store the sibling of ``job``'s reply with the call's new arguments;
    return its id."""
    reply = node_rows.get_node(service.db, job.node_id)
    calls = tool_use.calls_of(reply.tool_use)
    if reply.role != Role.ASSISTANT or reply.parent_id is None or not calls:
        raise ServiceError(f"Node {job.node_id} is not a reply that called tools.")
    if job.call_id not in {call["id"] for call in calls}:
        raise ServiceError(f"Reply {job.node_id} made no call {job.call_id!r}.")
    arguments = job.arguments.strip()
    try:
        parsed = json.loads(arguments)
    except ValueError as exc:
        raise ServiceError(f"The arguments are not valid JSON: {exc}.") from None
    if not isinstance(parsed, dict):
        raise ServiceError('The arguments must be a JSON object: {"name": value, …}.')
    edited = [
        {**call, "arguments": arguments} if call["id"] == job.call_id else call
        for call in calls
    ]
    return service.add_message(
        reply.parent_id, Role.ASSISTANT, reply.text, tool_use.calling(edited)
    )


def _edited_result(service: ConversationService, job: jobs.EditToolResult) -> int:
    """Store the sibling of ``job``'s tool result with its text; return its
    id."""
    result = node_rows.get_node(service.db, job.node_id)
    if result.role != Role.TOOL or result.parent_id is None:
        raise ServiceError(f"Node {job.node_id} is not a tool result.")
    call_id, name = tool_use.answered_call(result.tool_use)
    return service.add_message(
        result.parent_id, Role.TOOL, job.text, tool_use.answering(call_id, name)
    )
