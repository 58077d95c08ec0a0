"""A reply that reasons, then calls a tool, through the real service and
engine (the sampler scripted, the template Qwen3's real one): reasoning,
answer and calls kept apart, the call kept out of the streamed text, and
the result answered."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.values import SamplingParams
from app.conversation.reply_shape import ReplyShape
from app.conversation.streams import Streams
from storage import tool_use
from storage.values import Role
from tests.helpers import template_corpus
from tests.helpers.tiny_model import write_tiny_model

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
END_OF_TURN = 4  # the tiny model's <|im_end|>


@pytest.fixture(scope="module")
def qwen3_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    template = template_corpus.reference_templates()["Qwen-Qwen3-0.6B"]
    return write_tiny_model(
        tmp_path_factory.mktemp("qwen3") / "tiny-qwen3.gguf", chat_template=template
    )


def test_reasoning_then_a_call_then_the_answer(open_service, qwen3_model) -> None:
    service = open_service(qwen3_model)
    engine = service.engine
    syntax = engine.chat_format.tool_syntax
    shape = ReplyShape(syntax.constraint([WEATHER], "auto", True), syntax)
    _id, root = service.new_conversation(None, tools=[WEATHER])
    engine.script = [
        *engine.tokenize(
            "<think>\nThe user wants Oslo's weather.\n</think>\n\nChecking.\n"
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
            "</tool_call>"
        ),
        END_OF_TURN,
    ]
    shown: list[str] = []
    params = SamplingParams(temperature=0, max_tokens=200)
    called = service.send(
        root, "Weather in Oslo?", params, Streams(shown.append), shape
    )
    assert called.thinking == "The user wants Oslo's weather."
    assert called.text == "Checking."
    ((call),) = called.tool_calls
    assert (call["name"], call["arguments"]) == ("get_weather", '{"city": "Oslo"}')
    # The stream showed the answer, never the call's markup.
    assert "".join(shown).strip() == "Checking."
    node = service.path(called.assistant_node)[-1]
    assert node.tool_use == tool_use.calling([call])

    result = service.add_message(
        called.assistant_node,
        Role.TOOL,
        "Oslo: snow.",
        tool_use.answering(call["id"], "get_weather"),
    )
    engine.script = [*engine.tokenize("It snows."), END_OF_TURN]
    answered = service.reply(result, params, shape=shape)
    assert answered.text == "It snows." and not answered.tool_calls
    path = service.path(answered.assistant_node)
    assert [n.role for n in path] == [
        Role.ROOT, Role.USER, Role.ASSISTANT, Role.TOOL, Role.ASSISTANT,
    ]  # fmt: skip
    # Qwen3 renders the tool's result in a user turn of <tool_response>.
    assert "<tool_response>\nOslo: snow.\n</tool_response>" in path[3].span_text
