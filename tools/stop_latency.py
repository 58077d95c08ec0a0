"""How soon Stop takes effect while a long prompt is read.

A prompt is decoded in batches of the engine's ``prompt_step`` tokens (at
most ``n_batch``) and one llama_decode cannot be broken, so Stop is checked
between batches (``decode_watch``): the wait after Stop should be at most
one batch's time. This measures it on a real model: a prompt of
``--tokens`` tokens is read once in full (the time per batch, the tokens
per second), then read again several times with Stop asked at a random
moment from another thread, as the window's Stop button does; the latency
is from Stop to the decode's return. ``--compare`` does it for batches of
``n_batch`` too, side by side: what the smaller step costs in speed.

Run: ``python tools/stop_latency.py [MODEL] [--tokens N] [--runs N]
[--compare]`` (the starter model by default).
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import threading
import time
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.errors import BackendError, Interrupted
from app.backend.settings import BackendSettings
from app.platform.starter_model import starter_model_path

SENTENCE = "the quick brown fox jumps over the lazy dog while a river runs by"


def prompt_tokens(engine: LlamaEngine, n_tokens: int) -> list[int]:
    """About ``n_tokens`` tokens of plain English words."""
    tokens: list[int] = []
    while len(tokens) < n_tokens:
        tokens += engine.tokenize(" " + SENTENCE)
    return tokens[:n_tokens]


def read_in_full(engine: LlamaEngine, tokens: list[int]) -> list[float]:
    """Decode ``tokens`` from an empty context; the milliseconds of each batch
    (the time between two progress reports: later batches attend to more
    tokens, and take longer)."""
    marks: list[float] = []

    def watch(_done: int, _total: int) -> bool:
        marks.append(time.perf_counter())
        return True

    engine.truncate(0)
    engine.decode_watch = watch
    engine.decode(tokens)
    engine.decode_watch = None
    return [(b - a) * 1000 for a, b in itertools.pairwise(marks)]


def stop_latency(engine: LlamaEngine, tokens: list[int], after_ms: float) -> float:
    """Decode ``tokens``, ask Stop after ``after_ms``; ms from Stop to return."""
    stop = threading.Event()
    asked_at = 0.0

    def ask() -> None:
        nonlocal asked_at
        asked_at = time.perf_counter()
        stop.set()

    timer = threading.Timer(after_ms / 1000, ask)
    engine.truncate(0)
    engine.decode_watch = lambda _done, _total: not stop.is_set()
    timer.start()
    try:
        engine.decode(tokens)
    except Interrupted:
        return (time.perf_counter() - asked_at) * 1000
    finally:
        timer.cancel()
        engine.decode_watch = None
    raise RuntimeError("the prompt was read in full before Stop was asked")


def measure(engine: LlamaEngine, tokens: list[int], runs: int) -> None:
    """Read ``tokens`` in full, then stopped ``runs`` times; print the figures
    for the engine's ``prompt_step``."""
    batch_ms = read_in_full(engine, tokens)
    full_ms = sum(batch_ms)
    rng = random.Random(0)
    latencies = [
        stop_latency(engine, tokens, rng.uniform(0.1, 0.8) * full_ms)
        for _ in range(runs)
    ]
    longest = max(batch_ms)
    print(
        f"batches of {engine.prompt_step}: read in full in {full_ms:,.0f} ms "
        f"({len(tokens) / full_ms * 1000:,.0f} tokens/s, {len(batch_ms)} batches)"
    )
    print(
        f"  one batch: {min(batch_ms):,.0f} ms (the first) to {longest:,.0f} ms "
        "(the longest)"
    )
    print(
        f"  Stop to return over {len(latencies)} runs: median "
        f"{statistics.median(latencies):,.0f} ms, max {max(latencies):,.0f} ms "
        f"({max(latencies) / longest:.2f} of the longest batch)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Print the time per batch and the latency of Stop, side by side."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=starter_model_path())
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--n-batch", type=int, default=512)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument(
        "--compare", action="store_true", help="batches of n_batch too, first"
    )
    args = parser.parse_args(argv)
    if args.model is None:
        print("no model given and no starter model installed", file=sys.stderr)
        return 2
    settings = BackendSettings(
        n_ctx=args.tokens + 64, n_batch=args.n_batch, n_threads=args.threads
    )
    try:
        engine = LlamaEngine(args.model, settings)
    except BackendError as exc:
        print(exc, file=sys.stderr)
        return 2
    with engine:
        tokens = prompt_tokens(engine, args.tokens)
        print(
            f"model: {args.model.name}, n_batch {engine.n_batch}, "
            f"{len(tokens):,} tokens",
            flush=True,
        )
        steps = [engine.prompt_step]
        if args.compare and engine.n_batch != engine.prompt_step:
            steps.insert(0, engine.n_batch)
        for step in steps:
            engine.prompt_step = step
            measure(engine, tokens, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
