"""``arbor serve`` through the official ``openai`` client, on 127.0.0.1.

A real server process on the tiny model and a real SQLite file: the tree is
the cache (cached tokens, branches, a restart), streaming, and every refusal
with its status and OpenAI-style body.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import ROOT, run_cli

SYSTEM = "You are a terse assistant."


class Server:
    """A running ``arbor serve`` process."""

    def __init__(self, process: subprocess.Popen[str], port: int) -> None:
        self.process = process
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.clients: list[openai.OpenAI] = []

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        """An openai client that reports refusals instead of retrying them
        (closed with the server: its kept connection is a socket that
        would otherwise be left to the garbage collector, whose warning
        then fails whichever test it lands in)."""
        client = openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0)
        self.clients.append(client)
        return client

    def stop(self) -> str:
        """SIGINT, as Ctrl+C; returns what it wrote to stderr (the request log)."""
        self.process.send_signal(signal.SIGINT)
        _out, err = self.process.communicate(timeout=60)
        assert self.process.returncode == 0, err
        return err


@contextmanager
def serving(
    data_dir: Path, model: Path, *extra: str, n_ctx: int = 1024
) -> Iterator[Server]:
    """Start ``arbor serve`` on a free port; stop it afterwards."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            "--data-dir",
            str(data_dir),
            "--model",
            str(model),
            "--n-ctx",
            str(n_ctx),
            "serve",
            "--port",
            "0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    try:
        listening = process.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/v1", listening)
        assert found, listening + process.stderr.read()  # type: ignore[union-attr]
        assert process.stdout.readline().startswith("Ready:")
        server = Server(process, int(found.group(1)))
        try:
            yield server
        finally:
            for client in server.clients:
                client.close()
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=60)


def _ask(client: openai.OpenAI, messages: list[dict[str, str]], **options: Any) -> Any:
    options.setdefault("max_tokens", 12)
    options.setdefault("temperature", 0)
    return client.chat.completions.create(model="tiny", messages=messages, **options)


def _arbor(response: Any) -> dict[str, Any]:
    return response.model_extra["arbor"]


def _cached(response: Any) -> int:
    return response.usage.prompt_tokens_details.cached_tokens


def _post(
    server: Server, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], Any]:
    """POST raw bytes to chat completions: (status, headers, decoded body)."""
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), json.load(exc)


def _conversation(
    messages: list[dict[str, str]], response: Any, next_text: str
) -> list[dict[str, str]]:
    return [
        *messages,
        {"role": "assistant", "content": response.choices[0].message.content},
        {"role": "user", "content": next_text},
    ]


def test_each_turn_restores_the_last_and_a_restart_reprocesses_nothing(
    data_dir: Path, tiny_model: Path
) -> None:
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Name three rivers."},
    ]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        first = _ask(client, messages)
        assert _cached(first) == 0  # a new conversation: nothing to restore
        previous = first
        for text in ("And three lakes?", "And three seas?"):
            messages = _conversation(messages, previous, text)
            response = _ask(client, messages)
            stats = _arbor(response)["stats"]
            # The whole context of the last reply is reused, nothing of it
            # decoded again: only the new user turn and the reply's opening.
            assert _cached(response) == _arbor(previous)["stats"]["context_tokens"]
            assert stats["reprocessed_tokens"] == 0
            assert (
                response.usage.prompt_tokens
                == _cached(response) + stats["prompt_tokens"]
            )
            assert _arbor(response)["conversation"] == _arbor(first)["conversation"]
            previous = response
        log = server.stop()
    assert log.count("POST /v1/chat/completions 200") == 3

    # A new process: the context comes back from the checkpoints on disk.
    with serving(data_dir, tiny_model) as server:
        messages = _conversation(messages, previous, "And three mountains?")
        response = _ask(server.client(), messages)
        stats = _arbor(response)["stats"]
        assert stats["reprocessed_tokens"] == 0
        assert stats["restored_tokens"] == _arbor(previous)["stats"]["context_tokens"]
        assert _cached(response) == stats["restored_tokens"]
        assert _arbor(response)["conversation"] == _arbor(first)["conversation"]

    listed = run_cli("--data-dir", data_dir, "list").json
    assert [c["title"] for c in listed["conversations"]] == ["Name three rivers."]


