"""Background tasks out of the way (``app/server/tasks.py`` and the order of
``app/server/engine_owner.py``).

Open WebUI's task requests (titles, tags, follow-ups: ``tests/data/
open_webui_tasks.json`` says where each prompt comes from) are replayed
through a real ``arbor serve`` on 127.0.0.1 with Open WebUI's headers: every
one is answered, each chat is its own conversation, and the tasks leave
nothing in a tree, a list or the checkpoint budget. The order of the engine's
jobs is asserted as an order (which job ran when, how many steps a task took
after a request came), never as a wall time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from app.platform import paths
from app.server import engine_owner, tasks
from app.server.engine_owner import Background, EngineOwner
from app.server.requests import parse_chat_request
from storage import conversation_listing
from tests.server.test_server import Server, serving

RECORDED = json.loads(
    (Path(__file__).parents[1] / "data" / "open_webui_tasks.json").read_text("utf-8")
)
TASKS = {task["kind"]: task for task in RECORDED["tasks"]}


def _render(prompt: str, chat: list[dict[str, str]]) -> str:
    """A recorded prompt with its chat history filled in as Open WebUI does
    (``{{MESSAGES:END:n}}``: one "ROLE: text" line per message of the last n)."""
    for n in (2, 6):
        lines = "\n".join(f"{m['role'].upper()}: {m['content']}" for m in chat[-n:])
        prompt = prompt.replace(f"{{{{MESSAGES:END:{n}}}}}", lines)
    return prompt


def _task_body(kind: str, chat: list[dict[str, str]]) -> dict[str, Any]:
    task = TASKS[kind]
    messages = [{"role": "user", "content": _render(task["user"], chat)}]
    if "system" in task:
        messages.insert(0, {"role": "system", "content": task["system"]})
    return {"model": "tiny", "messages": messages, "temperature": 0, **task["body"]}


# --- recognising them ------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(TASKS))
def test_each_recorded_open_webui_prompt_is_a_task(kind: str) -> None:
    chat = [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh scattering."},
    ]
    request = parse_chat_request(_task_body(kind, chat))
    assert tasks.kind_of(request) == kind


@pytest.mark.parametrize(
    "text",
    [
        "Why is the sky blue?",
        "### Tasks for today\n- water the plants",
        "My task is to write a title. Can you help?",
        "Generate a concise, 3-5 word title for my essay.",
    ],
)
def test_a_person_s_message_is_not_a_task(text: str) -> None:
    request = parse_chat_request(
        {"model": "tiny", "messages": [{"role": "user", "content": text}]}
    )
    assert tasks.kind_of(request) is None


def test_a_task_without_a_limit_gets_a_small_one() -> None:
    chat = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi"}]
    tags = tasks.bounded(parse_chat_request(_task_body("tags", chat)))
    title = tasks.bounded(parse_chat_request(_task_body("title", chat)))
    assert tags.sampling.max_tokens == tasks.TASK_MAX_TOKENS
    assert title.sampling.max_tokens == 1000  # what Open WebUI asks


# --- the order on the engine's thread ----------------------------------------------


class _Stop(threading.Event):
    """A stop event that remembers the step its job was at when it was set."""

    def __init__(self, job: _Steps) -> None:
        super().__init__()
        self.job = job
        self.set_at: list[int] = []

    def set(self) -> None:
        """Set it, noting the job's step."""
        self.set_at.append(self.job.step)
        super().set()


class _Steps:
    """A background job of many short steps that checks its stop event
    between them, as a reply checks it between tokens."""

    def __init__(self, log: list[str], steps: int = 400) -> None:
        self.log = log
        self.steps = steps
        self.step = 0  # the step it is at (read from the loop's thread)
        self.stop = _Stop(self)
        self.started = threading.Semaphore(0)  # released at each attempt's start
        self.attempts = 0

    def __call__(self, _service: object) -> str:
        self.attempts += 1
        self.log.append(f"task start {self.attempts}")
        self.started.release()
        for step in range(self.steps):
            self.step = step
            if self.stop.is_set():
                self.log.append(f"task stopped at {step}")
                return "partial"
            time.sleep(0.001)
        self.log.append("task done")
        return "whole"


def _request(log: list[str], name: str) -> Any:
    def job(_service: object) -> str:
        log.append(name)
        return name

    return job


def _owner_scenario(scenario: Any) -> None:
    engine_thread = ThreadPoolExecutor(1)

    def submit(job: Any) -> Any:
        return engine_thread.submit(job, None)

    try:
        asyncio.run(scenario(EngineOwner(submit, queue_limit=8)))
    finally:
        engine_thread.shutdown()


