"""Flash attention on and off, side by side, on the CPU: speed, checkpoints, exactness.

Loads the model twice in one process (flash attention off and on) and
alternates the two on the same work, so that a busy machine slows both alike:

- prefill: a ~2,000-token prompt decoded from an empty context;
- generation: 64 greedy tokens after it, one decode call each;
- checkpoints: the prompt captured as 20 deltas, their bytes, and a restore of
  all 20 into an emptied context (what a cold resume does in llama.cpp);
- exactness: one more token decoded after the restore must give logits equal,
  bit for bit, to the same token decoded after the prompt itself.

Prints a Markdown table of medians::

    .venv/bin/python tools/flash_attention.py [--model PATH] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from app.backend.engine import LlamaEngine  # noqa: E402
from app.backend.settings import BackendSettings  # noqa: E402
from app.platform.starter_model import starter_model_path  # noqa: E402

PROMPT_TOKENS = 2000
DELTAS = 20
GENERATED = 64
TEXT = (
    "A conversation is a tree: every message can branch, and every branch keeps "
    "the model's memory of the words before it, so that going back costs nothing. "
)


def _prompt(engine: LlamaEngine) -> list[int]:
    tokens: list[int] = []
    while len(tokens) < PROMPT_TOKENS:
        tokens += engine.tokenize(TEXT)
    return tokens[:PROMPT_TOKENS]


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def one_round(engine: LlamaEngine, prompt: list[int]) -> dict[str, float]:
    """Measure one pass of every row on ``engine``; assert exactness."""
    figures: dict[str, float] = {}
    step = len(prompt) // DELTAS
    bounds = [
        (i * step, len(prompt) if i == DELTAS - 1 else (i + 1) * step)
        for i in range(DELTAS)
    ]

    engine.truncate(0)
    started = time.perf_counter()
    engine.decode(prompt)
    figures["prefill_ms"] = _ms(started)

    # Deltas, as the service makes them: decode a span, capture it.
    engine.truncate(0)
    deltas: list[bytes] = []
    capture_ms = 0.0
    for start, end in bounds:
        engine.decode(prompt[start:end])
        started = time.perf_counter()
        deltas.append(engine.capture(start, end))
        capture_ms += _ms(started)
    figures["capture_ms"] = capture_ms
    figures["checkpoint_mib"] = sum(map(len, deltas)) / 2**20
    # One more token on top: its logits read every cell of the context.
    probe = prompt[:1]
    engine.decode(probe)
    reprocessed = engine.logits()

    engine.truncate(0)
    started = time.perf_counter()
    for (start, end), data in zip(bounds, deltas, strict=True):
        if not engine.restore(data, start, end):
            raise SystemExit(f"restore refused the delta {start}-{end}")
    figures["restore_ms"] = _ms(started)
    engine.decode(probe)
    restored = engine.logits()
    figures["exact"] = float(np.array_equal(restored, reprocessed))

    started = time.perf_counter()
    token = int(np.argmax(restored))
    for _ in range(GENERATED):
        engine.decode([token])
        token = int(np.argmax(engine.logits()))
    figures["generate_tok_s"] = GENERATED / (_ms(started) / 1000)
    return figures


def main() -> int:
    """Run the comparison and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    model = args.model or starter_model_path()
    engines = {
        flash: LlamaEngine(
            model,
            BackendSettings(n_ctx=4096, flash_attn=flash, n_threads=args.threads),
        )
        for flash in (False, True)
    }
    prompt = _prompt(engines[False])
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for round_index in range(args.rounds):
        order = (False, True) if round_index % 2 == 0 else (True, False)
        for flash in order:
            results[flash].append(one_round(engines[flash], prompt))
    rows = [
        ("prefill of 2,000 tokens (ms)", "prefill_ms", "{:.0f}"),
        ("generation (tokens/s)", "generate_tok_s", "{:.1f}"),
        ("capture of 20 deltas (ms)", "capture_ms", "{:.1f}"),
        ("restore of 20 deltas (ms)", "restore_ms", "{:.1f}"),
        ("checkpoint size (MiB)", "checkpoint_mib", "{:.1f}"),
    ]
    print(
        f"Model: {model.name}; threads {engines[False].settings.threads}; "
        f"{args.rounds} rounds, medians\n"
    )
    print("| | flash attention off | on | on / off |")
    print("|---|---:|---:|---:|")
    for label, key, fmt in rows:
        off = statistics.median(r[key] for r in results[False])
        on = statistics.median(r[key] for r in results[True])
        print(f"| {label} | {fmt.format(off)} | {fmt.format(on)} | {on / off:.2f} |")
    for flash in (False, True):
        exact = all(r["exact"] for r in results[flash])
        state = "on" if flash else "off"
        print(
            f"\nFlash attention {state}: restored logits bit-identical to "
            f"reprocessing in every round: {exact}"
        )
    for engine in engines.values():
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
