"""The tool loop through the real engine, on the tiny model with Qwen 2.5's
real chat template (it renders tools and calls in Hermes' ``<tool_call>``
syntax), against a real MCP server made with the SDK.

The random-weight model writes random text: each call here is made by the
grammar (``required`` or a tool's name), and the tool's ``city`` is an enum,
so the call is always a valid one. What is checked is the tree: the reply
that calls, its result as a tool node, the reply after it, each a node that
restores like any other.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation import tool_loop
from app.conversation.errors import ServiceError
from app.conversation.service import ConversationService
from app.conversation.streams import Streams
from app.conversation.tool_loop import CallStatus, Decision, Ending
from app.mcp import config
from app.mcp.client import McpClients
from app.mcp.config import Permission
from app.mcp.toolbox import McpToolRunner, Toolbox, build_toolbox
from storage import node_rows, tool_use
from storage.values import Role
from tests.helpers.mcp_servers import stdio_command, write_server
from tests.helpers.real_service import opened_service

SETTINGS = BackendSettings(n_ctx=4096, n_threads=2)
# Enough for a call in a byte-level vocabulary; the replies after results
# are cut short (their text is random).
CALLING = SamplingParams(max_tokens=160, seed=3, temperature=1.0)
ANSWERING = SamplingParams(max_tokens=8, seed=3, temperature=1.0)


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_server(tmp_path_factory.mktemp("mcp"))


@pytest.fixture
def service(tmp_path: Path, qwen_model: Path) -> Iterator[ConversationService]:
    with opened_service(tmp_path / "arbor.sqlite3", qwen_model, SETTINGS) as opened:
        yield opened


class Tools:
    """The test server (only ``tools``), its sessions and the runner."""

    def __init__(
        self,
        service: ConversationService,
        script: Path,
        tools: str,
        permissions: dict[str, Permission],
    ) -> None:
        server = config.ServerConfig(
            "test", tuple(stdio_command(script, tools)), permissions=permissions
        )
        self.clients = McpClients([server], 20)
        self.toolbox: Toolbox = build_toolbox([server], self.clients.list_all())
        self.runner = McpToolRunner(
            self.clients,
            self.toolbox,
            timeout_s=10,
            result_tokens=200,
            count_tokens=lambda text: len(service.count_tokens(text)),
        )

    def start(self, service: ConversationService) -> int:
        """A new conversation whose start offers the tools."""
        _conversation, root = service.new_conversation(
            None, "tools", tools=self.toolbox.openai_tools()
        )
        return root


@pytest.fixture
def make_tools(service: ConversationService, script: Path) -> Iterator:
    made: list[Tools] = []

    def make(tools: str, **permissions: Permission) -> Tools:
        made.append(Tools(service, script, tools, permissions))
        return made[-1]

    yield make
    for tools in made:
        tools.clients.close()


def _send(service, root, tools, choice="required", **options) -> tool_loop.TurnResult:
    options.setdefault("parallel", False)
    return tool_loop.send(
        service,
        root,
        "What is the weather in Paris?",
        CALLING,
        options.pop("streams", Streams()),
        tools.runner,
        choice=choice,
        **options,
    )


def _roles(service: ConversationService, nodes: list[int]) -> list[str]:
    return [str(node_rows.get_node(service.db, n).role) for n in nodes]


def test_an_approved_call_its_result_and_the_reply_after_it(
    service: ConversationService, make_tools, tmp_path: Path, qwen_model: Path
) -> None:
    tools = make_tools("weather")
    asked: list[tool_loop.PendingCall] = []

    def approve(call: tool_loop.PendingCall) -> Decision:
        asked.append(call)
        return Decision.RUN

    turn = _send(service, tools.start(service), tools, decide=approve)
    assert turn.ending == Ending.ANSWERED and turn.rounds == 1
    assert _roles(service, turn.nodes) == ["user", "assistant", "tool", "assistant"]
    user, calling, result, answer = turn.nodes
    assert turn.user_node == user
    # The call is stored with its reply, exactly as the user was asked.
    (call,) = tool_use.calls_of(node_rows.get_node(service.db, calling).tool_use)
    assert call["name"] == "weather"
    assert [(a.name, a.arguments, a.call_id) for a in asked] == [
        ("weather", call["arguments"], call["id"])
    ]
    city = "Paris" if "Paris" in call["arguments"] else "Oslo"
    stored = node_rows.get_node(service.db, result)
    assert (stored.role, stored.text, stored.parent_id) == (
        Role.TOOL,
        f"Sunny in {city}",
        calling,
    )
    assert tool_use.answered_call(stored.tool_use) == (call["id"], "weather")
    assert node_rows.get_node(service.db, answer).parent_id == result
    (record,) = turn.calls
    assert (record.status, record.result_node, record.outcome) == (
        CallStatus.RAN,
        result,
        "ok",
    )
    # The result is a node like any other: going back to it restores it,
    # here in a fresh process's worth of engine, with nothing reprocessed.
    service.flush_checkpoints()
    with opened_service(tmp_path / "arbor.sqlite3", qwen_model, SETTINGS) as cold:
        restored = cold.restore(result)
        assert restored.reprocessed_tokens == 0 and restored.restored_tokens > 0


def test_a_call_that_asks_waits_until_approved(
    service: ConversationService, make_tools
) -> None:
    tools = make_tools("weather")
    turn = _send(service, tools.start(service), tools)  # nobody approves
    assert turn.ending == Ending.NEEDS_APPROVAL
    _user, calling = turn.nodes
    (pending,) = turn.pending
    assert (pending.reply_node, pending.result_node) == (calling, None)
    assert pending.status == CallStatus.NEEDS_APPROVAL
    # Stored, not run: the call is on its reply, with nothing below it.
    assert tool_use.calls_of(node_rows.get_node(service.db, calling).tool_use)
    assert node_rows.child_texts(service.db, calling) == []

    later = tool_loop.answer_calls(
        service,
        calling,
        ANSWERING,
        Streams(),
        tools.runner,
        decide=tool_loop.approve_all,
    )
    assert later.ending == Ending.ANSWERED and later.user_node is None
    assert _roles(service, later.nodes) == ["tool", "assistant"]
    assert node_rows.get_node(service.db, later.nodes[0]).text.startswith("Sunny in")
    with pytest.raises(ServiceError, match="has its result already"):
        tool_loop.answer_calls(service, calling, ANSWERING, Streams(), tools.runner)


def test_denied_calls_are_answered_so(service: ConversationService, make_tools) -> None:
    never = make_tools("weather", weather=Permission.NEVER)
    turn = _send(service, never.start(service), never, decide=tool_loop.approve_all)
    assert turn.ending == Ending.ANSWERED
    assert _roles(service, turn.nodes) == ["user", "assistant", "tool", "assistant"]
    assert node_rows.get_node(service.db, turn.nodes[2]).text == tool_loop.DENIED
    assert turn.calls[0].status == CallStatus.DENIED
    # The user says no to a tool that asks: the same.
    asks = make_tools("weather")
    no = _send(service, asks.start(service), asks, decide=tool_loop.deny_all)
    assert [c.status for c in no.calls] == [CallStatus.DENIED]
    assert node_rows.get_node(service.db, no.nodes[2]).text == tool_loop.DENIED


def test_a_crash_and_a_megabyte_enter_the_context_as_results(
    service: ConversationService, make_tools
) -> None:
    tools = make_tools("crash,big", crash=Permission.ALWAYS, big=Permission.ALWAYS)
    root = tools.start(service)
    crashed = _send(service, root, tools, choice="crash")
    assert crashed.ending == Ending.ANSWERED
    assert crashed.calls[0].status == CallStatus.FAILED
    assert crashed.calls[0].outcome == "crashed"
    assert "went away" in node_rows.get_node(service.db, crashed.nodes[2]).text

    big = _send(service, root, tools, choice="big")
    assert big.ending == Ending.ANSWERED
    result = node_rows.get_node(service.db, big.nodes[2])
    # Capped in the model's tokens, with the cap said; then decoded.
    assert "first 200 tokens" in result.text and "1,048,576 characters" in result.text
    # The note adds its own ~110 (one a byte in this vocabulary).
    assert len(service.count_tokens(result.text)) < 200 + 130
    assert big.last_reply is not None
    assert big.last_reply.stats.context_tokens < SETTINGS.n_ctx


def test_the_step_limit_leaves_the_calls_unrun(
    service: ConversationService, make_tools
) -> None:
    tools = make_tools("weather", weather=Permission.ALWAYS)
    turn = _send(service, tools.start(service), tools, step_limit=0)
    assert turn.ending == Ending.STEP_LIMIT
    assert [c.status for c in turn.calls] == [CallStatus.NOT_RUN]
    assert _roles(service, turn.nodes) == ["user", "assistant"]


def test_stop_ends_a_running_tool_and_the_turn(
    service: ConversationService, make_tools
) -> None:
    tools = make_tools("hang", hang=Permission.ALWAYS)
    begun: list[float] = []

    class Watched:
        """The runner, noting when the call began."""

        def permission(self, name: str) -> str | None:
            return tools.runner.permission(name)

        def run(self, name, arguments, should_stop):
            begun.append(time.monotonic())
            return tools.runner.run(name, arguments, should_stop)

    def should_stop() -> bool:  # Stop, 0.3 s into the call
        return bool(begun) and time.monotonic() - begun[0] > 0.3

    turn = tool_loop.send(
        service,
        tools.start(service),
        "Wait for me.",
        CALLING,
        Streams(should_stop=should_stop),
        Watched(),
        choice="hang",
    )
    assert time.monotonic() - begun[0] < 5
    assert turn.ending == Ending.STOPPED
    assert _roles(service, turn.nodes) == ["user", "assistant", "tool"]
    assert turn.calls[0].status == CallStatus.STOPPED
    assert "stopped" in node_rows.get_node(service.db, turn.nodes[2]).text


def test_a_branch_without_the_tools_goes_on_under_a_start_with_them(
    service: ConversationService, make_tools
) -> None:
    tools = make_tools("weather", weather=Permission.ALWAYS)
    conversation, root = service.new_conversation("Be brief.", "plain")
    asked = service.send(root, "Hello", ANSWERING)
    offered = tools.toolbox.openai_tools()

    moved = tool_loop.offering_start(service, asked.assistant_node, offered)
    assert moved.made and moved.start != root
    start = node_rows.get_node(service.db, moved.start)
    assert (start.text, tool_use.tools_of(start.tool_use)) == ("Be brief.", offered)
    assert _roles(service, list(moved.copied)) == ["user", "assistant"]
    assert moved.node == moved.copied[-1]
    # The branch is found there the next time: nothing made twice.
    again = tool_loop.offering_start(service, asked.assistant_node, offered)
    assert (again.node, again.start, again.made, again.copied) == (
        moved.node,
        moved.start,
        False,
        (),
    )
    # Where the start already offers them, nothing moves.
    same = tool_loop.offering_start(service, moved.node, offered)
    assert (same.node, same.made) == (moved.node, False)
    turn = tool_loop.send(
        service,
        moved.node,
        "And the weather?",
        CALLING,
        Streams(),
        tools.runner,
        choice="required",
        parallel=False,
    )
    assert turn.ending == Ending.ANSWERED
    assert service.path(turn.nodes[-1])[0].id == moved.start
    assert conversation == service.path(turn.nodes[-1])[0].conversation_id