def test_a_request_stops_a_running_task_which_runs_again_after_it() -> None:
    log: list[str] = []
    task = _Steps(log)

    async def scenario(owner: EngineOwner) -> None:
        answered = asyncio.ensure_future(
            owner.run(Background(task, task.stop, again=True))
        )
        await asyncio.to_thread(task.started.acquire)
        await asyncio.sleep(0.02)  # some steps in
        assert await owner.run(_request(log, "request")) == "request"
        assert await answered == "whole"  # answered from the rerun

    _owner_scenario(scenario)
    assert log == [
        "task start 1",
        log[1],
        "request",
        "task start 2",
        "task done",
    ]
    assert log[1].startswith("task stopped at ")
    # Asked to stop as the request came, the task ended at its next step
    # (a reply: at its next token); the request waited for no more.
    (set_at,) = task.stop.set_at
    assert int(log[1].rsplit(" ", 1)[1]) - set_at <= 1
    assert set_at > 0  # it was running, not about to start


def test_requests_go_before_queued_tasks() -> None:
    log: list[str] = []
    gate = threading.Event()

    def first(_service: object) -> str:
        gate.wait(10)
        log.append("first request")
        return "first"

    async def scenario(owner: EngineOwner) -> None:
        running = asyncio.ensure_future(owner.run(first))
        await asyncio.sleep(0.01)
        queued = [
            asyncio.ensure_future(
                owner.run(Background(_request(log, name), threading.Event(), True))
            )
            for name in ("title", "tags")
        ]
        await asyncio.sleep(0.01)
        later = asyncio.ensure_future(owner.run(_request(log, "second request")))
        await asyncio.sleep(0.01)
        gate.set()
        await asyncio.gather(running, later, *queued)

    _owner_scenario(scenario)
    assert log == ["first request", "second request", "title", "tags"]


def test_a_task_gives_way_a_few_times_then_runs_to_its_end() -> None:
    log: list[str] = []
    task = _Steps(log, steps=100)

    async def scenario(owner: EngineOwner) -> None:
        answered = asyncio.ensure_future(
            owner.run(Background(task, task.stop, again=True))
        )
        for n in range(engine_owner.MAX_YIELDS + 1):
            await asyncio.to_thread(task.started.acquire)
            await asyncio.sleep(0.01)
            await owner.run(_request(log, f"request {n}"))
        assert await answered == "whole"

    _owner_scenario(scenario)
    last = f"request {engine_owner.MAX_YIELDS}"
    assert log.index("task done") < log.index(last)
    assert task.attempts == engine_owner.MAX_YIELDS + 1
    assert sum(line.startswith("task stopped") for line in log) == (
        engine_owner.MAX_YIELDS
    )


def test_a_streamed_task_that_is_stopped_ends_with_what_it_had() -> None:
    log: list[str] = []
    task = _Steps(log)

    async def scenario(owner: EngineOwner) -> None:
        answered = asyncio.ensure_future(
            owner.run(Background(task, task.stop, again=False))
        )
        await asyncio.to_thread(task.started.acquire)
        await owner.run(_request(log, "request"))
        assert await answered == "partial"

    _owner_scenario(scenario)
    assert task.attempts == 1 and log[-1] == "request"


# --- Open WebUI's sequence, through the server -------------------------------------


async def _sse(response: aiohttp.ClientResponse) -> list[dict[str, Any]]:
    """The events of a streamed answer, in order."""
    events = []
    async for line in response.content:
        text = line.decode().strip()
        if text.startswith("data: ") and text != "data: [DONE]":
            events.append(json.loads(text[len("data: ") :]))
    return events


def _streamed_text(events: list[dict[str, Any]]) -> str:
    return "".join(
        e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]
    )


def _arbor_of(events: list[dict[str, Any]]) -> dict[str, Any]:
    arbor: dict[str, Any] = next(e["arbor"] for e in events if "arbor" in e)
    return arbor