def test_a_branch_restores_the_shared_prefix_and_keeps_both(
    data_dir: Path, tiny_model: Path
) -> None:
    opening = [{"role": "user", "content": "Tell me about owls."}]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        first = _ask(client, opening)
        one = _ask(client, _conversation(opening, first, "Where do they live?"))
        other = _ask(client, _conversation(opening, first, "What do they eat?"))
        # The second branch starts where the first reply ended: restored
        # from its checkpoint (the context had moved on to the first branch).
        assert _cached(other) == _arbor(first)["stats"]["context_tokens"]
        assert _arbor(other)["stats"]["reprocessed_tokens"] == 0
        conversation = _arbor(first)["conversation"]
    tree = run_cli("--data-dir", data_dir, "tree", conversation).json["nodes"]
    parents = {n["id"]: n["parent"] for n in tree}
    assert parents[_arbor(one)["user_node"]] == _arbor(first)["assistant_node"]
    assert parents[_arbor(other)["user_node"]] == _arbor(first)["assistant_node"]
    assert _arbor(one)["user_node"] != _arbor(other)["user_node"]


def test_a_history_written_elsewhere_is_stored_then_matched(
    data_dir: Path, tiny_model: Path
) -> None:
    # Few-shot turns the model never wrote: stored as nodes and decoded once;
    # the same request again finds every turn in the tree.
    messages = [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "3+3?"},
    ]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        first = _ask(client, messages)
        assert _arbor(first)["matched_turns"] == 0
        again = _ask(client, messages)
        assert _arbor(again)["matched_turns"] == 3
        assert _arbor(again)["user_node"] == _arbor(first)["user_node"]
        assert _arbor(again)["assistant_node"] != _arbor(first)["assistant_node"]
        assert _arbor(again)["stats"]["reprocessed_tokens"] == 0


