"""Learning each family's tool-call syntax from its real template, and reading
calls back: round trips through llama.cpp's reference templates (render a
reply that calls, cut out what the model would have written, parse), the
polyfills of templates without tool support, and lenient reading."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from app.backend.chat_template import ChatTemplate
from app.backend.tool_calls import MARKER, ParsedReply, parse_calls
from app.backend.tool_syntax import GENERIC, ToolSyntax, learn_tool_syntax
from tests.helpers.template_corpus import reference_templates
from tests.helpers.tiny_model import CHATML_TEMPLATE

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "options": {
                        "type": "object",
                        "properties": {"metric": {"type": "boolean"}},
                    },
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "set_mode",
            "description": "Switch a mode",
            "parameters": {
                "type": "object",
                "properties": {"mode": {"type": "string"}, "on": {"type": "boolean"}},
                "required": ["mode", "on"],
            },
        },
    },
]
WEATHER = {"city": "Paris", "days": 3, "options": {"metric": True}}
MODE = {"mode": "eco", "on": False}
# Qwen3-Coder's XML writes each value as text: flat, typed by the schema.
FLAT_WEATHER = {"city": "Paris", "days": 3}
# Mistral's templates refuse ids other than 9 letters and digits.
IDS = ("abcDEF123", "xyz789QRS")

# DeepSeek's markers are written with full-width bars.
DEEPSEEK = "<\uff5ctool\u2581calls\u2581begin\uff5c>"

# Template -> (trigger, writes two calls, keeps the model's ids).
NATIVE = {
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("<tool_call>", True, False),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<tool_call>", True, False),
    "Qwen-Qwen2.5-7B-Instruct": ("<tool_call>", True, False),
    "Qwen-Qwen3-0.6B": ("<tool_call>", True, False),
    "Qwen3-Coder": ("<tool_call>", True, False),
    "meta-llama-Llama-3.1-8B-Instruct": ("{", False, False),
    "meta-llama-Llama-3.2-3B-Instruct": ("{", False, False),
    "meta-llama-Llama-3.3-70B-Instruct": ("{", False, False),
    "mistralai-Mistral-Nemo-Instruct-2407": ("[TOOL_CALLS]", True, True),
    "Mistral-Small-3.2-24B-Instruct-2506": ("[TOOL_CALLS]", True, True),
    "unsloth-mistral-Devstral-Small-2507": ("[TOOL_CALLS]", True, False),
    "openai-gpt-oss-120b": ("to=functions.", False, False),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": (DEEPSEEK, True, False),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (DEEPSEEK, True, False),
    "deepseek-ai-DeepSeek-V3.1": (DEEPSEEK, True, False),
    "ibm-granite-granite-4.0": ("<tool_call>", True, False),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("<|START_ACTION|>", True, False),
    "meetkai-functionary-medium-v3.1": ("<function=", True, False),
    # v3.2's generation prompt ends with ">>>": a call starts the reply bare.
    "meetkai-functionary-medium-v3.2": ("", True, False),
}
# Templates that write no calls: llama.cpp's generic JSON, polyfilled.
WITHOUT_TOOLS = ["google-gemma-2-2b-it", "microsoft-Phi-3.5-mini-instruct"]


def _template(name: str) -> ChatTemplate:
    source = CHATML_TEMPLATE if name == "chatml" else reference_templates()[name]
    return ChatTemplate(source, "<s>", "</s>")


def _call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _written(template: ChatTemplate, calls: list[dict[str, Any]]) -> str:
    """What the model writes after the generation prompt to make ``calls``."""
    user = {"role": "user", "content": "What is the weather?"}
    reply = {"role": "assistant", "content": "", "tool_calls": calls}
    full = template.render([user, reply], tools=TOOLS)
    prompt = template.render([user], add_generation_prompt=True, tools=TOOLS)
    common = 0
    while common < min(len(full), len(prompt)) and full[common] == prompt[common]:
        common += 1
    # Never inside a marker (DeepSeek's prompt ends "<think>", its calls
    # start with another full-width marker: "<" is common to both).
    for marker in MARKER.finditer(full):
        if marker.start() < common < marker.end():
            common = marker.start()
    return full[common:]


def _arguments(syntax: ToolSyntax, text: str) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, json.loads(c.arguments)) for c in syntax.parse(text, TOOLS).calls]


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_a_native_family_is_learned_and_reads_back_what_its_template_writes(name):
    template = _template(name)
    trigger, parallel, keeps_ids = NATIVE[name]
    syntax = learn_tool_syntax(template)
    assert (syntax.kind, syntax.trigger, syntax.parallel) == (
        "native",
        trigger,
        parallel,
    )

    weather = FLAT_WEATHER if name == "Qwen3-Coder" else WEATHER
    text = _written(template, [_call("get_weather", weather, IDS[0])])
    assert trigger in text
    parsed = syntax.parse(text, TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [
        ("get_weather", weather)
    ]
    # What is left is markup around the turn, never the call's.
    assert "get_weather" not in parsed.content
    (call,) = parsed.calls
    if keeps_ids:
        assert call.id == IDS[0]
    else:
        assert re.fullmatch(r"call_[A-Za-z0-9]{24}", call.id)

    if parallel:
        two = [_call("get_weather", weather, IDS[0]), _call("set_mode", MODE, IDS[1])]
        text = _written(template, two)
        assert _arguments(syntax, text) == [
            ("get_weather", weather),
            ("set_mode", MODE),
        ]


@pytest.mark.parametrize("name", [*WITHOUT_TOOLS, "chatml"])
def test_a_template_without_tool_calls_gets_the_generic_format_polyfilled(name):
    template = _template(name)
    assert not template.supports_tool_calls
    assert learn_tool_syntax(template) == GENERIC
    user = {"role": "user", "content": "What is the weather?"}
    prompt = template.render([user], add_generation_prompt=True, tools=TOOLS)
    # The tools and the reply format are described in the system prompt.
    assert "You can call any of the following tools" in prompt
    assert '"get_weather"' in prompt
    assert "Respond in JSON format" in prompt

    two = [_call("get_weather", WEATHER, IDS[0]), _call("set_mode", MODE, IDS[1])]
    text = _written(template, two)
    assert text.lstrip().startswith('{"tool_calls": [')
    assert _arguments(GENERIC, text) == [("get_weather", WEATHER), ("set_mode", MODE)]
    assert [c.id for c in GENERIC.parse(text).calls] == list(IDS)


def test_a_tool_result_is_a_user_message_where_the_template_has_no_tool_role():
    template = _template("google-gemma-2-2b-it")
    assert not template.supports_tool_responses
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("get_weather", WEATHER, "c1")],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 21 C"},
    ]
    text = template.render(messages, add_generation_prompt=True)
    # Named after the call it answers (an OpenAI tool message has no name).
    response = {
        "tool_response": {
            "tool": "get_weather",
            "content": "Sunny, 21 C",
            "tool_call_id": "c1",
        }
    }
    assert json.dumps(response, indent=2) in text


def test_caps_of_templates_with_tools():
    hermes = _template("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use")
    assert (hermes.supports_tools, hermes.supports_tool_calls) == (True, True)
    assert hermes.supports_tool_responses
    # Qwen3-Coder iterates the arguments: JSON text is parsed for it.
    coder = _template("Qwen3-Coder")
    assert coder.requires_object_arguments
    # Functionary v3.2 concatenates them: an object is written as JSON text.
    functionary = _template("meetkai-functionary-medium-v3.2")
    assert not functionary.requires_object_arguments
    messages = [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
                }
            ],
        },
    ]
    assert '>>>get_weather\n{"city": "Oslo"}' in functionary.render(
        messages, tools=TOOLS
    )
    # The caller's messages are not changed by the conversion.
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == {"city": "Oslo"}


def test_calls_with_null_content_where_the_template_writes_only_those():
    # DeepSeek R1's Llama distill shows calls only when the content is null;
    # llama.cpp's "" would lose them from the prompt.
    template = _template("deepseek-ai-DeepSeek-R1-Distill-Llama-8B")
    assert template.supports_tool_calls
    text = _written(template, [_call("get_weather", {"city": "Oslo"}, "c1")])
    assert "get_weather" in text


def test_granite_3_3_is_written_by_hand():
    # Its system prompt names <|tool_call|> and a JSON list; no render shows it.
    syntax = learn_tool_syntax(_template("ibm-granite-granite-3.3-2B-Instruct"))
    assert (syntax.kind, syntax.trigger) == ("native", "<|tool_call|>")
    call = '[{"name": "get_weather", "arguments": {"city": "Oslo"}}]'
    text = "Let me check.<|tool_call|>" + call
    parsed = syntax.parse(text, TOOLS)
    assert parsed.content == "Let me check."
    assert _arguments(syntax, text) == [("get_weather", {"city": "Oslo"})]


# --- Reading leniently -------------------------------------------------------------


@pytest.fixture(scope="module")
def hermes() -> ToolSyntax:
    return learn_tool_syntax(_template("Qwen-Qwen2.5-7B-Instruct"))


def test_text_before_and_after_calls_is_content(hermes):
    call = '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    text = f"Checking.\n<tool_call>\n{call}\n</tool_call>\nDone."
    parsed = hermes.parse(text)
    assert parsed.content == "Checking.\n\nDone."
    assert [c.name for c in parsed.calls] == ["get_weather"]


def test_a_broken_call_stays_in_the_content(hermes):
    broken = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Os'
    call = '{"name": "set_mode", "arguments": {"mode": "a", "on": true}}'
    good = f"<tool_call>\n{call}\n</tool_call>"
    parsed = hermes.parse(good + "\n" + broken)
    assert [c.name for c in parsed.calls] == ["set_mode"]
    assert parsed.content == broken
    assert hermes.parse("<tool_call>not json</tool_call>").calls == ()


def test_whitespace_and_key_order_may_differ_from_the_template(hermes):
    text = '<tool_call>{"arguments":{"city":"Oslo"},"name":"get_weather"}</tool_call>'
    assert _arguments(hermes, text) == [("get_weather", {"city": "Oslo"})]


def test_control_characters_in_arguments_come_back_as_valid_json(hermes):
    text = '<tool_call>\n{"name": "x", "arguments": {"s": "a\tb\nc"}}\n</tool_call>'
    (call,) = hermes.parse(text).calls
    assert json.loads(call.arguments) == {"s": "a\tb\nc"}


def test_gpt_oss_headers_in_either_order():
    syntax = learn_tool_syntax(_template("openai-gpt-oss-120b"))
    arguments = '<|message|>{"city": "Oslo"}'
    for text in (
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
        f" to=functions.get_weather<|channel|>commentary json{arguments}<|call|>",
        f"<|channel|>commentary to=functions.get_weather <|constrain|>json{arguments}",
    ):
        parsed = syntax.parse(text)
        assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [
            ("get_weather", {"city": "Oslo"})
        ]
        assert "to=functions" not in parsed.content


def test_llama_calls_are_the_whole_reply_with_an_optional_python_tag():
    syntax = learn_tool_syntax(_template("meta-llama-Llama-3.1-8B-Instruct"))
    call = '{"name": "get_weather", "parameters": {"city": "Oslo"}}'
    assert _arguments(syntax, call) == [("get_weather", {"city": "Oslo"})]
    assert _arguments(syntax, "<|python_tag|>" + call) == [
        ("get_weather", {"city": "Oslo"})
    ]
    # A JSON answer that names no tool is an answer.
    answer = '{"name": "Ada", "parameters": {}}'
    assert syntax.parse(answer, TOOLS) == ParsedReply(answer, ())
    assert syntax.parse("Here: " + call, TOOLS).calls == ()


def test_generic_replies():
    assert GENERIC.parse('{"response": "Hello"}').content == "Hello"
    assert GENERIC.parse("plain words").content == "plain words"
    call = '{"name": "set_mode", "arguments": {"mode": "a", "on": true}}'
    single = f'```json\n{{"tool_call": {call}}}\n```'
    assert _arguments(GENERIC, single) == [("set_mode", {"mode": "a", "on": True})]
    unknown = '{"tool_call": {"name": "nope", "arguments": {}}}'
    assert GENERIC.parse(unknown, TOOLS).calls == ()


def test_xml_values_are_typed_by_the_schema():
    syntax = learn_tool_syntax(_template("Qwen3-Coder"))
    assert syntax.format is not None
    text = (
        "<tool_call>\n<function=set_mode>\n<parameter=mode>\n42\n</parameter>\n"
        "<parameter=on>\nTrue\n</parameter>\n</function>\n</tool_call>"
    )
    assert _arguments(syntax, text) == [("set_mode", {"mode": "42", "on": True})]
    # Without the tools, values read as JSON where they are JSON.
    parsed = parse_calls(syntax.format, text)
    assert json.loads(parsed.calls[0].arguments) == {"mode": 42, "on": "True"}
