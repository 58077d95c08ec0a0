"""Scenario 5: alternatives generated together vs. the same number one by one.

For N = 1, 2, 4 the same reply gets N new siblings twice: by N sequential
``regenerate`` calls (seeds s .. s+N-1), and by one ``regenerate_parallel``
(the same seeds, one batched decode per step). Throughput is generated
tokens over the wall time of the whole operation, so the parallel arm pays
for decoding each reply again alone (what makes its checkpoints exact);
its sampling loop alone is reported beside it. Each arm's replies go under
their own copy of the question, so both start from the same context.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from app.backend.values import SamplingParams
from app.bench.instrumented import BenchService
from app.bench.measure import Stopwatch, median, ratio
from app.bench.results import AlternativesRow
from app.bench.workload import SYSTEM_PROMPT

_PROMPT = "Write a long, detailed story about a lighthouse keeper and a storm."
_SEED = 1234


def run_alternatives(
    service: BenchService,
    counts: tuple[int, ...],
    max_tokens: int,
    repeats: int,
    progress: Callable[[str], None],
) -> list[AlternativesRow]:
    """One row per N in ``counts``: tokens/s of N sequential vs. N together."""
    # Sampled, not greedy: greedy alternatives differ only by their first
    # token, which would make N sequential greedy replies all the same one.
    params = SamplingParams(temperature=0.8, seed=_SEED, max_tokens=max_tokens)
    _conversation, root = service.new_conversation(SYSTEM_PROMPT, "bench: alternatives")
    first = service.send(root, _PROMPT, replace(params, max_tokens=1))
    rows = []
    for n in counts:
        sequential_ms, sequential_tokens = [], []
        parallel_ms, parallel_tokens, sampling_ms, redecode_ms = [], [], [], []
        for repeat in range(repeats):
            seed = _SEED + 100 * repeat
            with Stopwatch() as wall:
                replies = [
                    service.regenerate(
                        first.assistant_node, replace(params, seed=seed + k)
                    )
                    for k in range(n)
                ]
            sequential_ms.append(wall.ms)
            sequential_tokens.append(sum(r.stats.generated_tokens for r in replies))
            with Stopwatch() as wall:
                replies = service.regenerate_parallel(
                    first.assistant_node, replace(params, seed=seed), n
                )
            parallel_ms.append(wall.ms)
            parallel_tokens.append(sum(r.stats.generated_tokens for r in replies))
            sampling_ms.append(replies[0].stats.generate_ms)
            redecode_ms.append(sum(r.stats.redecode_ms for r in replies))
        sequential_tps = _tps(sequential_tokens, sequential_ms)
        parallel_tps = _tps(parallel_tokens, parallel_ms)
        row = AlternativesRow(
            n=n,
            sequential_tokens=int(median(sequential_tokens)),
            sequential_ms=median(sequential_ms),
            sequential_tps=sequential_tps,
            parallel_tokens=int(median(parallel_tokens)),
            parallel_ms=median(parallel_ms),
            parallel_tps=parallel_tps,
            sampling_tps=_tps(parallel_tokens, sampling_ms),
            redecode_ms=median(redecode_ms),
            speedup=ratio(parallel_tps, sequential_tps),
        )
        progress(
            f"alternatives x{n}: {row.parallel_tps:.1f} tok/s together vs "
            f"{row.sequential_tps:.1f} one by one ({row.speedup:.2f}x)"
        )
        rows.append(row)
    return rows


def _tps(tokens: list[int], ms: list[float]) -> float:
    """Median tokens per second over the repeats."""
    return median(t / (m / 1000) for t, m in zip(tokens, ms, strict=True) if m > 0)
