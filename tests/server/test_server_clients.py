"""The client libraries people point at a local model, with their defaults,
against ``arbor serve`` on 127.0.0.1: pydantic-ai (an agent with a tool and a
structured output), langchain-openai (``bind_tools``,
``with_structured_output``) and instructor (its default mode).

The model is the tiny random-weight one with Qwen 2.5's real template: what
it writes is random, so a call or an object that the library accepts comes
from the grammar alone (each library asks for a required or named call, or
a JSON schema). Each library validates what it got with pydantic: a test
passes only if the server's answer is what the library expects.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel, Field

from tests.conftest import run_cli
from tests.server.test_server import Server, serving


class Verdict(BaseModel):
    """What the libraries are asked to return."""

    answer: Literal["yes", "no"]
    confidence: int = Field(ge=0, le=100)


def _tree(data_dir: Path, conversation: int) -> list[dict[str, object]]:
    nodes: list[dict[str, object]] = run_cli(
        "--data-dir", data_dir, "tree", conversation
    ).json["nodes"]
    return nodes


def _conversations(data_dir: Path) -> list[int]:
    listed = run_cli("--data-dir", data_dir, "list").json["conversations"]
    return [c["id"] for c in listed]


def test_pydantic_ai_agent_calls_its_tool_and_returns_a_verdict(
    data_dir: Path, qwen_model: Path
) -> None:
    import openai
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    calls: list[str] = []

    with serving(data_dir, qwen_model, n_ctx=4096) as server:
        # The client is the test's, to close it (with its loop) before the
        # server stops: a socket left to the garbage collector warns later.
        client = openai.AsyncOpenAI(
            base_url=server.base_url, api_key="unused", max_retries=0
        )
        model = OpenAIChatModel("tiny", provider=OpenAIProvider(openai_client=client))
        agent = Agent(
            model,
            output_type=Verdict,
            model_settings={
                "temperature": 1.0,
                "seed": 11,
                "max_tokens": 256,
                "parallel_tool_calls": False,
            },
        )

        @agent.tool_plain
        def look_up(topic: Literal["water", "fire"]) -> str:
            """Look a topic up."""
            calls.append(topic)
            return f"{topic}: see the encyclopedia."

        async def run():  # type: ignore[no-untyped-def]
            try:
                return await agent.run(
                    "Is water wet?", usage_limits=UsageLimits(request_limit=12)
                )
            finally:
                await client.close()

        result = asyncio.run(run())
    gc.collect()
    assert isinstance(result.output, Verdict)
    # Every step of the run is a path in one tree: tool calls and results
    # are nodes, each request after the first matched what came before.
    (conversation,) = _conversations(data_dir)
    roles = [node["role"] for node in _tree(data_dir, conversation)]
    assert roles.count("assistant") == len(result.all_messages()) // 2
    assert roles.count("tool") == len(calls)


def _langchain(server: Server, http: httpx.Client):  # type: ignore[no-untyped-def]
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=server.base_url,
        api_key="unused",  # type: ignore[arg-type]
        model="tiny",
        temperature=1.0,
        seed=5,
        max_tokens=256,
        max_retries=0,
        http_client=http,
    )


def test_langchain_binds_tools_and_returns_structured_output(
    data_dir: Path, qwen_model: Path
) -> None:
    from langchain_core.tools import tool

    @tool
    def look_up(topic: Literal["water", "fire"]) -> str:
        """Look a topic up."""
        return topic

    with serving(data_dir, qwen_model, n_ctx=4096) as server, httpx.Client() as http:
        chat = _langchain(server, http)
        message = chat.bind_tools([look_up], tool_choice="required").invoke(
            "Tell me about water."
        )
        verdict = chat.with_structured_output(Verdict).invoke("Is water wet?")
    gc.collect()
    assert message.tool_calls
    assert message.tool_calls[0]["name"] == "look_up"
    assert message.tool_calls[0]["args"]["topic"] in ("water", "fire")
    assert isinstance(verdict, Verdict)


def test_instructor_default_mode_returns_the_model(
    data_dir: Path, qwen_model: Path
) -> None:
    import instructor
    import openai

    with serving(data_dir, qwen_model, n_ctx=4096) as server:
        client = instructor.from_openai(server.client())
        verdict = client.chat.completions.create(
            model="tiny",
            response_model=Verdict,
            messages=[{"role": "user", "content": "Is water wet?"}],
            max_tokens=256,
            temperature=1.0,
            seed=9,
            max_retries=0,
        )
    assert isinstance(verdict, Verdict)
    assert isinstance(client.client, openai.OpenAI)
