"""The window's tool jobs through a real ``JobRunner``: a real SQLite file, the
real engine on the tiny model with Qwen 2.5's real template, and real MCP
servers (the SDK-made test server, and the PyPI ``mcp-server-time``), saved
with ``SaveToolServers`` first as the window saves them.

The random-weight model writes random text: the first reply of a turn is
made a call by its ``tool_choice`` (a tool's name: the grammar writes a
call of it, whose ``city`` is an enum), and the replies after results are
``auto`` (random text, no call). What is checked is what was stored, read
back from the database: the replies that call, their results, the replies
after them, and the siblings that edits and regenerations make.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app import jobs
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.tool_loop import DENIED
from app.jobs.results import (
    Created,
    Done,
    Failed,
    JobResult,
    ModelLoaded,
    Replied,
)
from app.mcp.config import Permission, ServerConfig
from app.runner.job_runner import JobRunner, Reports
from storage import node_rows, tool_use
from storage.db import Database
from storage.records import NodeRecord
from storage.values import Role
from tests.helpers.mcp_servers import TIME_SERVER, stdio_command, write_server

SETTINGS = BackendSettings(n_ctx=4096, n_threads=2)
# Enough for a call in a byte-level vocabulary; the replies after results
# are cut short (their text is random).
CALLING = SamplingParams(max_tokens=160, seed=3, temperature=1.0)
ANSWERING = SamplingParams(max_tokens=8, seed=3, temperature=1.0)


class Heard:
    """What the runner streamed, and a Stop the test may press."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        # Polled between tokens and during a call (a test replaces it).
        self.should_stop: Callable[[], bool] = lambda: False

    def reports(self) -> Reports:
        def token(piece: str) -> None:
            self.tokens.append(piece)

        return Reports(
            on_token=token,
            on_thinking=lambda _piece: None,
            on_alternative=lambda _index, _piece: None,
            on_progress=lambda _done, _total: None,
            should_stop=lambda: self.should_stop(),
        )


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test server's script, written once for the module."""
    return write_server(tmp_path_factory.mktemp("mcp"))


@pytest.fixture
def heard() -> Heard:
    """What the test's runner streams, and its Stop."""
    return Heard()


@pytest.fixture
def runner(db: Database, qwen_model: Path, heard: Heard) -> Iterator[JobRunner]:
    """A runner over the test's database file with the tiny Qwen model
    loaded; ended for good afterwards (its servers stop)."""
    made = JobRunner(db, heard.reports())
    try:
        assert isinstance(made.run(jobs.LoadModel(qwen_model, SETTINGS)), ModelLoaded)
        yield made
    finally:
        made.shutdown()


def _server(script: Path, tools: str, **permissions: Permission) -> ServerConfig:
    return ServerConfig(
        "test", tuple(stdio_command(script, tools)), permissions=permissions
    )


def _save(runner: JobRunner, *servers: ServerConfig) -> None:
    assert isinstance(runner.run(jobs.SaveToolServers(servers)), Done)


def _start(runner: JobRunner) -> int:
    """A new conversation, its start offering no tools (as the window makes
    one): the first tool turn goes on under a start that offers them."""
    made = runner.run(jobs.NewConversation(None, "tools"))
    assert isinstance(made, Created) and made.node_id is not None
    return made.node_id


def _replied(result: JobResult) -> Replied:
    assert isinstance(result, Replied), result
    return result


def _send(runner: JobRunner, parent: int, choice: str = "weather") -> Replied:
    return _replied(
        runner.run(
            jobs.SendWithTools(
                parent, "What is the weather?", CALLING, tool_choice=choice
            )
        )
    )


def _node(runner: JobRunner, node_id: int) -> NodeRecord:
    return node_rows.get_node(runner.service.db, node_id)


def _roles(runner: JobRunner, nodes: tuple[int, ...]) -> list[str]:
    return [str(_node(runner, n).role) for n in nodes]


def _children(runner: JobRunner, node_id: int) -> list[int]:
    return [c.id for c in node_rows.child_texts(runner.service.db, node_id)]


