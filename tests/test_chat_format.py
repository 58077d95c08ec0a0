"""Chat templates render as appended spans; ones that rewrite history are refused."""

from __future__ import annotations

import pytest

from app.backend.chat_format import CHATML_TEMPLATE, ChatFormat, Message, TemplateError
from tests.tiny_model import CHATML_TEMPLATE as TEMPLATE_WITH_DEFAULT_SYSTEM

LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
    "'<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# Starts with the number of messages, so every new turn changes the beginning.
REWRITING = (
    "{{ messages | length }}{% for m in messages %}"
    "{{ '<' + m['role'] + '>' + m['content'] }}{% endfor %}"
)


@pytest.mark.parametrize(
    "template", [CHATML_TEMPLATE, TEMPLATE_WITH_DEFAULT_SYSTEM, LLAMA3]
)
def test_spans_concatenate_to_the_full_rendering(template):
    fmt = ChatFormat(template, "<s>", "</s>")
    turns = [
        Message("user", "Hi"),
        Message("assistant", "Hello!"),
        Message("user", "Bye"),
    ]
    for system in (None, "Be brief."):
        text = fmt.root_text(system)
        for i, message in enumerate(turns):
            if message.role == "assistant":
                header = fmt.assistant_header(system, turns[:i])
                assert (
                    fmt.message_text(system, turns[:i], message)
                    == header + message.content + fmt.footer
                )
            text += fmt.message_text(system, turns[:i], message)
        messages = ([Message("system", system)] if system else []) + turns
        assert text == fmt.render(messages)


def test_default_system_prompt_belongs_to_the_root():
    fmt = ChatFormat(TEMPLATE_WITH_DEFAULT_SYSTEM)
    assert (
        fmt.root_text(None)
        == "<|im_start|>system\nYou are a tiny test model.<|im_end|>\n"
    )
    assert (
        fmt.message_text(None, [], Message("user", "x"))
        == "<|im_start|>user\nx<|im_end|>\n"
    )
    assert fmt.footer == "<|im_end|>\n"


@pytest.mark.parametrize(
    "template", [REWRITING, "{% for m in messages %}{{ m['content'] ", ""]
)
def test_unusable_templates_are_refused(template):
    with pytest.raises(TemplateError):
        ChatFormat(template)