def test_streaming_sends_the_stored_reply_and_its_usage(
    data_dir: Path, tiny_model: Path
) -> None:
    messages = [{"role": "user", "content": "Count to five."}]
    with serving(data_dir, tiny_model) as server:
        chunks = list(
            _ask(
                server.client(),
                messages,
                stream=True,
                stream_options={"include_usage": True},
                max_tokens=20,
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[0].choices[0].delta.role == "assistant"
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finished) == 1
    assert finished[0].choices[0].finish_reason in ("stop", "length")
    usage = chunks[-1].usage
    assert usage is not None and not chunks[-1].choices
    assert (
        usage.completion_tokens
        == finished[0].model_extra["arbor"]["stats"]["generated_tokens"]
    )
    node = finished[0].model_extra["arbor"]["assistant_node"]
    shown = run_cli("--data-dir", data_dir, "show", node).json["messages"][-1]
    assert shown["text"] == text and text


def test_refusals_have_their_status_and_body(data_dir: Path, tiny_model: Path) -> None:
    with serving(data_dir, tiny_model, n_ctx=256) as server:
        client = server.client()
        status, _h, body = _post(server, b"{not json")
        assert status == 400 and "not valid JSON" in body["error"]["message"]
        # Nested deeper than the parser recurses: the client's error too.
        status, _h, body = _post(server, b"[" * 100_000 + b"]" * 100_000)
        assert status == 400 and "nested too deeply" in body["error"]["message"]

        status, _h, body = _post(
            server, json.dumps({"model": "tiny", "messages": []}).encode()
        )
        assert status == 400 and body["error"]["param"] == "messages"

        with pytest.raises(openai.BadRequestError) as overflow:
            _ask(client, [{"role": "user", "content": "word " * 400}])
        assert overflow.value.body["code"] == "context_length_exceeded"
        assert "256" in overflow.value.body["message"]

        huge = json.dumps(
            {
                "model": "tiny",
                "messages": [{"role": "user", "content": "x" * 9_000_000}],
            }
        ).encode()
        status, _h, body = _post(server, huge)
        assert status == 413 and body["error"]["code"] == "request_too_large"

        status, _h, body = _post(
            server,
            json.dumps(
                {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
            ).encode(),
            {"X-Arbor-Conversation": "999"},
        )
        assert status == 404 and body["error"]["param"] == "X-Arbor-Conversation"

        with pytest.raises(openai.BadRequestError) as many:
            _ask(client, [{"role": "user", "content": "hi"}], n=9)  # over 8
        assert many.value.body["param"] == "n"

        with pytest.raises(openai.BadRequestError) as unknown:
            _ask(
                client,
                [{"role": "user", "content": "hi"}],
                tools=[{"type": "function", "function": {"name": "f"}}],
                tool_choice={"type": "function", "function": {"name": "g"}},
            )
        assert unknown.value.body["param"] == "tool_choice"

        # After all that the server still answers.
        assert (
            _ask(client, [{"role": "user", "content": "hi"}]).choices[0].message.content
            is not None
        )
        log = server.stop()
    assert "Traceback" not in log


def test_a_request_while_another_runs_is_told_to_retry(
    data_dir: Path, tiny_model: Path
) -> None:
    with serving(data_dir, tiny_model, "--queue", "0", n_ctx=2048) as server:
        client = server.client()
        stream = _ask(
            client,
            [{"role": "user", "content": "Write a long story."}],
            stream=True,
            max_tokens=1900,
            temperature=1.0,
        )
        next(iter(stream))  # the first reply holds the engine now
        with pytest.raises(openai.RateLimitError) as busy:
            _ask(client, [{"role": "user", "content": "Me too."}])
        assert busy.value.response.headers["Retry-After"].isdigit()
        assert busy.value.body["code"] == "busy"
        stream.close()  # the client goes away: its reply ends early
        # The engine is free again soon after.
        deadline = time.monotonic() + 60
        while True:
            try:
                assert _ask(client, [{"role": "user", "content": "Now?"}]).choices
                break
            except openai.RateLimitError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        log = server.stop()
    # Told apart from a failure: no error logged, the partial reply kept.
    assert "the client went away" in log
    assert " 500 " not in log


def test_off_loopback_needs_a_key(data_dir: Path, tiny_model: Path) -> None:
    refused = run_cli(
        "--data-dir",
        data_dir,
        "--model",
        tiny_model,
        "serve",
        "--host",
        "0.0.0.0",
        "--port",
        "0",
    )
    assert refused.returncode == 1
    assert "API key" in refused.stderr and "Traceback" not in refused.stderr

    with serving(data_dir, tiny_model, "--api-key", "s3cret") as server:
        with pytest.raises(openai.AuthenticationError):
            _ask(server.client("wrong"), [{"role": "user", "content": "hi"}])
        assert _ask(
            server.client("s3cret"), [{"role": "user", "content": "hi"}]
        ).choices


def test_a_conversation_made_elsewhere_continues_through_the_api(
    data_dir: Path, tiny_model: Path, arbor: Any
) -> None:
    made = arbor("new", "--system", SYSTEM)
    sent = arbor(
        "send",
        made["node"],
        "Hello from the CLI",
        "--max-tokens",
        "8",
        "--temperature",
        "0",
    )
    shown = arbor("show", sent["assistant_node"])["messages"]
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hello from the CLI"},
        {"role": "assistant", "content": shown[-1]["text"]},
        {"role": "user", "content": "And from the API."},
    ]
    with serving(data_dir, tiny_model) as server:
        response = (
            server.client()
            .with_options(
                default_headers={"X-Arbor-Conversation": str(made["conversation"])}
            )
            .chat.completions.create(model="tiny", messages=messages, max_tokens=8)
        )
    assert _arbor(response)["conversation"] == made["conversation"]
    assert _arbor(response)["matched_turns"] == 2
    assert _arbor(response)["stats"]["reprocessed_tokens"] == 0
    assert _cached(response) == sent["stats"]["context_tokens"]


def test_what_the_api_makes_is_marked_and_what_it_continues_is_not(
    data_dir: Path, tiny_model: Path, arbor: Any
) -> None:
    made = arbor("new", "--system", SYSTEM)
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        fresh = _ask(client, [{"role": "user", "content": "Hi from a script."}])
        named = client.with_options(
            default_headers={"X-Arbor-Conversation": str(made["conversation"])}
        )
        continued = _ask(
            named,
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": "Hi from the same script."},
            ],
        )
    assert _arbor(continued)["conversation"] == made["conversation"]
    listed = run_cli("--data-dir", data_dir, "list").json["conversations"]
    assert {c["id"]: c["origin"] for c in listed} == {
        _arbor(fresh)["conversation"]: "local server",
        # The CLI's conversation stays the CLI's, though a client went on in it.
        made["conversation"]: None,
    }


def test_while_loading_the_server_answers_503(tiny_model: Path) -> None:
    """A ``LocalServer`` (the window's kind) before its model is there: 503
    with Retry-After, an empty model list; a window with no model at all says
    so (another code, no Retry-After); then the model is, and it answers
    through the engine thread it was lent."""
    from concurrent.futures import ThreadPoolExecutor

    from app.server.http_api import NotServed, ServedModel
    from app.server.serve import Listen, LocalServer

    served: list[ServedModel | NotServed] = [NotServed.NO_MODEL]
    lent = ThreadPoolExecutor(1)
    ran: list[str] = []

    def submit(job: Any) -> Any:
        def run() -> Any:
            ran.append(threading.current_thread().name)
            raise RuntimeError("no service in this test")

        return lent.submit(run)

    lines: list[str] = []
    server = LocalServer(submit, lambda: served[-1], lines.append)
    url = server.start(Listen(port=0))
    try:
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        assert client.models.list().data == []
        with pytest.raises(openai.InternalServerError) as none:
            _ask(client, [{"role": "user", "content": "hi"}])
        assert none.value.status_code == 503
        assert "Retry-After" not in none.value.response.headers
        assert none.value.body["code"] == "model_not_loaded"
        assert "No model is loaded" in none.value.body["message"]

        served.append(NotServed.LOADING)
        with pytest.raises(openai.InternalServerError) as refused:
            _ask(client, [{"role": "user", "content": "hi"}])
        assert refused.value.status_code == 503
        assert refused.value.response.headers["Retry-After"].isdigit()
        assert refused.value.body["code"] == "model_loading"

        served.append(ServedModel.of_file(tiny_model))
        assert [m.id for m in client.models.list().data] == ["tiny"]
        with pytest.raises(openai.InternalServerError) as failed:
            _ask(client, [{"role": "user", "content": "hi"}])
        # The job ran on the lent thread; its failure is a 500 without a
        # traceback in the body.
        assert failed.value.status_code == 500
        assert "Traceback" not in json.dumps(failed.value.body)
        assert ran and ran[0].startswith("ThreadPoolExecutor")
    finally:
        client.close()
        server.stop()
        lent.shutdown()
    assert any(" 503 " in line for line in lines)


