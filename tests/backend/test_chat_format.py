"""The chat format's texts: conversation start, prompt, footer, and the fallback."""

from __future__ import annotations

import pytest

from app.backend.chat_format import CHATML_TEMPLATE, ChatFormat, Message, load
from tests.helpers import template_corpus
from tests.helpers.tiny_model import CHATML_TEMPLATE as TEMPLATE_WITH_DEFAULT_SYSTEM

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


@pytest.mark.parametrize("eos", ["<|endoftext|>", "</s>"])
def test_footer_is_what_the_next_turn_reads_after_a_reply(eos):
    # Phi-3.5 ends a conversation with eos_token; one that goes on never
    # holds it after the reply, so the footer leaves it out (else every next
    # turn would decode the reply again).
    fmt = ChatFormat(
        template_corpus.reference_templates()["microsoft-Phi-3.5-mini-instruct"],
        "<s>",
        eos,
    )
    one_round = TURNS[:2]
    assert fmt.history(None, one_round).endswith("Hello!<|end|>\n" + eos)
    assert fmt.footer == "<|end|>\n"
    # A reply rendered again (for another model) is closed the same way.
    again = fmt.reply_history(None, one_round)
    assert again == "<|user|>\nHi<|end|>\n<|assistant|>\nHello!<|end|>\n"
    assert fmt.render(TURNS).startswith(again)


# The reference templates whose ending after a last reply is not what a
# continued conversation holds there: Phi-3.5 appends eos_token; the others
# append a generation prompt or a tool-use preamble after the last turn, and
# the footer is what that shares with the next user turn, up to a marker
# (the turn's opening marker, where both begin with it: the next span holds
# the rest of that turn).
CHANGED_FOOTERS = {
    "microsoft-Phi-3.5-mini-instruct": "<|end|>\n",
    "fireworks-ai-llama-3-firefunction-v2": "<|eot_id|><|start_header_id|>",
    "CohereForAI-c4ai-command-r-plus-tool_use": (
        "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
    ),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": (
        "<|END_RESPONSE|><|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|>"
    ),
}


def test_footers_of_the_reference_templates():
    one_round = TURNS[:2]
    for name, source in sorted(template_corpus.reference_templates().items()):
        fmt = ChatFormat(source, "<s>", "</s>")
        ending = fmt.history(None, one_round).rsplit("Hello!", 1)[1]
        continued = fmt.render(TURNS).split("Hello!", 1)[1]
        if name in CHANGED_FOOTERS:
            assert not continued.startswith(ending), name
            assert fmt.footer == CHANGED_FOOTERS[name], name
            assert continued.startswith(fmt.footer), name
            assert fmt.render(TURNS).startswith(fmt.reply_history(None, one_round))
        else:
            # Everywhere else the ending is what goes on (or, gpt-oss, what
            # the next turn shares nothing with): the footer, as before.
            assert fmt.footer == ending, name
            assert fmt.reply_history(None, one_round) == fmt.history(None, one_round)