def _calls(runner: JobRunner, reply: int) -> list[dict[str, str]]:
    return tool_use.calls_of(_node(runner, reply).tool_use)


def _city(arguments: str) -> str:
    city = json.loads(arguments)["city"]
    assert city in ("Paris", "Oslo")
    return str(city)


def _waiting_reply(runner: JobRunner, sent: Replied) -> int:
    """The reply of a turn that waits for approval: its calls stored, the
    first waiting, the others not run yet, nothing below it."""
    assert sent.ending == "needs_approval"
    reply = sent.node_id
    assert sent.shown_node == reply == sent.nodes[-1] == sent.reply.assistant_node
    assert _node(runner, reply).role == Role.ASSISTANT
    calls = _calls(runner, reply)
    assert calls and [c["id"] for c in sent.calls] == [c["id"] for c in calls]
    assert [c["status"] for c in sent.calls] == ["needs_approval"] + ["not_run"] * (
        len(calls) - 1
    )
    assert {c["server"] for c in sent.calls} == {"test"}
    assert _children(runner, reply) == []
    return reply


def test_a_call_that_asks_waits_then_runs_and_the_model_answers(
    runner: JobRunner, script: Path
) -> None:
    _save(runner, _server(script, "weather"), ServerConfig("time", TIME_SERVER))
    root = _start(runner)
    sent = _send(runner, root)
    assert sent.unavailable == ()
    # The branch went on under a start made for the tools, which says each
    # tool's server; the message and its reply are below it.
    start, user, reply = sent.nodes
    assert _roles(runner, sent.nodes) == ["root", "user", "assistant"]
    offered = tool_use.tools_of(_node(runner, start).tool_use)
    names = {tool["function"]["name"] for tool in offered}
    assert {"weather", "get_current_time"} <= names
    servers = tool_use.servers_of(_node(runner, start).tool_use)
    assert servers["weather"] == "test" and servers["get_current_time"] == "time"
    assert _node(runner, user).parent_id == start
    calls = _calls(runner, _waiting_reply(runner, sent))

    ran = _replied(
        runner.run(
            jobs.AnswerCalls(reply, tuple((c["id"], "run") for c in calls), ANSWERING)
        )
    )
    assert ran.ending == "answered"
    assert _roles(runner, ran.nodes) == ["tool"] * len(calls) + ["assistant"]
    for call, result in zip(calls, ran.nodes, strict=False):
        stored = _node(runner, result)
        assert stored.text == f"Sunny in {_city(call['arguments'])}"
        assert tool_use.answered_call(stored.tool_use) == (call["id"], "weather")
    # One under the other, the reply after the last; it is shown.
    assert _node(runner, ran.nodes[0]).parent_id == reply
    assert _node(runner, ran.nodes[-1]).parent_id == ran.nodes[-2]
    assert ran.node_id == ran.nodes[-1] == ran.reply.assistant_node
    assert [c["status"] for c in ran.calls] == ["ran"] * len(calls)
    assert ran.tree is not None and ran.nodes[-1] in ran.tree.nodes


def test_a_denied_call_is_answered_so(runner: JobRunner, script: Path) -> None:
    _save(runner, _server(script, "weather"))
    sent = _send(runner, _start(runner))
    reply = _waiting_reply(runner, sent)
    calls = _calls(runner, reply)
    denied = _replied(
        runner.run(
            jobs.AnswerCalls(reply, tuple((c["id"], "deny") for c in calls), ANSWERING)
        )
    )
    assert denied.ending == "answered"
    results = denied.nodes[:-1]
    assert [_node(runner, n).text for n in results] == [DENIED] * len(calls)
    assert [c["status"] for c in denied.calls] == ["denied"] * len(calls)


