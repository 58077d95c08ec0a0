"""Real models' chat formats through the real stack, on tiny models.

Each tiny model carries a real reference template from llama.cpp's sdist
(Qwen3, Llama 3.1, Gemma 2, gpt-oss, Mistral Nemo, DeepSeek-R1). The engine
is the real llama.cpp backend; only the choice of tokens is scripted (a
random-weight model would never write ``</think>``), so the replies are the
ones a real model of that family writes. At every reply the context must be
the template's own rendering of the whole path with the generation prompt,
reached without reprocessing anything.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.chat_format import Message
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from app.conversation.spans import span_tokens, system_of, turns_of
from app.conversation.streams import Streams
from tests.conftest import run_cli
from tests.helpers import real_vocab, template_corpus
from tests.helpers.scripted import held_context
from tests.helpers.tiny_model import write_tiny_model

EOG = {"</s>": 2, "<|im_end|>": 4}
PARAMS = SamplingParams(temperature=0, max_tokens=200)


def _model(tmp_path: Path, name: str) -> Path:
    source = template_corpus.reference_templates()[name]
    return write_tiny_model(tmp_path / f"{name}.gguf", chat_template=source)


def _expected_context(service: ConversationService, user_node: int) -> list[int]:
    # The template renders the whole path with the generation prompt.
    engine = service.engine
    path = service.path(user_node)
    _through, text = engine.chat_format.prompt(system_of(path), turns_of(path))
    return span_tokens(engine, text, at_start=True)


CASES = {
    # name: (replies as the model writes them, end-of-turn token)
    "Qwen-Qwen3-0.6B": (
        [
            "<think>\nThe user says hi.\n</think>\n\nHello!",
            "<think>\nGrüße → 世界.\n</think>\n\nSchön 🌳",
            "<think>\nThird.\n</think>\n\nDone.",
        ],
        "<|im_end|>",
    ),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (
        [
            "The user says hi.\n</think>\n\nHello!",
            "Grüße.\n</think>\n\nSchön 🌳",
            "Ok.\n</think>\n\nDone.",
        ],
        "</s>",
    ),
    "openai-gpt-oss-120b": (
        [
            "<|channel|>analysis<|message|>The user says hi.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Hello!",
            "<|channel|>analysis<|message|>Grüße.<|end|>"
            "<|start|>assistant<|channel|>final<|message|>Schön 🌳",
            "<|channel|>final<|message|>Done.",
        ],
        "</s>",
    ),
    "meta-llama-Llama-3.1-8B-Instruct": (["Hello!", "  Schön 🌳  ", "Done."], "</s>"),
    "google-gemma-2-2b-it": (["Hello!", "Schön 🌳", "Done."], "</s>"),
    "mistralai-Mistral-Nemo-Instruct-2407": (["Hello!", "Schön 🌳", "Done."], "</s>"),
}
QUESTIONS = ["Hi there", "Grüße aus Köln, 世界?", "And a third one"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_context_is_the_templates_rendering_at_every_reply(
    tmp_path, open_service, name
):
    replies, eog = CASES[name]
    service = open_service(_model(tmp_path, name))
    engine = service.engine
    assert engine.info.chat_format == "gguf", engine.info.chat_format_note
    system = None if "gemma" in name else "Answer briefly."
    _conv, node = service.new_conversation(system)
    redecoded = []
    for question, written in zip(QUESTIONS, replies, strict=True):
        engine.script = [*engine.tokenize(written), EOG[eog]]
        parent_end = service.path(node)[-1].end_pos
        reply = service.send(node, question, PARAMS)
        user = service.path(reply.user_node)[-1]
        assert held_context(service.path(reply.assistant_node)) == _expected_context(
            service, reply.user_node
        )
        if redecoded:  # the first reply decodes the new root once
            assert reply.stats.reprocessed_tokens == 0
        redecoded.append(parent_end - user.start_pos)
        node = reply.assistant_node
    print(f"\n{name}: tokens decoded again per turn {redecoded}")
    stored = service.path(node)
    if engine.info.reasoning_format != "none":
        assert stored[2].thinking and stored[2].text == "Hello!"
        assert "<" not in stored[2].text
    else:
        assert [n.thinking for n in stored] == [""] * len(stored)


def test_reasoning_reply_fields_and_next_turn(tmp_path, open_service, data_dir):
    model = _model(tmp_path, "Qwen-Qwen3-0.6B")
    service = open_service(model)
    engine = service.engine
    assert engine.info.reasoning_format != "none"
    assert engine.info.reasoning_choices  # Qwen3 takes enable_thinking
    _conv, root = service.new_conversation(None)
    engine.script = [
        *engine.tokenize("<think>\nLet me think.\n</think>\n\nThe answer."),
        EOG["<|im_end|>"],
    ]
    thinking, answer = [], []
    reply = service.send(
        root,
        "Question?",
        PARAMS,
        Streams(on_token=answer.append, on_thinking=thinking.append),
    )
    assert (reply.thinking, reply.text) == ("Let me think.", "The answer.")
    assert "".join(thinking).strip() == "Let me think."
    assert "".join(answer).strip() == "The answer."
    node = service.path(reply.assistant_node)[-1]
    assert (node.thinking, node.text) == ("Let me think.", "The answer.")

    # The next turn's context drops the earlier reasoning, as Qwen3's template does.
    engine.script = [*engine.tokenize("Second."), EOG["<|im_end|>"]]
    second = service.send(reply.assistant_node, "Another?", PARAMS)
    held = engine.detokenize(held_context(service.path(second.assistant_node)))
    assert "Let me think." not in held and "The answer." in held
    assert second.stats.reprocessed_tokens == 0

    # The reasoning switch: off renders the template's empty thinking block.
    service.set_reasoning(node.conversation_id, "off")
    engine.script = [*engine.tokenize("Third."), EOG["<|im_end|>"]]
    third = service.send(second.assistant_node, "Quick?", PARAMS)
    opening = service.path(third.assistant_node)[-1].span_text
    assert opening.startswith("<|im_start|>assistant\n<think>\n\n</think>")
    assert third.thinking == "" and third.text == "Third."


def test_special_tokens_are_never_shown(tmp_path, open_service):
    service = open_service(_model(tmp_path, "meta-llama-Llama-3.1-8B-Instruct"))
    engine = service.engine
    _conv, root = service.new_conversation(None)
    engine.script = [*engine.tokenize("a<|im_start|>b"), EOG["</s>"]]
    shown = []
    reply = service.send(root, "Hi", PARAMS, Streams(on_token=shown.append))
    assert reply.text == "ab" == "".join(shown)
    # The reply's span keeps what the model wrote, closed by the template.
    span = service.path(reply.assistant_node)[-1].span_text
    assert span.endswith("a<|im_start|>b<|eot_id|>")


def test_model_without_template_uses_chatml_and_says_so(tmp_path, data_dir):
    model = write_tiny_model(tmp_path / "no-template.gguf", chat_template=None)
    info = run_cli("--data-dir", data_dir, "--model", model, "info").json["model"]
    assert info["chat_format"] == "chatml"
    assert "no chat template" in info["chat_format_note"]


def test_thinking_is_a_separate_field_in_show(tmp_path, arbor):
    template = template_corpus.reference_templates()[
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"
    ]
    model = write_tiny_model(tmp_path / "r1.gguf", chat_template=template)
    root = arbor("new", model=model)["node"]
    # The R1 template opens the thinking block itself, and the random model
    # never closes it: the whole greedy reply is thinking.
    reply = arbor(
        "send", root, "Hi", "--temperature", "0", "--max-tokens", "12", model=model
    )
    assert reply["thinking"] and reply["text"] == ""
    shown = arbor("show", reply["assistant_node"], model=model)["messages"][-1]
    assert shown["thinking"] == reply["thinking"]
    assert shown["text"] == ""


def test_reasoning_choice_from_the_command_line(tmp_path, data_dir):
    model = _model(tmp_path, "Qwen-Qwen3-0.6B")

    def arbor(*args):
        return run_cli("--data-dir", data_dir, "--model", model, *map(str, args))

    conversation = arbor("new").json["conversation"]
    assert arbor("reasoning", conversation, "off").json["reasoning"] == "off"
    refused = arbor("reasoning", conversation, "sideways")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert "on, off" in refused.stderr
    root = arbor("show", 1).json["messages"][0]["id"]
    reply = arbor("send", root, "Hi", "--temperature", "0", "--max-tokens", "4").json
    # Thinking off: Qwen3's template opens and closes an empty thinking block,
    # so the whole reply is answer.
    assert "thinking" not in reply


def _reference_case_template(name: str) -> str:
    return next(
        c.template_str for c in template_corpus.reference_cases() if c.name == name
    )


# Real vocabularies (tests/helpers/real_vocab.py), where the seams between spans
# matter: Mistral 7B's markers are plain text in its SentencePiece vocabulary
# (a span that continues a line must not get SentencePiece's space prefix),
# Llama 3's BPE merges across text.
REAL_VOCAB_CASES = {
    "mistral-v1": (
        "llama-spm",
        "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a "
        "system prompt)",
    ),
    "llama-3.1": ("llama-bpe", "meta-llama-Llama-3.1-8B-Instruct"),
}


@pytest.mark.parametrize("case", sorted(REAL_VOCAB_CASES))
def test_context_is_llama_cpps_tokens_of_the_render_on_real_vocabularies(
    real_vocabs, tmp_path, open_service, case
):
    vocab, template_name = REAL_VOCAB_CASES[case]
    templates = template_corpus.reference_templates()
    template = templates.get(template_name) or _reference_case_template(template_name)
    model = real_vocab.real_vocab_model(
        tmp_path, real_vocab.vocab_file(real_vocabs, vocab), template
    )
    service = open_service(model)
    engine = service.engine
    end = engine.tokenize(engine.chat_format.footer)[0]
    assert engine.is_end_of_generation(end)
    _conv, node = service.new_conversation("Answer briefly.")
    for question, written in zip(
        QUESTIONS, ["Hello!", "  Schön 🌳  \n", "Done."], strict=True
    ):
        path = service.path(node)
        _through, prompt = engine.chat_format.prompt(
            system_of(path), [*turns_of(path), Message("user", question)]
        )
        engine.script = [*real_vocab.written_tokens(engine, prompt, written), end]
        reply = service.send(node, question, PARAMS)
        assert held_context(service.path(reply.assistant_node)) == _expected_context(
            service, reply.user_node
        )
        if node != path[0].id:  # the first reply decodes the new root once
            assert reply.stats.reprocessed_tokens == 0
        node = reply.assistant_node
