"""Every reference template on real vocabularies: does the context hold
llama.cpp's tokens of the template's render?

For each of llama.cpp's reference templates (the llama-cpp-python sdist) and
each vocabulary named (``ggml-vocab-NAME.gguf`` from the same sdist, on a tiny
random-weight model, ``tests/helpers/real_vocab.py``), three rounds with and without
a system prompt go through the real service with a scripted sampler; after
each, the context held when the reply started is compared with llama.cpp's
tokenization of the whole render. Prints the pairs that differ and a count
per vocabulary. The scripted replies are the tokens of their text alone,
which a real model need not write; a mismatch after the first round can be
that, one in the first round cannot.

    PYTHONPATH=. .venv/bin/python tools/template_tokens.py llama-bpe llama-spm
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage.db import open_database
from tests.helpers import real_vocab, template_corpus
from tests.helpers.scripted import ScriptedEngine, held_context, rendered_context

PARAMS = SamplingParams(temperature=0, max_tokens=60)
ROUNDS = [
    ("Hello, who are you?", " I am a test model. "),
    ("Grüße aus Köln — 世界?", "Gut, danke!\n"),
    ("Third question", "Third answer."),
]


def main() -> None:
    """Run every template on every vocabulary named; print what differs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vocabularies", nargs="+", help="e.g. llama-bpe llama-spm")
    parser.add_argument("--n-ctx", type=int, default=8192)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        vocabs = real_vocab.extract_vocabs(folder / "vocabs")
        for name in args.vocabularies:
            vocab = real_vocab.vocab_file(vocabs, name)
            counts = {"same": 0, "differ": 0}
            for template, source in sorted(
                template_corpus.reference_templates().items()
            ):
                for system, rounds in _check(folder, vocab, source, args.n_ctx):
                    counts["differ" if rounds else "same"] += 1
                    if rounds:
                        print(f"{name} {template} system={system!r}: rounds {rounds}")
            print(
                f"{name}: {counts['same']} same, {counts['differ']} differ", flush=True
            )


def _check(
    folder: Path, vocab: Path, source: str, n_ctx: int
) -> list[tuple[str | None, list[int]]]:
    # Per system prompt: the rounds (1-based) whose context differs.
    model = real_vocab.real_vocab_model(folder, vocab, source)
    db = open_database(folder / f"{model.stem}.sqlite3")
    engine = ScriptedEngine(model, BackendSettings(n_ctx=n_ctx, n_threads=1))
    try:
        service = ConversationService(db, engine)
        eos = next(t for t in range(engine.n_vocab) if engine.is_end_of_generation(t))
        found = []
        for system in (None, "Be brief."):
            _conversation, node = service.new_conversation(system)
            differ = []
            for number, (question, answer) in enumerate(ROUNDS, 1):
                engine.script = [*engine.tokenize(answer), eos]
                reply = service.send(node, question, PARAMS)
                path = service.path(reply.assistant_node)
                if held_context(path) != rendered_context(engine, system, path):
                    differ.append(number)
                node = reply.assistant_node
            found.append((system, differ))
        return found
    finally:
        engine.close()
        db.close()


if __name__ == "__main__":
    main()