def test_decisions_name_some_calls_and_the_others_wait(
    runner: JobRunner, script: Path
) -> None:
    _save(runner, _server(script, "weather"))
    reply = _waiting_reply(runner, _send(runner, _start(runner)))
    # Nothing decided: the first call waits again, and nothing is stored.
    again = _replied(runner.run(jobs.AnswerCalls(reply, (), ANSWERING)))
    assert (again.ending, again.nodes, again.replies) == ("needs_approval", (), ())
    assert again.node_id == reply and again.conversation_id > 0
    assert _children(runner, reply) == []
    unknown = runner.run(jobs.AnswerCalls(reply, (("nope", "run"),), ANSWERING))
    assert isinstance(unknown, Failed) and "no call 'nope'" in unknown.error


def test_a_tool_that_is_always_allowed_runs_without_asking(
    runner: JobRunner, script: Path
) -> None:
    # A server that cannot start offers nothing; the turn goes on.
    broken = ServerConfig("broken", (str(script.parent / "no-such-program"),))
    _save(runner, broken, _server(script, "weather", weather=Permission.ALWAYS))
    sent = _send(runner, _start(runner))
    assert [name for name, _why in sent.unavailable] == ["broken"]
    assert sent.ending == "answered"
    roles = _roles(runner, sent.nodes)
    assert roles[:3] == ["root", "user", "assistant"] and roles[-1] == "assistant"
    calls = _calls(runner, sent.nodes[2])
    assert roles[3:-1] == ["tool"] * len(calls)
    assert [c["status"] for c in sent.calls] == ["ran"] * len(calls)
    assert [c["permission"] for c in sent.calls] == ["always"] * len(calls)
    assert _node(runner, sent.nodes[3]).text.startswith("Sunny in ")


def test_edited_arguments_make_a_sibling_whose_call_runs_with_them(
    runner: JobRunner, script: Path
) -> None:
    _save(runner, _server(script, "weather"))
    reply = _waiting_reply(runner, _send(runner, _start(runner)))
    calls = _calls(runner, reply)
    first = calls[0]
    other = "Oslo" if _city(first["arguments"]) == "Paris" else "Paris"
    bad = runner.run(jobs.EditCallArguments(reply, first["id"], '["Oslo"]', ANSWERING))
    assert isinstance(bad, Failed) and "JSON object" in bad.error

    edited = _replied(
        runner.run(
            jobs.EditCallArguments(
                reply, first["id"], json.dumps({"city": other}), ANSWERING
            )
        )
    )
    sibling = edited.nodes[0]
    assert _node(runner, sibling).parent_id == _node(runner, reply).parent_id
    assert _node(runner, sibling).text == _node(runner, reply).text
    assert _calls(runner, sibling) == [
        {**first, "arguments": json.dumps({"city": other})},
        *calls[1:],
    ]
    result = _node(runner, edited.nodes[1])
    assert (result.parent_id, result.text) == (sibling, f"Sunny in {other}")
    if len(calls) == 1:  # the loop went on: the model answered
        assert edited.ending == "answered"
        assert _roles(runner, edited.nodes) == ["assistant", "tool", "assistant"]
    else:  # the next call asks: it waits
        assert edited.ending == "needs_approval"
        assert edited.node_id == result.id
    # Nothing erased: the reply keeps its calls, still unanswered.
    assert _calls(runner, reply) == calls and _children(runner, reply) == []


def test_an_edited_result_is_a_sibling_the_model_answers(
    runner: JobRunner, script: Path
) -> None:
    _save(runner, _server(script, "weather", weather=Permission.ALWAYS))
    sent = _send(runner, _start(runner))
    assert sent.ending == "answered"
    last_result, answer = sent.nodes[-2:]
    old = _node(runner, last_result)
    assert old.role == Role.TOOL

    edited = _replied(
        runner.run(jobs.EditToolResult(last_result, "Snow in Oslo", ANSWERING))
    )
    assert edited.ending == "answered"
    sibling, reply = edited.nodes
    stored = _node(runner, sibling)
    assert (stored.parent_id, stored.role, stored.text, stored.tool_use) == (
        old.parent_id,
        Role.TOOL,
        "Snow in Oslo",
        old.tool_use,
    )
    assert _node(runner, reply).parent_id == sibling
    assert edited.node_id == reply
    # The old branch is intact.
    assert _node(runner, last_result).text == old.text
    assert _children(runner, last_result) == [answer]


