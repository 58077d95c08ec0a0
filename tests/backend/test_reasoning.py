"""Reasoning formats and switches on llama.cpp's reference templates, and splitting.

The reference templates (``models/templates/*.jinja``, some 70 real models'
chat templates) are read straight from llama-cpp-python's sdist tarball
through ``tests.helpers.template_corpus`` and rendered with Arbor's ``ChatTemplate``
(llama.cpp's environment and polyfills; ``enable_thinking`` is true unless a
choice sets it). Streaming is checked against :func:`split_reply` for every
chunking of every sample, and on random texts built from each format's markers.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Any

import pytest

from app.backend import reasoning
from app.backend.chat_template import ChatTemplate
from app.backend.reasoning import (
    NO_REASONING,
    ReasoningFormat,
    ReasoningSplitter,
    reasoning_format,
    reasoning_switch,
    split_reply,
    starts_in_thinking,
)
from tests.helpers import template_corpus

# --- Reading and rendering the reference templates ---------------------------


@pytest.fixture(scope="module")
def templates() -> dict[str, str]:
    """Name (file stem) → source of every reference template."""
    found = template_corpus.reference_templates()
    assert len(found) >= 60, "the sdist lacks llama.cpp's reference templates"
    return found


@cache
def _template(source: str) -> ChatTemplate:
    return ChatTemplate(source)


def _render(
    source: str,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
    variables: dict[str, Any],
) -> str:
    # Rendered as Arbor renders them (llama.cpp's environment and polyfills).
    return _template(source).render(
        messages, add_generation_prompt=add_generation_prompt, **variables
    )


USER = [{"role": "user", "content": "What is 6 times 7?"}]
# llama.cpp always defines enable_thinking (true unless the request says).
BASE = {"enable_thinking": True}


def _generation_prompt(source: str, variables: dict[str, Any]) -> str:
    """What the template appends for ``add_generation_prompt``."""
    context = {**BASE, **variables}
    with_prompt = _render(source, USER, True, context)
    without = _render(source, USER, False, context)
    assert with_prompt.startswith(without)
    return with_prompt[len(without) :]


# --- Detection on the reference templates ------------------------------------

ON_OFF = ("on", "off")
# name → (format, (switch variable, choices, default) or None, and per choice
# (None: the template's default) whether its generation prompt opens the
# thinking block).
TABLE: dict[str, tuple[str, tuple[str, tuple[str, ...], str] | None, dict]] = {
    "Apertus-8B-Instruct": (
        "apertus-inner", ("enable_thinking", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
    "Apriel-1.6-15b-Thinker-fixed": ("apriel", None, {None: True}),
    "Bielik-11B-v3.0-Instruct": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "ByteDance-Seed-OSS": (
        "seed-think", ("thinking_budget", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
    "Cohere2MoE": (
        "cohere-thinking", ("reasoning", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "CohereForAI-c4ai-command-r-plus-tool_use": ("none", None, {None: False}),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": (
        "cohere-thinking", ("enable_thinking", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
    "GLM-4.6": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
    "GLM-4.7-Flash": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "GigaChat3-10B-A1.8B": ("none", None, {None: False}),
    "GigaChat3.1-10B-A1.8B": ("none", None, {None: False}),
    "HuggingFaceTB-SmolLM3-3B": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
    "Kimi-K2-Instruct": ("none", None, {None: False}),
    "Kimi-K2-Thinking": ("think-tags", None, {None: False}),
    "Kimi-K3": (
        "kimi-k3-sections", ("thinking", ("off", "low", "high", "max"), "max"),
        {None: True, "off": False, "low": True, "high": True, "max": True},
    ),
    "LFM2-8B-A1B": ("none", None, {None: False}),
    "LFM2.5-8B-A1B": ("think-tags", None, {None: False}),
    "LFM2.5-Instruct": ("think-tags", None, {None: False}),
    "MiMo-VL": ("none", None, {None: False}),
    "MiniMax-M1": ("none", None, {None: False}),
    "MiniMax-M2": ("think-tags", None, {None: True}),
    "MiniMax-M3": (
        "minimax-think", ("thinking_mode", ("auto", "on", "off"), "auto"),
        {None: False, "auto": False, "on": True, "off": False},
    ),
    "Mistral-Small-3.2-24B-Instruct-2506": ("none", None, {None: False}),
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    # Switched by /think and /no_think in the system prompt, not a variable.
    "NVIDIA-Nemotron-Nano-v2": ("think-tags", None, {None: True}),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("none", None, {None: False}),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("none", None, {None: False}),
    "Qwen-QwQ-32B": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "Qwen-Qwen2.5-7B-Instruct": ("none", None, {None: False}),
    "Qwen-Qwen3-0.6B": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
    "Qwen3-Coder": ("none", None, {None: False}),
    "Qwen3.5-4B": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "Reka-Edge": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "Spark2.5": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "StepFun3.5-Flash": ("think-tags", None, {None: True}),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("think-tags", None, {None: True}),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "deepseek-ai-DeepSeek-V3.1": (
        "think-tags", ("thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "deepseek-ai-DeepSeek-V3.2": (
        "think-tags", ("thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "deepseek-ai-DeepSeek-V4-Flash-0731": (
        "think-tags", ("thinking", ("off", "on", "high", "max"), "on"),
        {None: True, "off": False, "on": True, "high": True, "max": True},
    ),
    "deepseek-ai-DeepSeek-V4": (
        "think-tags", ("thinking", ("off", "on", "max"), "on"),
        {None: True, "off": False, "on": True, "max": True},
    ),
    "fireworks-ai-llama-3-firefunction-v2": ("none", None, {}),
    "google-gemma-2-2b-it": ("none", None, {None: False}),
    "google-gemma-4-31B-it-interleaved": (
        "gemma4-channel", ("enable_thinking", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
    "google-gemma-4-31B-it": (
        "gemma4-channel", ("enable_thinking", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
    "ibm-granite-granite-3.3-2B-Instruct": (
        "think-response-tags", ("thinking", ON_OFF, "off"),
        {None: False, "on": False, "off": False},
    ),
    "ibm-granite-granite-4.0": ("none", None, {None: False}),
    "ibm-granite-granite-4.1": ("none", None, {None: False}),
    "inclusionai-ling-3.0-flash": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "llama-cpp-deepseek-r1": ("think-tags", None, {None: True}),
    "llama-cpp-rwkv-world": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "meetkai-functionary-medium-v3.1": ("none", None, {None: False}),
    "meetkai-functionary-medium-v3.2": ("none", None, {None: False}),
    "meta-llama-Llama-3.1-8B-Instruct": ("none", None, {None: False}),
    "meta-llama-Llama-3.2-3B-Instruct": ("none", None, {None: False}),
    "meta-llama-Llama-3.3-70B-Instruct": ("none", None, {None: False}),
    "microsoft-Phi-3.5-mini-instruct": ("none", None, {None: False}),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("mistral-think", None, {None: False}),
    "mistralai-Mistral-Nemo-Instruct-2407": ("none", None, {None: False}),
    "moonshotai-Kimi-K2": ("none", None, {None: False}),
    "muse-glimmer": (
        "glimmer-channels", ("reasoning_strength", ("low", "medium", "high"), "high"),
        {None: False, "low": False, "medium": False, "high": False},
    ),
    "openai-gpt-oss-120b": (
        "harmony", ("reasoning_effort", ("low", "medium", "high"), "medium"),
        {None: False, "low": False, "medium": False, "high": False},
    ),
    "openbmb-MiniCPM5-1B": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "poolside-Laguna-S-2.1": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "poolside-Laguna-XS-2.1": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "poolside-Laguna-XS.2": (
        "think-tags", ("enable_thinking", ON_OFF, "on"),
        {None: True, "on": True, "off": False},
    ),
    "tencent-Hy3": (
        "hunyuan-think", ("reasoning_effort", ("off", "low", "high"), "off"),
        {None: False, "off": False, "low": True, "high": True},
    ),
    "unsloth-Apriel-1.5": ("apriel", None, {None: True}),
    "unsloth-mistral-Devstral-Small-2507": ("none", None, {None: False}),
    "upstage-Solar-Open-100B": (
        "solar-think", ("reasoning_effort", ON_OFF, "on"),
        {None: False, "on": False, "off": False},
    ),
}  # fmt: skip


def test_the_table_covers_every_reference_template(
    templates: dict[str, str],
) -> None:
    # A new template in a llama.cpp update must be looked at, not missed.
    assert sorted(templates) == sorted(TABLE)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_detects_format_and_switch(templates: dict[str, str], name: str) -> None:
    expected_format, expected_switch, _ = TABLE[name]
    source = templates[name]
    assert reasoning_format(source).name == expected_format
    switch = reasoning_switch(source)
    if expected_switch is None:
        assert switch is None
    else:
        assert switch is not None
        assert (switch.variable, switch.choices, switch.default) == expected_switch


@pytest.mark.parametrize("name", sorted(TABLE))
def test_generation_prompts_open_thinking_as_expected(
    templates: dict[str, str], name: str
) -> None:
    _, _, opens = TABLE[name]
    source = templates[name]
    fmt = reasoning_format(source)
    switch = reasoning_switch(source)
    for choice, expected in opens.items():
        variables = switch.variables(choice) if switch else {}
        prompt = _generation_prompt(source, variables)
        assert starts_in_thinking(fmt, prompt) is expected, (choice, prompt)


@pytest.mark.parametrize("name", sorted(n for n, row in TABLE.items() if row[1]))
def test_switch_choices_render_distinctly_and_default_is_right(
    templates: dict[str, str], name: str
) -> None:
    source = templates[name]
    switch = reasoning_switch(source)
    assert switch is not None
    renders = {
        choice: _render(source, USER, True, {**BASE, **switch.variables(choice)})
        for choice in switch.choices
    }
    # Every choice changes what the model sees...
    assert len(set(renders.values())) == len(switch.choices)
    # ...and passing nothing is the default choice.
    assert _render(source, USER, True, BASE) == renders[switch.default]
    assert switch.variables(None) == {}


def test_switch_refuses_unknown_choices() -> None:
    switch = reasoning_switch("{% if enable_thinking %}{% endif %}")
    assert switch is not None
    assert switch.variables("off") == {"enable_thinking": False}
    with pytest.raises(ValueError, match="maybe"):
        switch.variables("maybe")


def test_no_template_means_no_reasoning() -> None:
    assert reasoning_format(None) is NO_REASONING
    assert reasoning_format("") is NO_REASONING
    assert reasoning_switch(None) is None
    assert not NO_REASONING.has_reasoning
    assert NO_REASONING.markers == ()


# --- Splitting, per format ----------------------------------------------------

R = reasoning
# (format, in_thinking, reply, expected thinking, expected answer)
SPLITS: list[tuple[ReasoningFormat, bool, str, str, str]] = [
    # Qwen3-style: the model opens the block itself.
    (R.THINK_TAGS, False, "<think>\nI'm\nthinking\n</think>\n\nHello, world!",
     "I'm\nthinking", "Hello, world!"),
    # DeepSeek-R1: the prompt ended with "<think>\n".
    (R.THINK_TAGS, True, "I'm thinking\n</think>\n\nHello", "I'm thinking", "Hello"),
    # ... and a model repeating the opening marker is not shown.
    (R.THINK_TAGS, True, "<think>\nI'm thinking</think>Hi", "I'm thinking", "Hi"),
    # Stopped or out of tokens inside the thinking: all of it is thinking.
    (R.THINK_TAGS, False, "<think>\nunfinished thought\n", "unfinished thought", ""),
    (R.THINK_TAGS, True, "still going", "still going", ""),
    # Never opened: all answer, markers later on are plain text.
    (R.THINK_TAGS, False, "  Just <think>x</think> text\n", "",
     "Just <think>x</think> text\n"),
    # Empty thinking (enable_thinking=false in the model's own words).
    (R.THINK_TAGS, False, "<think>\n\n</think>\n\nHi", "", "Hi"),
    # A prompt that already holds "<think>" (GLM, Laguna): a stray close.
    (R.THINK_TAGS, False, "</think>Hello", "", "Hello"),
    (R.SEED_THINK, False, "<seed:think>Hmm.</seed:think>Answer.", "Hmm.", "Answer."),
    (R.MINIMAX_THINK, False, "<mm:think>\nHmm\n</mm:think>\nOK", "Hmm", "OK"),
    (R.MISTRAL_THINK, False, "[THINK]raisonnement[/THINK]Réponse",
     "raisonnement", "Réponse"),
    (R.APERTUS_INNER, False, "<|inner_prefix|>plan<|inner_suffix|>Done.",
     "plan", "Done."),
    (R.THINK_RESPONSE_TAGS, False,
     "<think>I'm thinking</think><response>Hello</response>", "I'm thinking", "Hello"),
    (R.THINK_RESPONSE_TAGS, False, "<think>T</think>Plain", "T", "Plain"),
    (R.COHERE_THINKING, True,
     "I'm\nthinking<|END_THINKING|><|START_TEXT|>Hello, world!<|END_TEXT|>",
     "I'm\nthinking", "Hello, world!"),
    (R.COHERE_THINKING, False,
     "<|START_THINKING|>Plan<|END_THINKING|><|START_RESPONSE|>Hi<|END_RESPONSE|>",
     "Plan", "Hi"),
    (R.GEMMA4_CHANNEL, False,
     "<|channel>thought\nLet me see<channel|>Answer here", "Let me see", "Answer here"),
    # Gemma 4 may append an empty thought block, or a stray closer.
    (R.GEMMA4_CHANNEL, False, "Answer<|channel>thought\n<channel|>", "", "Answer"),
    (R.GEMMA4_CHANNEL, False, "Answer<channel|>", "", "Answer"),
    (R.GEMMA4_CHANNEL, False,
     "<|channel>thought\nA<channel|>One<|channel>thought\nB<channel|>Two",
     "A\n\nB", "One\n\nTwo"),
    (R.SOLAR_THINK, False,
     "<|think|>reason<|end|><|begin|>assistant<|content|>Answer<|end|>",
     "reason", "Answer"),
    (R.KIMI_K3_SECTIONS, True,
     "I'm thinking<|close|>think<|sep|><|open|>response<|sep|>Hello"
     "<|close|>response<|sep|><|open|>tools<|sep|>call<|close|>message<|sep|>"
     "<|end_of_msg|>", "I'm thinking", "Hello"),
    # Kimi K3 skipping the thinking closer: the response opener ends it.
    (R.KIMI_K3_SECTIONS, True, "Hmm<|open|>response<|sep|>Yes", "Hmm", "Yes"),
    (R.KIMI_K3_SECTIONS, False, "<|open|>response<|sep|>Direct", "", "Direct"),
    (R.APRIEL, False,
     "I'm\nthinking\n[BEGIN FINAL RESPONSE]\nHello, world!\n[END FINAL RESPONSE]",
     "I'm\nthinking", "Hello, world!\n"),
    (R.APRIEL, False, "Thinking, then stopped", "Thinking, then stopped", ""),
    (R.HARMONY, False,
     "<|channel|>analysis<|message|>Think hard<|end|>"
     "<|start|>assistant<|channel|>final<|message|>The answer<|return|>",
     "Think hard", "The answer"),
    # Several analysis messages, a preamble, and a tool call (thinking).
    (R.HARMONY, False,
     "<|channel|>analysis<|message|>First<|end|>"
     "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
     '<|start|>assistant to=functions.f<|channel|>commentary <|constrain|>json'
     '<|message|>{"a": 1}<|call|>'
     "<|start|>assistant<|channel|>analysis<|message|>Second<|end|>"
     "<|start|>assistant<|channel|>final<|message|>Done<|return|>",
     'First\n\n{"a": 1}\n\nSecond', "Let me check.\n\nDone"),
    (R.HARMONY, False, "<|channel|>analysis<|message|>cut off", "cut off", ""),
    (R.HARMONY, False, "<|channel|>final<|message|>Hi \n<|return|>", "", "Hi \n"),
    # A header cut off before <|message|> shows nothing.
    (R.HARMONY, False, "<|channel|>analys", "", ""),
    # A model ignoring the format: its text is the answer.
    (R.HARMONY, False, "plain text without header", "", "plain text without header"),
    (R.HARMONY, False, "x" * 300 + "<|message|>y", "", "x" * 300 + "<|message|>y"),
    (R.HARMONY, True, "more thought<|end|><|start|>assistant<|channel|>final"
     "<|message|>Yes", "more thought", "Yes"),
    (R.GLIMMER, False,
     " to=self<|message|>I could use it here<|eom|>"
     "<|start|>assistant to=user<|message|>Hello!<|eot|>",
     "I could use it here", "Hello!"),
    (R.GLIMMER, False, "<|message|>Direct answer<|eot|>", "", "Direct answer"),
    # No reasoning format: text passes through untouched.
    (NO_REASONING, False, "  <think>x</think> hi \n", "", "  <think>x</think> hi \n"),
    (NO_REASONING, True, " plain", "", " plain"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "in_thinking", "text", "thinking", "answer"),
    SPLITS,
    ids=[f"{row[0].name}-{i}" for i, row in enumerate(SPLITS)],
)
def test_split_reply(
    fmt: ReasoningFormat, in_thinking: bool, text: str, thinking: str, answer: str
) -> None:
    assert split_reply(fmt, text, in_thinking) == (thinking, answer)


def _stream(
    fmt: ReasoningFormat,
    in_thinking: bool,
    tokens: list[tuple[str, bool]],
) -> tuple[ReasoningSplitter, list[tuple[str, str]]]:
    splitter = ReasoningSplitter(fmt, in_thinking)
    pieces: list[tuple[str, str]] = []
    for text, special in tokens:
        pieces += splitter.push(text, special)
    pieces += splitter.flush()
    return splitter, pieces


def _shown(pieces: list[tuple[str, str]], kind: str) -> str:
    assert all(text for _, text in pieces), "empty pieces are not sent"
    return "".join(text for k, text in pieces if k == kind)


def _random_chunks(text: str, rng: random.Random) -> list[str]:
    chunks, i = [], 0
    while i < len(text):
        n = rng.randint(1, 12)
        chunks.append(text[i : i + n])
        i += n
    return chunks


def _chunkings(text: str, rng: random.Random) -> list[list[str]]:
    """The text char by char, and in random chunks of up to 12 characters."""
    return [list(text), *(_random_chunks(text, rng) for _ in range(40))]


@pytest.mark.parametrize(
    ("fmt", "in_thinking", "text", "thinking", "answer"),
    SPLITS,
    ids=[f"{row[0].name}-{i}" for i, row in enumerate(SPLITS)],
)
def test_any_chunking_streams_the_same_split(
    fmt: ReasoningFormat, in_thinking: bool, text: str, thinking: str, answer: str
) -> None:
    rng = random.Random(text)
    for chunks in _chunkings(text, rng):
        splitter, pieces = _stream(fmt, in_thinking, [(c, False) for c in chunks])
        assert (splitter.thinking, splitter.answer) == (thinking, answer), chunks
        # What was shown, piece by piece, is exactly the final split.
        assert (_shown(pieces, "thinking"), _shown(pieces, "answer")) == (
            thinking,
            answer,
        )


FORMATS = [
    NO_REASONING, R.THINK_TAGS, R.THINK_RESPONSE_TAGS, R.SEED_THINK,
    R.MINIMAX_THINK, R.MISTRAL_THINK, R.APERTUS_INNER, R.COHERE_THINKING,
    R.GEMMA4_CHANNEL, R.SOLAR_THINK, R.KIMI_K3_SECTIONS, R.APRIEL, R.HARMONY,
    R.GLIMMER, reasoning_format("{% set HYTK = ':x' %}'<think{}>'"),
]  # fmt: skip


@pytest.mark.parametrize("fmt", FORMATS, ids=[f.name for f in FORMATS])
def test_random_texts_stream_like_the_whole(fmt: ReasoningFormat) -> None:
    # Texts made of markers, pieces of markers and filler: where splits go
    # wrong if anything depends on where tokens end.
    pieces = [m[:k] for m in fmt.markers for k in range(1, len(m) + 1)]
    filler = ["a", "b c", " ", "\n", "<", "|", " to=self", "<|channel|>analysis"]
    rng = random.Random(fmt.name)
    for _ in range(300):
        parts = [rng.choice(pieces + filler) for _ in range(rng.randint(0, 12))]
        text = "".join(parts)
        in_thinking = rng.random() < 0.3
        whole = split_reply(fmt, text, in_thinking)
        for chunks in (list(text), _random_chunks(text, rng), parts):
            tokens = [(c, False) for c in chunks]
            splitter, shown = _stream(fmt, in_thinking, tokens)
            assert (splitter.thinking, splitter.answer) == whole, (text, chunks)
            assert (_shown(shown, "thinking"), _shown(shown, "answer")) == whole


def test_markers_are_held_back_until_resolved() -> None:
    splitter = ReasoningSplitter(R.THINK_TAGS, in_thinking=True)
    assert splitter.push("Hmm </thi") == [("thinking", "Hmm")]
    assert splitter.push("nk>\n\nYes") == [("answer", "Yes")]
    splitter = ReasoningSplitter(R.THINK_TAGS, in_thinking=True)
    assert splitter.push("a </thi") == [("thinking", "a")]
    # Not a marker after all: the held text is thinking.
    assert splitter.push("s is") == [("thinking", " </this is")]
    assert splitter.flush() == []
    assert splitter.thinking == "a </this is"


def test_trailing_whitespace_waits_and_answer_keeps_it_at_the_end() -> None:
    splitter = ReasoningSplitter(R.THINK_TAGS, in_thinking=True)
    assert splitter.push("thought \n") == [("thinking", "thought")]
    assert splitter.push("</think>\n\nAnswer \n") == [("answer", "Answer")]
    assert splitter.flush() == [("answer", " \n")]
    assert (splitter.thinking, splitter.answer) == ("thought", "Answer \n")


# Real token sequences, with the special flag as tokenizers report it.
Tokens = list[tuple[str, bool]]
SPECIAL_STREAMS: list[tuple[ReasoningFormat, bool, Tokens, str, str]] = [
    (R.HARMONY, False, [
        ("<|channel|>", True), ("analysis", False), ("<|message|>", True),
        ("User", False), (" asks", False), ("<|end|>", True), ("<|start|>", True),
        ("assistant", False), ("<|channel|>", True), ("final", False),
        ("<|message|>", True), ("42", False), ("<|return|>", True),
    ], "User asks", "42"),
    (R.THINK_TAGS, False, [
        ("<think>", True), ("\n", False), ("Hm", False), ("<|im_end|>", True),
        ("m", False), ("\n", False), ("</think>", True), ("\n\n", False),
        ("Yes", False), ("<|im_end|>", True),
    ], "Hmm", "Yes"),
    (R.GEMMA4_CHANNEL, False, [
        ("<|channel>", True), ("thought", False), ("\n", False), ("Plan", False),
        ("<channel|>", True), ("Done", False), ("<turn|>", True),
    ], "Plan", "Done"),
    (R.KIMI_K3_SECTIONS, True, [
        ("ok", False), ("<|close|>", True), ("think", False), ("<|sep|>", True),
        ("<|open|>", True), ("response", False), ("<|sep|>", True), ("Hi", False),
        ("<|close|>", True), ("response", False), ("<|sep|>", True),
        ("<|close|>", True), ("message", False), ("<|sep|>", True),
        ("<|end_of_msg|>", True),
    ], "ok", "Hi"),
    # A special token that is not a marker is never shown, wherever it lands.
    (NO_REASONING, False, [("Hi", False), ("<|eot_id|>", True)], "", "Hi"),
    (R.THINK_TAGS, False, [("<", False), ("<|x|>", True), ("b>", False)], "", "<b>"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("fmt", "in_thinking", "tokens", "thinking", "answer"),
    SPECIAL_STREAMS,
    ids=[f"{row[0].name}-{i}" for i, row in enumerate(SPECIAL_STREAMS)],
)
def test_special_tokens_count_for_markers_but_never_show(
    fmt: ReasoningFormat,
    in_thinking: bool,
    tokens: list[tuple[str, bool]],
    thinking: str,
    answer: str,
) -> None:
    splitter, pieces = _stream(fmt, in_thinking, tokens)
    assert (splitter.thinking, splitter.answer) == (thinking, answer)
    assert (_shown(pieces, "thinking"), _shown(pieces, "answer")) == (thinking, answer)


def test_starts_in_thinking_reads_only_the_last_block() -> None:
    assert starts_in_thinking(R.THINK_TAGS, "<|im_start|>assistant\n<think>\n")
    assert not starts_in_thinking(
        R.THINK_TAGS, "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert not starts_in_thinking(R.THINK_TAGS, "<|im_start|>assistant\n")
    assert starts_in_thinking(R.APRIEL, "<|assistant|>\n")
    assert not starts_in_thinking(R.HARMONY, "<|start|>assistant")
    assert starts_in_thinking(
        R.HARMONY, "<|start|>assistant<|channel|>analysis<|message|>"
    )
    assert not starts_in_thinking(NO_REASONING, "<think>")
    # History re-rendered before the prompt: its closed block does not count.
    assert starts_in_thinking(
        R.THINK_TAGS, "<think>a</think>b<|im_end|><|im_start|>assistant\n<think>\n"
    )
    assert starts_in_thinking(
        R.HARMONY,
        "<|start|>assistant<|channel|>final<|message|>Hi<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>",
    )


# --- The split re-renders to what the model generated -------------------------


@pytest.mark.parametrize(
    ("name", "variables", "generated"),
    [
        # Thinking on: the model opens the block itself.
        (
            "Qwen-Qwen3-0.6B",
            {},
            "<think>\nSix times seven.\nThat is 42.\n</think>\n\nThe answer is 42.",
        ),
        # Thinking off: the prompt holds an empty block.
        ("Qwen-Qwen3-0.6B", {"enable_thinking": False}, "The answer is 42."),
        # The prompt opens the block ("<think>\n"); the reply starts inside it.
        ("Qwen3.5-4B", {}, "Six times seven.\n</think>\n\nThe answer is **42**."),
        ("Qwen3.5-4B", {"enable_thinking": False}, "42"),
    ],
)
def test_split_rerenders_to_the_generated_text(
    templates: dict[str, str], name: str, variables: dict[str, Any], generated: str
) -> None:
    source = templates[name]
    fmt = reasoning_format(source)
    header = _generation_prompt(source, variables)
    in_thinking = starts_in_thinking(fmt, header)
    thinking, answer = split_reply(fmt, generated, in_thinking)
    # Streaming character by character gives the same split.
    splitter, _ = _stream(fmt, in_thinking, [(c, False) for c in generated])
    assert (splitter.thinking, splitter.answer) == (thinking, answer)
    assistant = {"role": "assistant", "content": answer, "reasoning_content": thinking}
    history = _render(source, [*USER, assistant], False, {**BASE, **variables})
    through_user = _render(source, USER, False, {**BASE, **variables})
    assert history.startswith(through_user)
    assert history[len(through_user) :].startswith(header + generated + "<|im_end|>")
