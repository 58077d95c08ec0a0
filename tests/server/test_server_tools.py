"""Tool calls and structured output through ``arbor serve``, with the
official ``openai`` client, on 127.0.0.1.

The tiny random-weight model writes random text, so every call and JSON
reply here is shaped by the grammar alone: a required or named call, a JSON
object, a schema. The model's template is a real one read from llama.cpp's
reference templates at test time (Qwen 2.5's, which renders tools and calls
in Hermes' ``<tool_call>`` syntax); the ChatML one of the tiny model has no
tool support and gets the generic JSON syntax.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import run_cli
from tests.server.test_server import serving

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time now.",
        "parameters": {"type": "object", "properties": {}},
    },
}
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]


def _ask(client: openai.OpenAI, messages: list[Any], **options: Any) -> Any:
    # The tiny model's vocabulary is bytes: a call of ~60 characters takes
    # as many tokens.
    options.setdefault("max_tokens", 160)
    options.setdefault("temperature", 1.0)
    options.setdefault("seed", 3)
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=messages, **options
    )


def _check_weather_call(call: Any) -> dict[str, Any]:
    assert call.type == "function" and call.id
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert arguments["city"] in ("Paris", "Oslo", "Lima")
    assert isinstance(arguments["days"], int) and 1 <= arguments["days"] <= 7
    return arguments


def test_a_required_call_follows_the_schema_and_its_result_is_answered(
    data_dir: Path, qwen_model: Path
) -> None:
    with serving(data_dir, qwen_model, n_ctx=2048) as server:
        client = server.client()
        called = _ask(
            client,
            QUESTION,
            tools=[WEATHER, CLOCK],
            tool_choice="required",
            parallel_tool_calls=False,
        )
        choice = called.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.tool_calls
        for call in choice.message.tool_calls:
            if call.function.name == "get_weather":
                _check_weather_call(call)
        # The result goes back with the whole history: every turn is found
        # in the tree, and only the tool's result and the reply are decoded.
        history = [
            *QUESTION,
            choice.message.model_dump(exclude_none=True),
            *(
                {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 °C."}
                for call in choice.message.tool_calls
            ),
        ]
        answered = _ask(client, history, tools=[WEATHER, CLOCK], max_tokens=8)
        arbor = answered.model_extra["arbor"]
        assert arbor["matched_turns"] == 2
        assert arbor["conversation"] == called.model_extra["arbor"]["conversation"]
        # The call's reply was matched as it was sampled (its canonical JSON
        # is what the template renders): all of it is cached, and what is
        # decoded is the result's turn and the reply's opening.
        assert (
            answered.usage.prompt_tokens_details.cached_tokens
            == called.model_extra["arbor"]["stats"]["context_tokens"]
        )
        # The same step again (an agent retrying) decodes no history at all.
        again = _ask(client, history, tools=[WEATHER, CLOCK], max_tokens=8)
        assert again.model_extra["arbor"]["matched_turns"] == len(history)
        assert again.model_extra["arbor"]["stats"]["reprocessed_tokens"] == 0
        conversation = arbor["conversation"]
    tree = run_cli("--data-dir", data_dir, "tree", conversation).json["nodes"]
    roles = {node["id"]: node["role"] for node in tree}
    reply = called.model_extra["arbor"]["assistant_node"]
    results = [n for n in tree if n["parent"] == reply]
    assert [roles[n["id"]] for n in results] == ["tool"]


def test_a_named_call_and_streamed_call_deltas(
    data_dir: Path, qwen_model: Path
) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    with serving(data_dir, qwen_model, n_ctx=2048) as server:
        client = server.client()
        whole = _ask(client, QUESTION, tools=[CLOCK, WEATHER], tool_choice=named)
        calls = whole.choices[0].message.tool_calls
        assert calls and {c.function.name for c in calls} == {"get_weather"}
        for call in calls:
            _check_weather_call(call)
        chunks = list(
            _ask(
                client,
                QUESTION,
                tools=[CLOCK, WEATHER],
                tool_choice=named,
                stream=True,
                seed=5,
            )
        )
    # The client's own accumulation of deltas, as agents do it.
    deltas = [
        call
        for chunk in chunks
        if chunk.choices
        for call in chunk.choices[0].delta.tool_calls or []
    ]
    assert deltas
    joined: dict[int, dict[str, str]] = {}
    for delta in deltas:
        entry = joined.setdefault(delta.index, {"name": "", "arguments": ""})
        entry["name"] += delta.function.name or ""
        entry["arguments"] += delta.function.arguments or ""
    for entry in joined.values():
        assert entry["name"] == "get_weather"
        json.loads(entry["arguments"])
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finished[-1].choices[0].finish_reason == "tool_calls"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "<tool_call>" not in text and "get_weather" not in text


def test_json_schema_and_json_object_replies_parse(
    data_dir: Path, tiny_model: Path
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string", "enum": ["yes", "no"]},
            "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
        },
        "required": ["answer", "confidence"],
        "additionalProperties": False,
    }
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        shaped = _ask(
            client,
            [{"role": "user", "content": "Is water wet?"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": schema, "strict": True},
            },
            max_tokens=64,
        )
        verdict = json.loads(shaped.choices[0].message.content)
        assert set(verdict) == {"answer", "confidence"}
        assert verdict["answer"] in ("yes", "no")
        assert 0 <= verdict["confidence"] <= 100
        free = _ask(
            client,
            [{"role": "user", "content": "Any JSON."}],
            response_format={"type": "json_object"},
            max_tokens=200,
        )
        if free.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(free.choices[0].message.content), dict)
        else:  # cut at max_tokens: what came is the start of an object
            assert free.choices[0].message.content.lstrip().startswith("{")


def test_n_replies_are_sibling_branches(data_dir: Path, tiny_model: Path) -> None:
    with serving(data_dir, tiny_model) as server:
        response = _ask(
            server.client(),
            [{"role": "user", "content": "Say something."}],
            n=3,
            max_tokens=6,
        )
        arbor = response.model_extra["arbor"]
    assert [c.index for c in response.choices] == [0, 1, 2]
    nodes = arbor["assistant_nodes"]
    assert len(set(nodes)) == 3
    tree = run_cli("--data-dir", data_dir, "tree", arbor["conversation"]).json["nodes"]
    parents = {n["id"]: n["parent"] for n in tree}
    assert {parents[node] for node in nodes} == {arbor["user_node"]}
    generated = [
        run_cli("--data-dir", data_dir, "show", node).json["messages"][-1][
            "generation"
        ]["generated_tokens"]
        for node in nodes
    ]
    assert response.usage.completion_tokens == sum(generated)


def test_any_model_name_is_answered_by_the_loaded_model(
    data_dir: Path, tiny_model: Path
) -> None:
    with serving(data_dir, tiny_model) as server:
        response = _ask(
            server.client(),
            [{"role": "user", "content": "Hi"}],
            max_tokens=3,
        )
        log = server.stop()
    assert response.model == "tiny"
    assert "asked for 'gpt-4o-mini'" in log


def test_a_last_assistant_turn_is_continued(data_dir: Path, tiny_model: Path) -> None:
    begun = "Once upon a time"
    with serving(data_dir, tiny_model) as server:
        response = _ask(
            server.client(),
            [
                {"role": "user", "content": "Tell a story."},
                {"role": "assistant", "content": begun},
            ],
            max_tokens=5,
        )
        node = response.model_extra["arbor"]["assistant_node"]
    shown = run_cli("--data-dir", data_dir, "show", node).json["messages"][-1]
    # The client gets what follows; the tree holds the whole reply.
    assert shown["text"] == begun + response.choices[0].message.content
    assert shown["role"] == "assistant"


def test_logprobs_are_the_models_own_for_each_token(
    data_dir: Path, tiny_model: Path
) -> None:
    with serving(data_dir, tiny_model) as server:
        response = _ask(
            server.client(),
            [{"role": "user", "content": "Hello"}],
            logprobs=True,
            top_logprobs=3,
            max_tokens=6,
            temperature=0,
            # Without a repeat penalty, greedy takes the likeliest token.
            extra_body={"repeat_penalty": 1.0},
        )
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens
    for item in content:
        assert item.logprob <= 0
        assert len(item.top_logprobs) == 3
        ranked = [top.logprob for top in item.top_logprobs]
        assert ranked == sorted(ranked, reverse=True)
        # Greedy: the token given is the likeliest one.
        assert item.logprob == pytest.approx(ranked[0])
    text = response.choices[0].message.content
    assert "".join(item.token for item in content).strip() == text.strip()


def test_greedy_alternatives_under_a_grammar_each_follow_it(
    data_dir: Path, tiny_model: Path
) -> None:
    # Greedy alternatives start with the next likeliest token each: under a
    # grammar, the next likeliest the grammar allows (here it allows only
    # "{" first, so both begin alike; before, the second raised).
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["n"],
    }
    with serving(data_dir, tiny_model) as server:
        response = _ask(
            server.client(),
            [{"role": "user", "content": "A number."}],
            n=2,
            temperature=0,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "number", "schema": schema},
            },
            max_tokens=40,
        )
    values = [json.loads(choice.message.content) for choice in response.choices]
    assert len(values) == 2
    assert all(0 <= value["n"] <= 99 for value in values)


@pytest.mark.gemma3
def test_gemma_answers_after_a_tool_result(data_dir: Path, gemma3_models: Any) -> None:
    # Gemma's template has no tools: the generic format describes them in
    # the first turn, a call is JSON, a result goes back as the user's turn.
    with serving(data_dir, gemma3_models.chat, n_ctx=2048) as server:
        client = server.client()
        called = _ask(
            client,
            QUESTION,
            tools=[WEATHER],
            tool_choice="required",
            parallel_tool_calls=False,
            temperature=0,
        )
        (call,) = called.choices[0].message.tool_calls
        arguments = _check_weather_call(call)
        history = [
            *QUESTION,
            called.choices[0].message.model_dump(exclude_none=True),
            {
                "role": "tool",
                "tool_call_id": call.id,
                "content": f"{arguments['city']}: sunny, 21 °C.",
            },
        ]
        answered = _ask(client, history, tools=[WEATHER], temperature=0, max_tokens=24)
    message = answered.choices[0].message
    assert answered.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert message.content or message.tool_calls
    arbor = answered.model_extra["arbor"]
    assert arbor["matched_turns"] == 2
    assert (
        answered.usage.prompt_tokens_details.cached_tokens
        == called.model_extra["arbor"]["stats"]["context_tokens"]
    )


def test_an_alternative_not_checkpointed_yet_is_decoded_when_a_client_picks_it(
    data_dir: Path, tiny_model: Path
) -> None:
    question = [{"role": "user", "content": "Say something."}]
    with serving(data_dir, tiny_model) as server:
        client = server.client()
        many = _ask(client, question, n=3, max_tokens=6)
        # Only the first reply was checkpointed with the answer.
        assert many.model_extra["arbor"]["stats"]["checkpoint_bytes_written"] > 0
        picked = many.choices[2].message.content
        history = [
            *question,
            {"role": "assistant", "content": picked},
            {"role": "user", "content": "Go on."},
        ]
        first = _ask(client, history, max_tokens=4)
        again = _ask(client, history, max_tokens=4)
    nodes = many.model_extra["arbor"]["assistant_nodes"]
    arbor = first.model_extra["arbor"]
    # The pick is matched; its span is decoded then (it had no checkpoint)...
    assert arbor["matched_turns"] == 2
    assert arbor["stats"]["reprocessed_tokens"] > 0
    tree = run_cli("--data-dir", data_dir, "tree", arbor["conversation"]).json["nodes"]
    parents = {n["id"]: n["parent"] for n in tree}
    assert parents[arbor["user_node"]] == nodes[2]
    # ... and checkpointed: the next visit restores it.
    assert again.model_extra["arbor"]["stats"]["reprocessed_tokens"] == 0


def test_eight_replies_in_one_request(data_dir: Path, tiny_model: Path) -> None:
    with serving(data_dir, tiny_model) as server:
        response = _ask(
            server.client(), [{"role": "user", "content": "Hi"}], n=8, max_tokens=3
        )
    assert [choice.index for choice in response.choices] == list(range(8))
    assert len(set(response.model_extra["arbor"]["assistant_nodes"])) == 8