def test_a_site_that_fails_to_start_is_an_error_not_a_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Said by ``start`` (the window shows it), with the port freed and the
    server startable again once the cause is gone."""
    import app.server.serve as serve_module
    from app.server.serve import Listen, LocalServer, ServeError

    real_start = serve_module._start_site

    async def failing(*_args: Any) -> Any:
        raise OSError("no more file handles")

    monkeypatch.setattr(serve_module, "_start_site", failing)
    server = LocalServer(lambda job: None, lambda: None, lambda line: None)
    with pytest.raises(ServeError, match="did not start: no more file handles"):
        server.start(Listen(port=0))
    assert server.url is None
    monkeypatch.setattr(serve_module, "_start_site", real_start)
    url = server.start(Listen(port=0))
    try:
        with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
            assert client.models.list().data == []
    finally:
        server.stop()


def test_a_stop_string_ends_the_reply_there(data_dir: Path, tiny_model: Path) -> None:
    messages = [{"role": "user", "content": "Say something."}]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        whole = _ask(client, messages, max_tokens=24).choices[0].message.content
        # Greedy on the same context: the same reply, now cut at a stop string.
        at = next(i for i, ch in enumerate(whole) if i > 2 and ch.isalnum())
        stop = whole[at]
        chunks = list(_ask(client, messages, max_tokens=24, stop=[stop], stream=True))
        plain = _ask(client, messages, max_tokens=24, stop=stop)
        # The reply was stored cut, its context too: the client's copy of it
        # is found in the tree, and nothing is decoded again.
        then = _ask(client, _conversation(messages, plain, "And then?"), max_tokens=4)
        tree = run_cli(
            "--data-dir", data_dir, "tree", str(_arbor(plain)["conversation"])
        )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole[: whole.index(stop)]
    assert plain.choices[0].message.content == streamed
    assert plain.choices[0].finish_reason == "stop"
    assert _arbor(plain)["stats"]["stop_reason"] == "stop_string"
    assert _arbor(then)["matched_turns"] == 2
    assert _arbor(then)["stats"]["reprocessed_tokens"] == 0
    assert _cached(then) == _arbor(plain)["stats"]["context_tokens"]
    assert tree.returncode == 0 and "stopped" not in tree.stdout


def test_a_broken_model_file_is_a_message_not_a_traceback(
    data_dir: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x00" * 64)
    result = run_cli(
        "--data-dir", data_dir, "--model", broken, "serve", "--port", "0", timeout=120
    )
    assert result.returncode == 1
    assert result.stderr.startswith("arbor: error:")
    assert "Traceback" not in result.stderr


def test_a_request_too_large_for_the_context_is_refused_before_it_is_stored(
    data_dir: Path, tiny_model: Path
) -> None:
    # 50,001 alternating messages (2 MB): refused at once, with the numbers,
    # nothing stored; the server answers the next request as usual.
    turns = [
        {"role": "user" if k % 2 == 0 else "assistant", "content": f"m{k}"}
        for k in range(50_001)
    ]
    few_long = [{"role": "user", "content": "word " * 3000}]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        with pytest.raises(openai.BadRequestError) as many:
            _ask(client, turns)
        with pytest.raises(openai.BadRequestError) as long:
            _ask(client, few_long)
        assert _ask(client, [{"role": "user", "content": "hi"}]).choices
    assert many.value.body["code"] == "context_length_exceeded"
    assert "50,001 messages" in many.value.body["message"]
    assert long.value.body["code"] == "context_length_exceeded"
    # Refused before anything was stored (it once stored every turn first,
    # for minutes): the one conversation is the last request's.
    listed = run_cli("--data-dir", data_dir, "list").json["conversations"]
    assert [c["nodes"] for c in listed] == [3]  # the last request's alone
