"""The cost of a grammar on sampling, on a large vocabulary: a reply
sampled free, and under a JSON schema, side by side. Arbor checks the
grammar on the token the chain chose and runs it over every candidate only
when it refuses that one (``app/backend/sampling.py``); the figures before
that change came from this script on the commit before it.

    python tools/grammar_speed.py --model GGUF [--tokens 64]

Gemma 3's 262,144-token vocabulary shows it (tests/helpers/gemma.py keeps a copy
under ~/.cache/arbor/models).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.backend.engine import LlamaEngine  # noqa: E402
from app.backend.grammars import json_constraint  # noqa: E402
from app.backend.settings import BackendSettings  # noqa: E402
from app.backend.values import SamplingParams  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "color": {"type": "string", "maxLength": 20},
        "age": {"type": "integer"},
    },
    "required": ["name", "color", "age"],
}


def main() -> None:
    """Sample both ways; print tokens, tok/s and sampling ms per token."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    engine = LlamaEngine(args.model, BackendSettings(n_ctx=2048, n_threads=2))
    prompt = engine.tokenize("Describe a cat as JSON.\n")
    params = SamplingParams(temperature=0.8, seed=1)
    print(f"model: {args.model.name}, vocabulary {engine.n_vocab:,}")
    for name, constraint in (("free", None), ("json_schema", json_constraint(SCHEMA))):
        engine.truncate(0)
        engine.decode(prompt)
        generated, sampling_s = 0, 0.0
        started = time.perf_counter()
        with engine.sampler(params, prompt, constraint) as sampler:
            for _ in range(args.tokens):
                before = time.perf_counter()
                token = engine.sample(sampler)
                sampling_s += time.perf_counter() - before
                if engine.is_end_of_generation(token):
                    break
                engine.decode([token], [1])
                generated += 1
        total = time.perf_counter() - started
        print(
            f"{name:>11}: {generated} tokens, {generated / total:5.1f} tok/s, "
            f"sampling {sampling_s / max(generated, 1) * 1000:6.2f} ms/token"
        )


if __name__ == "__main__":
    main()
