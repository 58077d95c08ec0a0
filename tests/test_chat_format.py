"""The chat format's texts: conversation start, prompt, footer, and the fallback."""

from __future__ import annotations

import pytest

from app.backend.chat_format import CHATML_TEMPLATE, ChatFormat, Message, load
from tests.tiny_model import CHATML_TEMPLATE as TEMPLATE_WITH_DEFAULT_SYSTEM

LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + "
    "'<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
TURNS = [Message("user", "Hi"), Message("assistant", "Hello!"), Message("user", "Bye")]


@pytest.mark.parametrize(
    "template", [CHATML_TEMPLATE, TEMPLATE_WITH_DEFAULT_SYSTEM, LLAMA3]
)
def test_root_and_prompt_are_prefixes_of_the_full_rendering(template):
    fmt = ChatFormat(template, "<s>", "</s>")
    for system in (None, "Be brief."):
        messages = ([Message("system", system)] if system else []) + TURNS
        full = fmt.render(messages, add_generation_prompt=True)
        through, with_prompt = fmt.prompt(system, TURNS)
        assert with_prompt == full
        assert full.startswith(through) and through == fmt.render(messages)
        assert full.startswith(fmt.root_text(system))
        if system:
            assert system in fmt.root_text(system)


def test_default_system_prompt_belongs_to_the_root():
    fmt = ChatFormat(TEMPLATE_WITH_DEFAULT_SYSTEM)
    assert (
        fmt.root_text(None)
        == "<|im_start|>system\nYou are a tiny test model.<|im_end|>\n"
    )
    assert fmt.footer == "<|im_end|>\n"


def test_template_that_always_opens_the_reply():
    # Meta-Llama-3-8B-Instruct's first template appends the assistant header
    # whether or not a generation prompt is asked for.
    always = LLAMA3.replace("{% if add_generation_prompt %}", "{% if true %}")
    fmt = load(always, "<s>", "</s>")
    assert fmt.kind == "gguf"
    through, with_prompt = fmt.prompt(None, TURNS)
    assert through == with_prompt
    assert with_prompt.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{% for m in messages %}{{ m['content'] ", "cannot be used"),
        ("{{ raise_exception('no') }}", "cannot be used"),
        (None, "no chat template"),
        ("", "no chat template"),
    ],
)
def test_unusable_or_missing_templates_fall_back_to_chatml(template, reason):
    fmt = load(template, "<s>", "</s>")
    assert fmt.kind == "chatml"
    assert reason in fmt.note
    assert fmt.prompt(None, TURNS)[1].endswith("<|im_start|>assistant\n")
