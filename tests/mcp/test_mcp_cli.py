"""``arbor tools`` and ``arbor send --tools``: the CLI contract, as a user
runs it (a new ``python -m app`` per command), against real MCP servers:
``mcp-server-time`` over stdio, and servers made with the SDK at test time
over stdio and Streamable HTTP.

The model is the tiny one with Qwen 2.5's real chat template; each call it
makes is shaped by the grammar (``--tools required`` or a tool's name), and
the test server's one tool takes an enum, so the call is a valid one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.conversation.tool_loop import DENIED
from tests.conftest import run_cli
from tests.helpers.mcp_servers import (
    TIME_SERVER,
    http_server,
    stdio_command,
    write_server,
)

CALLING = ("--max-tokens", "160", "--seed", "3", "--temperature", "1")


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_server(tmp_path_factory.mktemp("mcp"))


@pytest.fixture
def arbor(data_dir: Path, qwen_model: Path):
    """Run the CLI on the test's data folder and the Qwen-templated tiny
    model; return the finished process."""

    def run(*args: Any) -> Any:
        return run_cli("--data-dir", data_dir, "--model", qwen_model, *args)

    return run


def test_servers_are_added_listed_allowed_and_removed(arbor, script: Path) -> None:
    added = arbor("tools", "add", "time", "--", *TIME_SERVER).json["added"]
    assert added == {
        "name": "time",
        "transport": "stdio",
        "command": list(TIME_SERVER),
        "env": [],
        "enabled": True,
        "permissions": {},
    }
    with http_server(script) as url:
        web = arbor(
            "tools", "add", "web", "--url", url, "--header", "X-Arbor-Test: secret"
        ).json["added"]
        # A header's value may be a key: never printed.
        assert (web["transport"], web["url"], web["headers"]) == (
            "http",
            url,
            ["X-Arbor-Test"],
        )
        listed = {s["name"]: s for s in arbor("tools", "list").json["servers"]}
    assert listed["time"]["status"] == listed["web"]["status"] == "ok"
    time_tools = {t["name"]: t for t in listed["time"]["tools"]}
    assert set(time_tools) == {"get_current_time", "convert_time"}
    clock = time_tools["get_current_time"]
    assert clock["description"] and clock["input_schema"]["type"] == "object"
    assert (clock["permission"], clock["offered_as"]) == ("ask", "get_current_time")
    assert {"weather", "secret"} <= {t["name"] for t in listed["web"]["tools"]}

    allowed = arbor("tools", "allow", "time.get_current_time", "always").json
    assert allowed == {
        "server": "time",
        "tool": "get_current_time",
        "permission": "always",
    }
    arbor("tools", "allow", "web.crash", "never")
    assert arbor("tools", "disable", "web").json == {"server": "web", "enabled": False}
    stored = {
        s["name"]: s for s in arbor("tools", "list", "--no-start").json["servers"]
    }
    assert stored["time"]["permissions"] == {"get_current_time": "always"}
    assert stored["web"]["permissions"] == {"crash": "never"}
    assert stored["web"]["enabled"] is False and "tools" not in stored["web"]

    assert arbor("tools", "rm", "web").json == {"removed": "web"}
    assert [s["name"] for s in arbor("tools", "list").json["servers"]] == ["time"]


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("tools", "add", "bad name", "--", "x"), 2, "server's name"),
        (("tools", "add", "x"), 2, "command after --"),
        (("tools", "add", "x", "--url", "http://h", "--", "y"), 2, "not both"),
        (("tools", "add", "x", "--header", "A:b", "--", "y"), 2, "--url"),
        (("tools", "add", "x", "--env", "A=b", "y"), 2, "goes after --"),
        (("tools", "add", "x", "--env", "A", "--", "y"), 2, "NAME=VALUE"),
        (("tools", "add", "x", "--url", "ftp://h"), 1, "URL"),
        (("tools", "rm", "nothing"), 1, "no MCP server called"),
        (("tools", "allow", "no-dot", "always"), 2, "SERVER.TOOL"),
        (("tools", "allow", "a.b", "sometimes"), 2, "invalid choice"),
        (("tools",), 2, "name a tools command"),
        (("send", "1", "hi", "--tools", "bad name"), 2, "--tools"),
    ],
)
def test_mistakes_are_one_line(arbor, args, status, message) -> None:
    done = arbor(*args)
    assert done.returncode == status, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_command_is_stored_word_for_word(arbor) -> None:
    added = arbor(
        "tools", "add", "npm", "--env", "KEY=a=b", "--", "npx", "-y", "--", "pkg"
    ).json["added"]
    assert added["command"] == ["npx", "-y", "--", "pkg"]
    assert added["env"] == ["KEY"]
    stored = arbor("tools", "list", "--no-start").json["servers"]
    assert [s["command"] for s in stored] == [["npx", "-y", "--", "pkg"]]


def test_send_waits_for_approval_then_tools_run_runs_the_call(
    arbor, script: Path
) -> None:
    arbor("tools", "add", "test", "--", *stdio_command(script, "weather"))
    root = arbor("new").json["node"]
    sent = arbor("send", root, "Weather in Paris?", "--tools", "required", *CALLING)
    turn = sent.json
    assert turn["ended"] == "needs_approval"
    assert [n["role"] for n in turn["nodes"]] == ["user", "assistant"]
    user, reply = (n["id"] for n in turn["nodes"])
    # One call or several (the random model may go on to another): the
    # first waits for the user, the ones after it are not run yet.
    calls = turn["calls"]
    first, *rest = calls
    assert turn["needs_approval"] == [first["id"]]
    assert (first["status"], first["result_node"], first["permission"]) == (
        "needs_approval",
        None,
        "ask",
    )
    assert all(c["status"] == "not_run" for c in rest)
    for call in calls:
        assert call["name"] == call["tool"] == "weather" and call["server"] == "test"
        assert json.loads(call["arguments"])["city"] in ("Paris", "Oslo")
    assert turn["tool_calls"] == [
        {k: c[k] for k in ("id", "name", "arguments")} for c in calls
    ]
    assert f"arbor tools run {reply} --approve-tools" in turn["note"]
    # The conversation had no tools: they came with a new start.
    assert turn["new_start"] is True and turn["start"] != root
    assert (turn["user_node"], turn["tools"]) == (user, ["weather"])

    ran = arbor("tools", "run", reply, "--approve-tools", "--max-tokens", "8").json
    assert ran["ended"] == "answered" and ran["user_node"] is None
    results = ["tool"] * len(calls)
    assert [n["role"] for n in ran["nodes"]] == [*results, "assistant"]
    result, answer = ran["nodes"][0], ran["nodes"][-1]
    assert result["text"].startswith("Sunny in ")
    assert result["tool_use"] == {"call_id": calls[0]["id"], "name": "weather"}
    assert {c["status"] for c in ran["calls"]} == {"ran"}
    assert ran["assistant_node"] == answer["id"]

    conversation = arbor("show", answer["id"]).json
    assert [m["role"] for m in conversation["messages"]] == [
        "system",
        "user",
        "assistant",
        *results,
        "assistant",
    ]


def test_approved_and_denied_calls_through_the_cli(arbor, script: Path) -> None:
    arbor("tools", "add", "test", "--", *stdio_command(script, "weather"))
    root = arbor("new").json["node"]
    turn = arbor(
        "send",
        root,
        "Weather in Paris?",
        "--tools",
        "required",
        "--approve-tools",
        *CALLING,
    ).json
    assert turn["ended"] == "answered" and turn["needs_approval"] == []
    results = ["tool"] * len(turn["calls"])  # one call or several, each run
    assert [n["role"] for n in turn["nodes"]] == [
        "user",
        "assistant",
        *results,
        "assistant",
    ]
    assert turn["nodes"][2]["text"].startswith("Sunny in ")
    assert {(c["status"], c["outcome"]) for c in turn["calls"]} == {("ran", "ok")}
    assert turn["rounds"] == 1 and turn["assistant_node"] == turn["nodes"][-1]["id"]

    # Never allowed: the model reads that it was denied, and answers.
    arbor("tools", "allow", "test.weather", "never")
    again = arbor(
        "send",
        turn["assistant_node"],
        "And in Oslo?",
        "--tools",
        "weather",
        "--approve-tools",
        *CALLING,
    ).json
    assert again["new_start"] is False and again["copied_nodes"] == []
    assert again["calls"] and {c["status"] for c in again["calls"]} == {"denied"}
    assert again["nodes"][2]["text"] == DENIED
    assert [n["role"] for n in again["nodes"]][-1] == "assistant"


def test_the_time_server_answers_a_call_made_through_the_engine(arbor) -> None:
    arbor("tools", "add", "time", "--", *TIME_SERVER)
    arbor("tools", "allow", "time.get_current_time", "always")
    made = arbor("new", "--system", "You tell the time.").json
    root = made["node"]
    # Seeded: what follows depends on this reply's text.
    first = arbor("send", root, "Hello", "--max-tokens", "4", "--seed", "1").json
    # A branch begun without tools goes on under a start that offers them,
    # its messages copied there. The random model names a random zone in
    # a free string (the server's schema bounds it not), which ends where it
    # samples a quote: a few seeds are tried, with room for a long one.
    turns = []
    for seed in ("7", "5", "11", "13", "17"):
        turns.append(
            arbor(
                "send",
                first["assistant_node"],
                "What time is it in Paris?",
                "--tools",
                "get_current_time",
                "--max-tokens",
                "1000",
                "--seed",
                seed,
            ).json
        )
        if turns[-1]["calls"]:
            break
    assert turns[0]["new_start"] is True and len(turns[0]["copied_nodes"]) == 2
    assert all(t["start"] == turns[0]["start"] for t in turns)
    turn = turns[-1]
    assert turn["tools"] == ["get_current_time", "convert_time"]
    call = turn["calls"][0]  # the first, of one or several
    assert call["server"] == "time" and call["permission"] == "always"
    # The server's answer, or its error about the zone: either way the
    # tool's own words, and a reply after them.
    result = turn["nodes"][2]
    assert result["role"] == "tool" and result["text"]
    if call["status"] == "ran":
        assert json.loads(result["text"])["timezone"]
    else:
        assert call["status"] == "failed" and result["text"].startswith("Error:")
    assert turn["nodes"][-1]["role"] == "assistant"
    tree = arbor("tree", made["conversation"]).json["nodes"]
    starts = [n for n in tree if n["parent"] is None]
    assert len(starts) == 2 and "tool_use" in starts[1]


def test_required_tools_need_a_server(arbor) -> None:
    root = arbor("new").json["node"]
    done = arbor("send", root, "hi", "--tools", "required")
    assert done.returncode == 2 and "no enabled MCP server" in done.stderr
    # auto without servers is a plain reply.
    plain = arbor("send", root, "hi", "--tools", "auto", "--max-tokens", "4").json
    assert plain["ended"] == "answered" and plain["tools"] == []
