"""Tools in the window, without a window: the presenter on a real database,
the real engine worker (run on the test's thread) with the tiny model on
Qwen 2.5's real template, and a real MCP server over stdio.

The path a user takes: servers saved from Settings → Tools, the Tools
switch on, a message whose reply calls a tool that asks first, the call
waiting in its card, Run (or Deny, or edited arguments), the result and the
reply after it; an edited result, continued from; and after a restart the
branch is where it was, its calls no longer waiting.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from app import jobs
from app.jobs.results import Replied
from app.mcp.config import Permission, ServerConfig
from app.window.presenter import GENERIC_TOOLS_NOTE
from app.window.tool_turns import offers_tools, waiting_calls
from storage import node_rows, tool_use
from storage.values import Role
from tests.helpers.mcp_servers import stdio_command, write_server


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_server(tmp_path_factory.mktemp("mcp"))


def _ready(open_session, qwen_model: Path, script: Path, **permissions: Permission):
    """A session with the model loaded, the weather server saved, Tools on,
    and replies that must call a tool (the random model would not by itself)."""
    s = open_session()
    p = s.presenter
    # Room for a whole call in the tiny model's small tokens (the session's
    # default cuts replies at 12).
    p.prefs = replace(p.prefs, sampling=replace(p.prefs.sampling, max_tokens=160))
    p.start(qwen_model)
    s.engine.run_jobs()
    server = ServerConfig(
        "test", tuple(stdio_command(script, "weather")), permissions=permissions
    )
    p.save_tool_servers([server])
    s.engine.run_jobs()
    p.set_tools("required")
    return s


def _last_replied(s) -> Replied:
    replied = [r for r in s.engine.results if isinstance(r, Replied)]
    assert replied, s.engine.results
    return replied[-1]


def _waiting(p) -> dict[int, list[str]]:
    return waiting_calls(p.snapshot, p.active_id)


def test_a_call_waits_in_its_card_and_runs_when_the_user_says_yes(
    open_session, qwen_model, script
):
    s = _ready(open_session, qwen_model, script)
    p = s.presenter
    assert p.tools_available and p.tool_choice != "off"

    assert p.send("What is the weather in Paris?", None)
    s.engine.run_jobs()
    turn = _last_replied(s)
    assert isinstance(turn.job, jobs.SendWithTools)
    assert turn.ending == "needs_approval"
    # The window stands at the reply that calls, its call waiting.
    reply = p.active_id
    assert reply is not None and p.snapshot.nodes[reply].role == Role.ASSISTANT
    waiting = _waiting(p)
    call = tool_use.calls_of(p.snapshot.nodes[reply].tool_use)[0]
    assert waiting == {reply: [call["id"]]}
    assert any(
        "Run, Edit arguments or Deny" in said[0] for said in s.view.said("show_message")
    )
    assert offers_tools(p.snapshot, reply)

    p.run_call(reply, call["id"])
    s.engine.run_jobs()
    after = _last_replied(s)
    assert isinstance(after.job, jobs.AnswerCalls)
    result = p.snapshot.nodes[
        p.snapshot.path(p.active_id)[p.snapshot.path(p.active_id).index(reply) + 1]
    ]
    assert result.role == Role.TOOL
    city = json.loads(call["arguments"])["city"]
    assert result.text == f"Sunny in {city}"
    assert _waiting(p) == {} or after.ending == "needs_approval"


def test_a_denied_call_is_answered_so_and_the_model_goes_on(
    open_session, qwen_model, script
):
    s = _ready(open_session, qwen_model, script)
    p = s.presenter
    p.send("What is the weather in Oslo?", None)
    s.engine.run_jobs()
    reply = p.active_id
    call_id = _waiting(p)[reply][0]

    p.deny_call(reply, call_id)
    s.engine.run_jobs()
    path = p.snapshot.path(p.active_id)
    result = p.snapshot.nodes[path[path.index(reply) + 1]]
    assert result.role == Role.TOOL and "did not allow" in result.text
    assert p.snapshot.nodes[path[path.index(reply) + 2]].role == Role.ASSISTANT


def test_edited_arguments_and_an_edited_result_are_siblings(
    open_session, qwen_model, script
):
    s = _ready(open_session, qwen_model, script)
    p = s.presenter
    p.send("What is the weather?", None)
    s.engine.run_jobs()
    reply = p.active_id
    call = tool_use.calls_of(p.snapshot.nodes[reply].tool_use)[0]
    other = "Oslo" if json.loads(call["arguments"])["city"] == "Paris" else "Paris"

    p.run_edited_call(reply, call["id"], json.dumps({"city": other}))
    s.engine.run_jobs()
    edited_reply = next(
        n
        for n in p.snapshot.path(p.active_id)
        if p.snapshot.nodes[n].parent_id == p.snapshot.nodes[reply].parent_id
    )
    assert edited_reply != reply  # a sibling: the model's own call stays
    assert reply in p.snapshot.nodes
    path = p.snapshot.path(p.active_id)
    result = path[path.index(edited_reply) + 1]
    assert p.snapshot.nodes[result].text == f"Sunny in {other}"

    # Edit the result (as the composer sends an edit of a tool node).
    assert p.send("Snowing, -12 °C", result)
    s.engine.run_jobs()
    path = p.snapshot.path(p.active_id)
    new_result = path[path.index(edited_reply) + 1]
    assert new_result != result
    assert p.snapshot.nodes[new_result].text == "Snowing, -12 °C"
    assert p.snapshot.nodes[path[-1]].role == Role.ASSISTANT
    assert node_rows.get_node(s.db, result).text == f"Sunny in {other}"

    # After a restart the branch opens where it was, nothing waiting.
    active = p.active_id
    again = open_session()
    again.presenter.start(qwen_model)
    again.engine.run_jobs()
    assert again.presenter.active_id == active
    assert waiting_calls(again.presenter.snapshot, active) == {}
    # The branch's start offers the tools.
    assert again.presenter.tools_available and again.presenter.tool_choice != "off"


def test_tools_on_a_model_without_tool_support_say_so(open_session, tiny_model, script):
    """The tiny model's ChatML template renders no calls: the generic format."""
    s = open_session()
    p = s.presenter
    p.start(tiny_model)
    s.engine.run_jobs()
    assert p.model_info is not None and p.model_info.tool_format == "generic"
    p.save_tool_servers([ServerConfig("test", tuple(stdio_command(script)))])
    s.engine.run_jobs()
    p.set_tools("auto")
    assert (GENERIC_TOOLS_NOTE,) in s.view.said("show_message")
