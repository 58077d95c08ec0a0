"""Threads on a busy machine (issue 23): how long reading a prompt and
writing a reply take with one thread, one per core, and "automatic", on an
idle machine and with as many busy programs as cores, side by side.

llama.cpp's threads wait for one another by spinning; one that the system
pauses stalls the rest, so one thread per core collapses once other
programs want the cores. "Automatic" (``app/backend/threads.py``) counts the
free cores before each decode. Run it alone: nothing else may use the CPU.

    .venv/bin/python tools/busy_threads.py [--model PATH] [--tokens 2600]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.threads import usable_cores
from app.platform.starter_model import starter_model_path

BUSY = "while True: pass"
REPLY_TOKENS = 32


def timed_run(model: Path, threads: int, tokens: int) -> tuple[float, float, int]:
    """Seconds to read ``tokens`` prompt tokens, tokens per second of a
    greedy reply after them, and the threads llama.cpp used."""
    settings = BackendSettings(n_ctx=tokens + REPLY_TOKENS + 16, n_threads=threads)
    with LlamaEngine(model, settings) as engine:
        words = " ".join(f"word{i % 97}" for i in range(tokens))
        prompt = engine.tokenize(words)[:tokens]
        started = time.perf_counter()
        engine.decode(prompt)
        read_s = time.perf_counter() - started
        used = engine.threads_in_use
        started = time.perf_counter()
        for _ in range(REPLY_TOKENS):
            token = int(engine.logits().argmax())
            engine.decode([token])
        speed = REPLY_TOKENS / (time.perf_counter() - started)
    return read_s, speed, used


def main() -> int:
    """Measure every case and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=starter_model_path())
    parser.add_argument("--tokens", type=int, default=2600)
    args = parser.parse_args()
    if args.model is None:
        print("No model: pass --model PATH.", file=sys.stderr)
        return 2
    cores = usable_cores()
    cases = [("1 thread", 1), (f"{cores} threads", cores), ("automatic", 0)]
    print(f"{args.model.name}, {args.tokens:,} prompt tokens, {cores} cores\n")
    print(f"{'':12}{'load':>8}{'read s':>9}{'reply tok/s':>13}{'threads':>9}")
    for load in ("idle", "busy"):
        busy = (
            [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(cores)]
            if load == "busy"
            else []
        )
        try:
            time.sleep(0.5)
            for name, threads in cases:
                read_s, speed, used = timed_run(args.model, threads, args.tokens)
                print(f"{name:12}{load:>8}{read_s:9.2f}{speed:13.1f}{used:9}")
        finally:
            for process in busy:
                process.kill()
                process.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
