"""Speed with and without workers, side by side (issue 25).

For each placement (this machine alone, flash attention off and on; two
``arbor worker``s on 127.0.0.1, where flash attention is always on), one
process loads the model and measures:
reading a prompt (tokens/s), generating (tokens/s, greedy), capturing the
prompt's KV delta (the checkpoint a node stores) and applying it again on an
emptied context (a restore). Each measurement runs in a child process of its
own, as llama.cpp's RPC client may abort the process that uses it; the
workers are started here and stopped at the end.

    .venv/bin/python tools/worker_speed.py [--model GGUF] [--prompt 500] [--reply 64]

Loopback has no network latency: on a real network each round trip a
capture or a restore makes costs more (with flash attention off, the V cache
is read one row per round trip).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.platform.starter_model import starter_model_path  # noqa: E402
from tests.helpers.workers import free_ports, running_worker  # noqa: E402

REPEATS = 3

# What one measuring process runs: arguments are JSON on the command line.
MEASURE = """
import json, statistics, sys, time
from dataclasses import replace
from pathlib import Path
from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams

args = json.loads(sys.argv[1])
settings = BackendSettings(
    n_ctx=2048, n_threads=2, flash_attn=args["flash"], workers=tuple(args["workers"])
)
engine = LlamaEngine(Path(args["model"]), settings)
words = " ".join(f"item {i} of the list, then" for i in range(400))
prompt = engine.tokenize(words)[: args["prompt"]]
started = time.perf_counter()
engine.decode(prompt)
read_s = time.perf_counter() - started
captures, restores = [], []
for _ in range(args["repeats"]):
    started = time.perf_counter()
    delta = engine.capture(0, len(prompt))
    captures.append((time.perf_counter() - started) * 1000)
    engine.truncate(0)
    started = time.perf_counter()
    assert engine.restore(delta, 0, len(prompt))
    restores.append((time.perf_counter() - started) * 1000)
# A restore brings cells, not logits: the last prompt token is read again.
engine.truncate(len(prompt) - 1)
engine.decode([prompt[-1]])
sampler = engine.sampler(SamplingParams(temperature=0.0), list(prompt))
started = time.perf_counter()
for _ in range(args["reply"]):
    token = engine.sample(sampler)
    engine.decode([token])
generate_s = time.perf_counter() - started
print(json.dumps({
    "read_tps": len(prompt) / read_s,
    "generate_tps": args["reply"] / generate_s,
    "capture_ms": statistics.median(captures),
    "restore_ms": statistics.median(restores),
    "delta_bytes": len(delta),
    "placement": engine.info.placement,
}))
engine.close()
"""


def measure(
    model: Path, workers: list[str], flash: bool, prompt: int, reply: int
) -> dict:
    """One placement's figures, from a process of its own."""
    args = {
        "model": str(model),
        "workers": workers,
        "flash": flash,
        "prompt": prompt,
        "reply": reply,
        "repeats": REPEATS,
    }
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, json.dumps(args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"measuring failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    """Start two workers, measure every placement alternately, print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--prompt", type=int, default=500)
    parser.add_argument("--reply", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    model = (args.model or starter_model_path()).resolve()
    with ExitStack() as stack:
        addresses = []
        for port in free_ports(2):
            stack.enter_context(running_worker(f"127.0.0.1:{port}"))
            addresses.append(f"127.0.0.1:{port}")
        # With workers flash attention is always on (BackendSettings.
        # uses_flash_attn): a capture without it is one round trip per V row.
        cases = [
            ("this machine", [], False),
            ("this machine", [], True),
            ("2 workers", addresses, True),
        ]
        rows: dict[tuple[str, bool], list[dict]] = {}
        # Alternately, round after round: the machine's noise falls on all.
        for _round in range(args.rounds):
            for name, workers, flash in cases:
                figures = measure(model, workers, flash, args.prompt, args.reply)
                rows.setdefault((name, flash), []).append(figures)
    print(
        f"{model.name}, {args.prompt}-token prompt, {args.reply}-token reply, "
        f"2 threads, loopback; median of {args.rounds} rounds"
    )
    print(
        "| placement | flash attention | read tok/s | generate tok/s | "
        "capture ms | restore ms | delta MB |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for (name, flash), runs in rows.items():

        def med(key: str, runs: list[dict] = runs) -> float:
            return statistics.median(run[key] for run in runs)

        print(
            f"| {name} | {'on' if flash else 'off'} | {med('read_tps'):.0f} | "
            f"{med('generate_tps'):.1f} | {med('capture_ms'):.1f} | "
            f"{med('restore_ms'):.1f} | {med('delta_bytes') / 1e6:.1f} |"
        )
    print(f"(placement with workers: {rows[('2 workers', True)][0]['placement']})")


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"({time.perf_counter() - started:.0f} s)")
