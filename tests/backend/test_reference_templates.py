"""ChatTemplate renders real models' templates the way llama.cpp does.

Two corpora come from llama.cpp's own sources (see ``tests/helpers/template_corpus``):
the expected renders of ``test-chat-template.cpp``, compared character for
character, and the ~70 real templates of ``models/templates``, which must all
render a range of conversations. The unit tests below them pin the polyfills
and Jinja extensions with small inline templates.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import pytest

from app.backend.chat_template import ChatTemplate, TemplateError
from tests.helpers.template_corpus import (
    parse_test_cases,
    reference_cases,
    reference_templates,
)

SYSTEM = "You are Arbor's test assistant."


def _msg(role: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"role": role, "content": content, **extra}


def _rounds(count: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for i in range(count):
        turns += [_msg("user", f"Question {i}"), _msg("assistant", f"Answer {i}")]
    return turns


# Conversations every reference template must render, with and without the
# generation prompt.
CONVERSATIONS: dict[str, list[dict[str, Any]]] = {
    "system prompt": [_msg("system", SYSTEM), _msg("user", "Hello there")],
    "no system prompt": [_msg("user", "Hello there")],
    "three rounds": [_msg("system", SYSTEM), *_rounds(3), _msg("user", "Last one")],
    "three rounds, ends with a reply": _rounds(3),
    "non-ASCII": [
        _msg("system", "Sei höflich. 🌳"),
        _msg("user", "Grüße, 世界 🌳"),
        _msg("assistant", "Привет, 世界 🌲"),
        _msg("user", "Ça va? ¿Qué tal? 😀"),
    ],
    "reasoning": [
        _msg("system", SYSTEM),
        _msg("user", "Think first"),
        _msg("assistant", "Forty-two", reasoning_content="Let me count."),
        _msg("user", "And again?"),
    ],
}


# --- llama.cpp's expected renders ---------------------------------------------


def test_reference_cases_render_as_llama_cpp_expects():
    cases = [case for case in reference_cases() if case.supported_with_jinja]
    # Guard: the C++ test list was found and parsed, not silently empty.
    assert len(cases) >= 30
    mismatches = []
    for case in cases:
        try:
            template = ChatTemplate(case.template_str, case.bos_token, case.eos_token)
            output = template.render(case.messages(), add_generation_prompt=True)
        except TemplateError as exc:
            mismatches.append(f"{case.name}: TemplateError: {exc}")
            continue
        if output != case.expected:
            mismatches.append(
                f"{case.name}:\n    expected {case.expected!r}\n    got      {output!r}"
            )
    identical = len(cases) - len(mismatches)
    print(f"reference cases identical: {identical}/{len(cases)}")
    print("\n".join(mismatches))
    assert identical >= 0.9 * len(cases), (
        f"only {identical}/{len(cases)} identical:\n" + "\n".join(mismatches)
    )


def test_reference_cases_use_the_fixed_conversation():
    cases = reference_cases()
    assert cases[0].conversation == (
        ("system", "You are a helpful assistant"),
        ("user", "Hello"),
        ("assistant", "Hi there"),
        ("user", "Who are you"),
        ("assistant", "   I am an assistant   "),
        ("user", "Another question"),
    )
    # Cases with extra turns keep the fixed six in front of them.
    assert all(case.conversation[:6] == cases[0].conversation for case in cases)


# --- llama.cpp's real templates -------------------------------------------------


def _template_problems(name: str, source: str) -> list[str]:
    try:
        template = ChatTemplate(source, "<s>", "</s>")
    except TemplateError as exc:
        return [f"does not parse: {exc}"]
    problems = []
    for label, conversation in CONVERSATIONS.items():
        snapshot = json.dumps(conversation)
        for add_generation_prompt in (True, False):
            where = f"{label}, add_generation_prompt={add_generation_prompt}"
            try:
                text = template.render(
                    conversation, add_generation_prompt=add_generation_prompt
                )
            except TemplateError as exc:
                problems.append(f"{where}: {exc}")
                continue
            # Every message must reach the prompt; a system prompt the template
            # cannot place is merged into the first user turn, so it too shows.
            missing = [m["content"] for m in conversation if m["content"] not in text]
            if missing:
                problems.append(f"{where}: drops {missing}")
        # Polyfills work on copies: the caller's messages stay as they were.
        if json.dumps(conversation) != snapshot:
            problems.append(f"{label}: the messages were modified")
    return problems


def test_every_reference_template_renders_every_conversation():
    templates = reference_templates()
    assert len(templates) >= 60  # guard: the tarball's templates were found
    failures = {}
    for name, source in sorted(templates.items()):
        problems = _template_problems(name, source)
        if problems:
            failures[name] = problems
    passing = len(templates) - len(failures)
    report = "\n".join(
        f"{name}:\n    " + "\n    ".join(problems)
        for name, problems in failures.items()
    )
    print(f"templates rendering everything: {passing}/{len(templates)}")
    print(report)
    assert passing >= 0.95 * len(templates), (
        f"only {passing}/{len(templates)} templates render:\n{report}"
    )


# --- Polyfills ----------------------------------------------------------------

# google/gemma-7b-it: no system role, strict user/model alternation.
GEMMA = (
    "{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}"
    "{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}"
    "{{ '<start_of_turn>' + role + '\n' + message['content'] | trim "
    "+ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_system_prompt_merges_into_the_first_user_turn():
    template = ChatTemplate(GEMMA)
    assert template.supports_system_role is False
    text = template.render(
        [_msg("system", "You are a helpful assistant"), _msg("user", "Hello")],
        add_generation_prompt=True,
    )
    # llama.cpp's expectation for gemma-7b-it: system + "\n" + first user turn.
    assert text == (
        "<start_of_turn>user\nYou are a helpful assistant\nHello<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_system_prompt_alone_is_dropped_without_a_system_role():
    template = ChatTemplate(
        "{% for m in messages %}{% if m.role == 'user' %}U:{{ m.content }}"
        "{% endif %}{% endfor %}"
    )
    assert template.supports_system_role is False
    assert template.render([_msg("system", "Rules")]) == ""
    assert template.render([_msg("system", "Rules"), _msg("user", "Hi")]) == (
        "U:Rules\nHi"
    )


def test_system_role_is_kept_when_the_template_reads_it():
    template = ChatTemplate(CHATML)
    assert template.supports_system_role is True
    text = template.render([_msg("system", "Rules"), _msg("user", "Hi")])
    assert (
        text == "<|im_start|>system\nRules<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    )


def test_developer_role_becomes_system():
    text = ChatTemplate(CHATML).render([_msg("developer", "Rules")])
    assert text == "<|im_start|>system\nRules<|im_end|>\n"


def test_messages_get_llama_cpp_fields():
    template = ChatTemplate(
        "{% for m in messages %}[{{ m.content }}|"
        "{{ 'R' if m.reasoning_content is defined else '-' }}]{% endfor %}"
    )
    text = template.render(
        [
            {"role": "user", "content": None},
            _msg("assistant", "a", reasoning_content=""),
            _msg("assistant", "b", reasoning_content="why"),
        ]
    )
    # Null content becomes "", empty reasoning is left out.
    assert text == "[|-][a|-][b|R]"


def test_string_content_becomes_parts_for_templates_that_read_parts():
    template = ChatTemplate(
        "{% for m in messages %}{% for part in m.content %}"
        "{% if part.type == 'text' %}<{{ part.text }}>{% endif %}"
        "{% endfor %}{% endfor %}"
    )
    assert template.supports_typed_content is True
    assert template.supports_string_content is False
    assert template.render([_msg("user", "hi")]) == "<hi>"


def test_parts_become_text_for_templates_that_read_strings():
    template = ChatTemplate(CHATML)
    assert template.supports_typed_content is False
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    text = template.render([{"role": "user", "content": parts}])
    assert text == "<|im_start|>user\none\ntwo<|im_end|>\n"


def test_gpt_oss_reads_reasoning_as_thinking_and_ends_with_end():
    template = ChatTemplate(
        "{% for m in messages %}<|start|>{{ m.role }}"
        "{% if m.thinking %}<|channel|>analysis<|message|>{{ m.thinking }}<|end|>"
        "{% endif %}"
        "<|channel|>final<|message|>{{ m.content }}"
        "{% if m.role == 'assistant' and loop.last %}<|return|>"
        "{% else %}<|end|>{% endif %}"
        "{% endfor %}"
    )
    text = template.render(
        [_msg("user", "q"), _msg("assistant", "a", reasoning_content="r")]
    )
    assert text == (
        "<|start|>user<|channel|>final<|message|>q<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>r<|end|>"
        "<|channel|>final<|message|>a<|end|>"
    )


# --- The environment ------------------------------------------------------------


def test_loop_controls():
    template = ChatTemplate(
        "{% for m in messages %}"
        "{% if m.content == '1' %}{% continue %}{% endif %}"
        "{% if loop.index > 3 %}{% break %}{% endif %}"
        "{{ m.content }};{% endfor %}"
    )
    turns = [_msg("user", str(i)) for i in range(5)]
    assert template.render(turns) == "0;2;"


def test_generation_block_keeps_its_body():
    template = ChatTemplate(
        "{% for m in messages %}{% if m.role == 'assistant' %}"
        "{% generation %}{{ m.content }}{% set last = m.content %}{% endgeneration %}"
        "{% else %}{{ m.content }}{% endif %}|{% endfor %}"
    )
    assert template.render([_msg("user", "q"), _msg("assistant", "a")]) == "q|a|"


def test_raise_exception_is_a_template_error():
    template = ChatTemplate(
        "{{ raise_exception('no such role: ' + messages[0].role) }}"
    )
    with pytest.raises(TemplateError, match="no such role: critic"):
        template.render([_msg("critic", "x")])


@pytest.mark.parametrize(
    "source",
    [
        "{{ 1 // 0 }}",  # ZeroDivisionError
        "{{ messages[0].content.nope() }}",  # calling undefined
        "{{ messages.append(1) }}",  # the sandbox refuses mutation
        "{{ messages[0].missing + 1 }}",  # arithmetic on undefined
    ],
)
def test_any_failure_is_a_template_error(source):
    with pytest.raises(TemplateError):
        ChatTemplate(source).render([_msg("user", "x")])


def test_syntax_error_is_a_template_error():
    with pytest.raises(TemplateError, match="does not parse"):
        ChatTemplate("{% for m in messages %}")


def test_tojson_has_hugging_face_semantics():
    template = ChatTemplate(
        "{{ messages[0] | tojson }}|"
        "{{ messages[0] | tojson(indent=2, sort_keys=true) }}|"
        "{{ messages[0] | tojson(separators=(',', ':')) }}|"
        "{{ messages[0] | tojson(ensure_ascii=true) }}"
    )
    message = _msg("user", "<b>Grüße & 🌳</b>")
    plain, indented, compact, ascii_only = template.render([message]).split("|")
    # No HTML escaping (Jinja's own tojson would write \u003cb\u003e).
    assert plain == '{"role": "user", "content": "<b>Grüße & 🌳</b>"}'
    assert indented == '{\n  "content": "<b>Grüße & 🌳</b>",\n  "role": "user"\n}'
    assert compact == '{"role":"user","content":"<b>Grüße & 🌳</b>"}'
    assert ascii_only == json.dumps(message)


def test_dates_and_thinking_defaults_are_defined():
    template = ChatTemplate(
        "{{ strftime_now('%Y') }}|{{ date_string }}|{{ enable_thinking }}|"
        "{{ tools is defined }}"
    )
    year, date_string, thinking, tools = template.render([]).split("|")
    assert year == str(datetime.now().year)
    assert date_string == datetime.now().strftime("%d %b %Y")
    assert thinking == "True"
    assert tools == "False"


def test_variables_reach_the_template():
    template = ChatTemplate(
        "{{ enable_thinking }}|{{ reasoning_effort }}|{{ reasoning_strength }}|"
        "{{ tools | length }}"
    )
    text = template.render(
        [], enable_thinking=False, reasoning_effort="low", tools=[{"type": "function"}]
    )
    assert text == "False|low|low|1"


def test_none_and_undefined_concatenate_as_empty_text():
    # llama.cpp's runtime treats them as "" in string concatenation, and
    # prints none as nothing (firefunction-v2 relies on the first).
    template = ChatTemplate("{{ 'a' + functions + 'b' }}|{{ none }}|{{ 'c' + none }}")
    assert template.render([]) == "ab||c"


def test_values_print_as_llama_cpp_prints_them():
    template = ChatTemplate("{{ ['a', 1, none, {'k': 'v'}, ['b']] }}|{{ {'k': 'v'} }}")
    assert template.render([]) == "a1b|"


def test_items_of_undefined_are_undefined():
    # gemma-2 looks at messages[0] even when a lone system prompt was dropped.
    template = ChatTemplate(
        "{% if messages[0]['role'] == 'system' %}S{% endif %}"
        "{{ messages[-1].content.text }}ok"
    )
    assert template.render([]) == "ok"


# --- The corpus parser ------------------------------------------------------


def test_cpp_string_literals_are_parsed_like_a_compiler():
    source = r"""
    int main_automated_tests(void) {
        std::vector<llama_chat_message> conversation {
            {"system", "S"},
            {"user", "tab\there \"q\" \\ \x41\u00e9"},
        };
        std::vector<TestCase> test_cases {
            {
                /* .name= */ "one", // a comment with "quotes"
                /* .template_str= */ U8C("你好" "{{ x }}"),
                /* .expected_output= */ u8"line\n" "next",
                /* .expected_output_jinja= */ R"x(raw "\n")x",
                /* .bos_token= */ "<s>",
                /* .eos_token= */ "</s>",
                /* .supported_with_jinja= */ false,
                /* .extra_conversation= */ {{"user", "more"}},
            },
            {
                /* .name= */ "two",
                /* .template_str */ "t",
                /* .expected_output= */ "e",
                /* .expected_output_jinja= */ "",
            },
        };
    """
    one, two = parse_test_cases(source)
    assert one.name == "one"
    assert one.template_str == "你好{{ x }}"
    assert one.expected_output == "line\nnext"
    assert one.expected_output_jinja == r'raw "\n"'
    assert (one.bos_token, one.eos_token, one.supported_with_jinja) == (
        "<s>",
        "</s>",
        False,
    )
    assert one.conversation == (
        ("system", "S"),
        ("user", 'tab\there "q" \\ Aé'),
        ("user", "more"),
    )
    assert (two.bos_token, two.eos_token, two.supported_with_jinja) == ("", "", True)
    assert two.expected == "e"
    assert len(two.conversation) == 2