def test_regenerating_a_calling_reply_samples_another_call(
    runner: JobRunner, script: Path
) -> None:
    _save(runner, _server(script, "weather"))
    reply = _waiting_reply(runner, _send(runner, _start(runner)))
    again = _replied(
        runner.run(
            jobs.Regenerate(
                reply,
                SamplingParams(max_tokens=160, seed=5, temperature=1.0),
                tool_choice="weather",
            )
        )
    )
    sibling = _waiting_reply(runner, again)
    assert sibling != reply
    assert _node(runner, sibling).parent_id == _node(runner, reply).parent_id
    assert _roles(runner, again.nodes) == ["assistant"]


def test_stop_during_a_hanging_tool_keeps_the_call(
    runner: JobRunner, heard: Heard, script: Path
) -> None:
    _save(runner, _server(script, "hang", hang=Permission.ALWAYS))
    root = _start(runner)
    # Stop once the call has run a while: half a second after its reply
    # (with the call) is stored. A calling reply streams no text to watch.
    conversation = _node(runner, root).conversation_id
    seen: list[float] = []

    def stop() -> bool:
        if not seen and _stored_call(runner.service.db, conversation):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] > 0.5

    heard.should_stop = stop
    begun = time.monotonic()
    stopped = runner.run(jobs.SendWithTools(root, "Wait.", CALLING, tool_choice="hang"))
    assert isinstance(stopped, Failed) and stopped.stopped, stopped
    # Stopped, not timed out (a call may take a minute).
    assert time.monotonic() - begun < 30
    # What was stored stays: the message, the call, its stopped result.
    starts = node_rows.root_texts(runner.service.db, conversation)
    (start,) = [s.id for s in starts if s.id != root]
    (user,) = _children(runner, start)
    (reply,) = _children(runner, user)
    assert _calls(runner, reply)[0]["name"] == "hang"
    (result,) = _children(runner, reply)
    assert _node(runner, result).role == Role.TOOL
    assert "stopped" in _node(runner, result).text


def _stored_call(db: Database, conversation: int) -> bool:
    """Whether a reply with calls is stored in ``conversation`` (below a
    start, a message: where a first turn puts it)."""
    return any(
        tool_use.calls_of(reply.tool_use)
        for start in node_rows.root_texts(db, conversation)
        for user in node_rows.child_texts(db, start.id)
        for reply in node_rows.child_texts(db, user.id)
    )


def _pid(runner: JobRunner, parent: int) -> tuple[int, str]:
    """Ask the server its process id: the reply's node, and the answer."""
    sent = _send(runner, parent, choice="pid")
    results = [n for n in sent.nodes if _node(runner, n).role == Role.TOOL]
    assert results and sent.ending == "answered"
    return sent.nodes[-1], _node(runner, results[0]).text


def test_a_model_load_keeps_the_servers_and_saving_restarts_them(
    runner: JobRunner, script: Path, qwen_model: Path
) -> None:
    server = _server(script, "pid", pid=Permission.ALWAYS)
    _save(runner, server)
    reply, before = _pid(runner, _start(runner))
    assert before.isdigit()
    assert isinstance(runner.run(jobs.LoadModel(qwen_model, SETTINGS)), ModelLoaded)
    reply, after_load = _pid(runner, reply)
    assert after_load == before
    _save(runner, server)  # saved again: the server starts anew
    _reply, after_save = _pid(runner, reply)
    assert after_save.isdigit() and after_save != before


def test_a_plain_branch_regenerates_as_before(runner: JobRunner) -> None:
    root = _start(runner)
    first = _replied(runner.run(jobs.Send(root, "Hello", ANSWERING)))
    again = _replied(runner.run(jobs.Regenerate(first.node_id, ANSWERING)))
    assert again.ending is None and again.nodes == () and again.calls == ()
    assert _node(runner, again.node_id).parent_id == first.reply.user_node
    assert not runner.tools.started  # no tool use: no server started