def test_open_webui_s_requests_keep_each_chat_apart_and_tasks_out(
    data_dir: Path, tiny_model: Path
) -> None:
    answers: list[tuple[str, dict[str, Any]]] = []  # (kind, body) of each task

    async def replay(server: Server) -> dict[str, list[dict[str, Any]]]:
        url = f"{server.base_url}/chat/completions"
        chats: dict[str, list[dict[str, Any]]] = {}
        for chat_id, first in (("chat-a", "Why is the sky blue?"), ("chat-b", "Hi")):
            headers = {**RECORDED["headers"], "X-OpenWebUI-Chat-Id": chat_id}
            history: list[dict[str, str]] = []
            for text in (first, "Tell me more.") if chat_id == "chat-a" else (first,):
                history.append({"role": "user", "content": text})
                body = {
                    "model": "tiny",
                    "messages": [{"role": "system", "content": "Be brief."}, *history],
                    "stream": True,
                    "max_tokens": 12,
                    "temperature": 0,
                    # Its built-in tools, on by default, with every message.
                    "tools": RECORDED["builtin_tools"],
                }
                async with aiohttp.ClientSession(headers=headers) as session:
                    async with session.post(url, json=body) as response:
                        assert response.status == 200, await response.text()
                        events = await _sse(response)
                    chats.setdefault(chat_id, []).append(_arbor_of(events))
                    history.append(
                        {"role": "assistant", "content": _streamed_text(events)}
                    )
                    for kind in RECORDED["after_each_reply"]:
                        if kind == "title" and len(history) > 2:
                            continue  # asked for a new chat
                        async with session.post(
                            url, json=_task_body(kind, history)
                        ) as response:
                            assert response.status == 200, await response.text()
                            answers.append((kind, await response.json()))
        return chats

    # The tools' description takes ~1,400 of the tiny model's byte tokens.
    with serving(data_dir, tiny_model, n_ctx=4096) as server:
        chats = asyncio.run(replay(server))

    a, b = chats["chat-a"], chats["chat-b"]
    # Each chat its own conversation; the second message found the first.
    assert a[0]["conversation"] == a[1]["conversation"] != b[0]["conversation"]
    assert a[1]["matched_turns"] == 2
    assert a[1]["stats"]["reprocessed_tokens"] == 0
    # Every task answered, none in a chat's conversation.
    assert [kind for kind, _ in answers] == [
        "follow-ups", "title", "tags", "follow-ups", "tags",
        "follow-ups", "title", "tags",
    ]  # fmt: skip
    owned = {a[0]["conversation"], b[0]["conversation"]}
    for kind, answer in answers:
        assert answer["choices"][0]["message"]["content"] is not None
        assert answer["arbor"]["conversation"] not in owned
        limit = 1000 if kind == "title" else tasks.TASK_MAX_TOKENS
        assert answer["usage"]["completion_tokens"] <= limit
        assert answer["arbor"]["stats"]["checkpoint_bytes_written"] == 0
    # Not in the list, not in the file: no scratch left, no task text in a
    # tree, every checkpoint byte a chat's.
    records = conversation_listing.read_listing(paths.database_path(data_dir))
    assert records is not None
    assert {r.id for r in records} == owned
    assert {r.client for r in records} == {"Open WebUI"}
    assert {r.title for r in records} == {"Why is the sky blue?", "Hi"}
    with contextlib.closing(sqlite3.connect(paths.database_path(data_dir))) as db:
        origins = db.execute("SELECT DISTINCT origin FROM conversation").fetchall()
        assert origins == [("local server",)]
        assert not db.execute(
            "SELECT 1 FROM node WHERE text LIKE '### Task:%'"
        ).fetchall()
        elsewhere = db.execute(
            "SELECT COUNT(*) FROM checkpoint JOIN node ON node.id = checkpoint.node_id"
            " WHERE node.conversation_id NOT IN (?, ?)",
            tuple(owned),
        ).fetchone()[0]
        assert elsewhere == 0


def test_a_person_s_reply_goes_before_tasks(data_dir: Path, tiny_model: Path) -> None:
    """A streamed task runs; a task that is not streamed waits; then a person
    writes. The running task stops at its next token (a streamed one ends
    with what it had), the person's reply comes before the waiting task's,
    and that task is still answered whole."""
    marks: list[str] = []  # what arrived, in order
    chat = [
        {"role": "user", "content": "Why is the sky blue?"},
        {"role": "assistant", "content": "Rayleigh scattering."},
    ]

    async def scenario(server: Server) -> dict[str, Any]:
        url = f"{server.base_url}/chat/completions"
        headers = {**RECORDED["headers"], "X-OpenWebUI-Chat-Id": "chat-a"}
        found: dict[str, Any] = {}
        async with aiohttp.ClientSession(headers=headers) as session:
            long_task = {**_task_body("follow-ups", chat), "stream": True}
            long_task["max_tokens"] = 1500
            running = await session.post(url, json=long_task)
            await running.content.readline()  # its first event: it runs
            marks.append("task 1 runs")

            async def waiting_task() -> None:
                body = {**_task_body("title", chat), "max_completion_tokens": 64}
                async with session.post(url, json=body) as response:
                    found["title"] = await response.json()
                marks.append("task 2 answered")

            async def person() -> None:
                body = {
                    "model": "tiny",
                    "messages": [{"role": "user", "content": "Hello there"}],
                    "stream": True,
                    "max_tokens": 8,
                    "temperature": 0,
                }
                async with session.post(url, json=body) as response:
                    async for line in response.content:
                        if line.startswith(b"data: {") and b'"content"' in line:
                            marks.append("person's first token")
                            break
                    await response.read()

            queued = asyncio.ensure_future(waiting_task())
            await asyncio.sleep(0.1)  # the second task reaches the queue
            await person()
            found["task 1"] = await _sse(running)
            running.release()
            marks.append("task 1 read")
            await queued
        return found

    with serving(data_dir, tiny_model, n_ctx=2048) as server:
        found = asyncio.run(scenario(server))

    stopped = _arbor_of(found["task 1"])["stats"]
    # The streamed task ended early, with what it had streamed.
    assert stopped["generated_tokens"] < 1500
    assert marks.index("person's first token") < marks.index("task 2 answered")
    title = found["title"]
    assert title["choices"][0]["finish_reason"] in ("stop", "length")
    assert title["usage"]["completion_tokens"] >= 1
