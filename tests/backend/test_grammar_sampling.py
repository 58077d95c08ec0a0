"""Grammars on the tiny random-weight model: whatever the weights, a reply
sampled under a tool-call grammar is a call that parses and whose arguments
validate, a ``response_format`` reply is JSON of its schema, and a lazy
("auto") grammar leaves a reply alone until its trigger."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from app.backend.chat_template import ChatTemplate
from app.backend.engine import LlamaEngine
from app.backend.grammars import json_constraint
from app.backend.sampling import Sampler
from app.backend.settings import BackendSettings
from app.backend.tool_calls import Constraint, GrammarError
from app.backend.tool_syntax import GENERIC, ToolSyntax, learn_tool_syntax
from app.backend.values import SamplingParams
from tests.helpers.template_corpus import reference_templates

# Bounded strings (enum, maxLength) so that a random model ends within
# MAX_TOKENS: a free string only ends when it happens to sample a quote.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "enum": ["Paris", "Oslo", "Lima"]},
                    "days": {"type": "integer"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "set_mode",
            "parameters": {
                "type": "object",
                "properties": {
                    "mode": {"type": "string", "maxLength": 6},
                    "on": {"type": "boolean"},
                    "level": {"type": "number"},
                },
                "required": ["mode", "on"],
            },
        },
    },
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MAX_TOKENS = 300
SEEDS = (1, 2, 3)
PROMPT = "<|im_start|>user\nDo something<|im_end|>\n<|im_start|>assistant\n"

FAMILIES = [
    "Qwen-Qwen2.5-7B-Instruct",  # <tool_call> JSON
    "Qwen3-Coder",  # XML parameters
    "meta-llama-Llama-3.1-8B-Instruct",  # bare JSON
    "mistralai-Mistral-Nemo-Instruct-2407",  # JSON list with ids
    "Mistral-Small-3.2-24B-Instruct-2506",  # name[CALL_ID]id[ARGS]
    "openai-gpt-oss-120b",  # harmony header
    "deepseek-ai-DeepSeek-V3.1",  # full-width markers
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use",  # numbered JSON list
    "meetkai-functionary-medium-v3.2",  # bare name, then JSON
    "generic",
]


@pytest.fixture(scope="module")
def engine(tiny_model: Path) -> Iterator[LlamaEngine]:
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=1024, n_batch=64)) as loaded:
        yield loaded


def _syntax(name: str) -> ToolSyntax:
    if name == "generic":
        return GENERIC
    return learn_tool_syntax(ChatTemplate(reference_templates()[name], "<s>", "</s>"))


def _params(seed: int) -> SamplingParams:
    # Temperature 1 and no truncation: every token the grammar allows may come.
    return SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)


def _generate(
    engine: LlamaEngine,
    constraint: Constraint | None,
    seed: int,
    forced: str = "",
    limit: int = MAX_TOKENS,
) -> tuple[str, bool]:
    """Sample a reply to PROMPT; return its text and whether the model ended it."""
    engine.truncate(0)
    prompt = engine.tokenize(PROMPT, add_bos=True)
    engine.decode(prompt)
    tokens: list[int] = []
    with engine.sampler(_params(seed), prompt, constraint) as sampler:
        for token in engine.tokenize(forced) if forced else []:
            sampler.accept(token)
            tokens.append(token)
            engine.decode([token])
        for _ in range(limit):
            token = engine.sample(sampler)
            if engine.is_end_of_generation(token):
                return _text(engine, tokens), True
            tokens.append(token)
            engine.decode([token])
    return _text(engine, tokens), False


def _text(engine: LlamaEngine, tokens: list[int]) -> str:
    # The random byte-level model can write byte runs that llama.cpp's
    # grammar reads as one character but that are not UTF-8 (code points past
    # U+10FFFF): "replace" would make one character several and break
    # maxLength. A real vocabulary has no such tokens; they are dropped here.
    data = b"".join(engine.token_bytes(t, special=True) for t in tokens)
    return data.decode("utf-8", errors="ignore")


def _valid_calls(syntax: ToolSyntax, text: str) -> list[tuple[str, dict[str, Any]]]:
    parsed = syntax.parse(text, TOOLS)
    calls = [(c.name, json.loads(c.arguments)) for c in parsed.calls]
    for name, arguments in calls:
        jsonschema.validate(arguments, SCHEMAS[name])
    return calls


@pytest.mark.parametrize("family", FAMILIES)
def test_a_required_call_parses_and_validates(engine, family):
    syntax = _syntax(family)
    constraint = syntax.constraint(TOOLS, "required", parallel=False)
    assert constraint.triggers == ()
    for seed in SEEDS:
        text, ended = _generate(engine, constraint, seed)
        assert ended, text  # the grammar ended; only end-of-generation was left
        calls = _valid_calls(syntax, text)
        assert len(calls) == 1, text
        assert syntax.parse(text, TOOLS).content == ""


@pytest.mark.parametrize("family", FAMILIES)
def test_a_named_call_is_that_function(engine, family):
    syntax = _syntax(family)
    constraint = syntax.constraint(TOOLS, "set_mode", parallel=False)
    for seed in SEEDS:
        text, ended = _generate(engine, constraint, seed)
        assert ended, text
        assert [name for name, _ in _valid_calls(syntax, text)] == ["set_mode"]


def test_parallel_calls_all_validate(engine):
    syntax = _syntax("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use")
    constraint = syntax.constraint(TOOLS, "required", parallel=True)
    counts = set()
    for seed in range(1, 25):
        text, ended = _generate(engine, constraint, seed, limit=600)
        if ended:
            counts.add(len(_valid_calls(syntax, text)))
    assert min(counts) >= 1
    assert max(counts) > 1  # the random model went on to a second call


def test_a_required_reply_may_be_preceded_by_fixed_text(engine):
    syntax = _syntax("Qwen-Qwen2.5-7B-Instruct")
    constraint = syntax.constraint(
        TOOLS, "required", parallel=False, prefix="</think>\n\n"
    )
    text, ended = _generate(engine, constraint, 1)
    assert ended and text.startswith("</think>\n\n<tool_call>\n")
    assert len(_valid_calls(syntax, text)) == 1


SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no"]},
        "score": {"type": "integer"},
        "note": {"type": "string", "maxLength": 8},
        "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
        "where": {"$ref": "#/$defs/place"},
    },
    "required": ["answer", "score", "where"],
    "$defs": {
        "place": {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
        }
    },
}


def test_a_json_schema_reply_validates(engine):
    constraint = json_constraint(SCHEMA)
    for seed in SEEDS:
        text, ended = _generate(engine, constraint, seed)
        assert ended, text
        # strict=False: raw control characters in strings, as the grammar allows.
        jsonschema.validate(json.loads(text, strict=False), SCHEMA)


def test_a_json_object_reply_is_an_object(engine):
    constraint = json_constraint(None)
    # Free JSON is unbounded: a random model may run on; what it wrote is
    # still the start of an object, and the grammar compiled.
    text, _ended = _generate(engine, constraint, 1, limit=40)
    assert text.startswith("{")


# --- Lazy ("auto") grammars ---------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
def test_auto_leaves_text_without_the_trigger_free(engine, family):
    constraint = _syntax(family).constraint(TOOLS, "auto", parallel=True)
    assert constraint.triggers
    free, _ = _generate(engine, None, 7, limit=60)
    lazy, _ = _generate(engine, constraint, 7, limit=60)
    # Not one token differs: a grammar awaiting its trigger masks nothing.
    assert lazy == free


@pytest.mark.parametrize(
    ("family", "opening"),
    [
        ("Qwen-Qwen2.5-7B-Instruct", "Let me see. <tool_call>"),
        ("Qwen3-Coder", "<tool_call>"),
        ("meta-llama-Llama-3.1-8B-Instruct", '{"name": "'),
        ("meta-llama-Llama-3.1-8B-Instruct", "<|python_tag|>"),
        ("Mistral-Small-3.2-24B-Instruct-2506", "[TOOL_CALLS]"),
        ("openai-gpt-oss-120b", "<|start|>assistant to=functions."),
        ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "<|START_ACTION|>"),
        ("meetkai-functionary-medium-v3.1", "<function="),
        ("meetkai-functionary-medium-v3.2", "set_mode"),
        ("generic", '{"tool_call"'),
    ],
)
def test_auto_constrains_from_the_trigger_on(engine, family, opening):
    syntax = _syntax(family)
    constraint = syntax.constraint(TOOLS, "auto", parallel=False)
    for seed in SEEDS:
        # The tiny model never writes the opening itself: it is forced, token
        # by token, as if sampled; the grammar takes over where it completes.
        text, ended = _generate(engine, constraint, seed, forced=opening)
        assert ended, text
        assert len(_valid_calls(syntax, text)) == 1, text


# --- Errors instead of aborts ---------------------------------------------------


def test_a_grammar_llama_cpp_refuses_is_a_clear_error(engine):
    with pytest.raises(GrammarError, match="refused the grammar"):
        engine.sampler(_params(1), [], Constraint("root ::= undefined-rule"))
    with pytest.raises(GrammarError, match="needs the model's vocabulary"):
        Sampler(_params(1), [], engine.n_vocab, None, Constraint('root ::= "a"'))


def test_a_schema_or_choice_that_cannot_be_met_is_a_clear_error():
    syntax = _syntax("Qwen-Qwen2.5-7B-Instruct")
    with pytest.raises(GrammarError, match="not among the tools"):
        syntax.constraint(TOOLS, "no_such_tool")
    with pytest.raises(GrammarError, match="no function tools"):
        syntax.constraint([], "required")
    bad = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"$ref": "#/nope"}},
        }
    ]
    with pytest.raises(GrammarError, match="cannot become a grammar"):
        syntax.constraint(bad, "required")
    with pytest.raises(GrammarError):
        json_constraint({"type": "object", "properties": {"a": {"$ref": "#/x"}}})
    assert isinstance(GrammarError("x"), ValueError)


def test_forcing_a_token_the_grammar_refuses_raises_instead_of_aborting(engine):
    engine.truncate(0)
    prompt = engine.tokenize(PROMPT, add_bos=True)
    engine.decode(prompt)
    constraint = json_constraint(SCHEMA)
    with engine.sampler(_params(1), prompt, constraint) as sampler:
        (x,) = engine.tokenize("x")
        (brace,) = engine.tokenize("{")
        assert not sampler.allows(x)
        with pytest.raises(GrammarError):
            sampler.accept(x)
        assert sampler.allows(brace)
        sampler.accept(brace)


def test_the_context_primes_the_penalty_not_the_grammar(engine):
    # The history is the prompt's tokens, which no grammar allows: priming
    # them into the grammar would abort the process.
    history = engine.tokenize(PROMPT * 3, add_bos=True)
    params = SamplingParams(temperature=1.0, seed=5, repeat_penalty=1.3)
    with engine.sampler(params, history, json_constraint(SCHEMA)) as sampler:
        assert sampler.allows(engine.tokenize("{")[0])


RICH_TOOLS = [
    *TOOLS,
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "text": {"type": "string"},
                    "lines": {"type": "array", "items": {"$ref": "#/$defs/span"}},
                    "mode": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                },
                "required": ["path", "text"],
                "$defs": {
                    "span": {
                        "type": "object",
                        "properties": {"from": {"type": "integer"}},
                    }
                },
            },
        },
    },
    {"type": "function", "function": {"name": "ping"}},  # no parameters at all
]


def test_every_reference_template_gets_grammars_llama_cpp_compiles(engine):
    learned = {}
    for name, source in sorted(reference_templates().items()):
        try:
            template = ChatTemplate(source, "<s>", "</s>")
        except ValueError:
            continue  # a template this renderer cannot parse is tested elsewhere
        syntax = learn_tool_syntax(template)
        learned[name] = syntax.kind
        for choice in ("required", "auto", "write_file"):
            constraint = syntax.constraint(RICH_TOOLS, choice, parallel=True)
            engine.sampler(_params(1), [], constraint).close()
    assert sum(kind == "native" for kind in learned.values()) > 50


def test_a_json_string_holds_no_raw_control_character(engine):
    # JSON's strings take a line break escaped only (json.loads refuses a raw
    # one); a small model once ran a "string" past its object's end so.
    constraint = json_constraint(None)
    with engine.sampler(SamplingParams(temperature=0), [], constraint) as sampler:
        for token in engine.tokenize('{"a": "x'):
            sampler.accept(token)
        (newline,) = engine.tokenize("\n")
        (tab,) = engine.tokenize("\t")
        (letter,) = engine.tokenize("y")
        assert not sampler.allows(newline) and not sampler.allows(tab)
        assert sampler.allows(letter)
