"""Scenario 4: what checkpointing costs a reply, and what one node's checkpoint costs.

The same prompts are answered (greedily, so every mode generates the same
tokens from the same context) with checkpointing off, written on the
generating thread (the earlier way), and queued to the writer thread (as
shipped). A reply's checkpoint time on the generating thread is capture plus
write or enqueue of its two nodes, plus any wait for the message's
checkpoint before the reply is stored. Between replies the queue is flushed,
so one mode's writes never slow the next. Modes take turns in a rotating
order so that noise from other work on the machine spreads over all of them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from app.bench.instrumented import MODES, OFF, QUEUED, SYNC, BenchService, NodeWrite
from app.bench.measure import Stopwatch, median, ratio
from app.bench.results import NodeWriteRow, OverheadRow
from app.bench.workload import SYSTEM_PROMPT, filler_text, greedy

# Size classes of the node-write table: (label, most tokens).
_SIZE_CLASSES = (
    ("up to 32 tokens", 32),
    ("33 to 128 tokens", 128),
    ("129 to 512 tokens", 512),
    ("over 512 tokens", None),
)


def run_overhead(
    service: BenchService,
    n_prompts: int,
    max_tokens: int,
    repeats: int,
    progress: Callable[[str], None],
) -> list[OverheadRow]:
    """Answer ``n_prompts`` prompts ``repeats`` times in every checkpoint mode."""
    engine = service.timed_engine
    _conversation, root = service.new_conversation(SYSTEM_PROMPT, "bench: overhead")
    prompts = [
        "Write a long, detailed story about this: "
        + filler_text(engine, 24, seed=30_000 + i)
        for i in range(n_prompts)
    ]
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for repeat in range(repeats):
        order = MODES[repeat % len(MODES) :] + MODES[: repeat % len(MODES)]
        for prompt in prompts:
            for mode in order:
                service.set_mode(mode)
                written_before = len(service.writes)
                waited_before = service.sink.waited_ms
                with Stopwatch() as wall:
                    reply = service.send(root, prompt, greedy(max_tokens))
                figures = samples[mode]
                figures["tokens"].append(reply.stats.generated_tokens)
                figures["generate_tps"].append(reply.stats.tokens_per_second)
                figures["reply_ms"].append(wall.ms)
                figures["reply_tps"].append(
                    ratio(reply.stats.generated_tokens, wall.ms / 1000)
                )
                figures["checkpoint_ms"].append(
                    sum(
                        w.capture_ms + w.write_ms
                        for w in service.writes[written_before:]
                    )
                    + service.sink.waited_ms
                    - waited_before
                )
        progress(f"overhead, repeat {repeat + 1}/{repeats} done")
    service.set_mode(QUEUED)
    baseline = median(samples[OFF]["reply_tps"])
    rows = []
    for mode in MODES:
        figures = samples[mode]
        reply_ms, checkpoint_ms = (
            median(figures["reply_ms"]),
            median(figures["checkpoint_ms"]),
        )
        rows.append(
            OverheadRow(
                mode=mode,
                generated_tokens=int(median(figures["tokens"])),
                generate_tps=median(figures["generate_tps"]),
                reply_tps=median(figures["reply_tps"]),
                reply_ms=reply_ms,
                checkpoint_ms=checkpoint_ms,
                checkpoint_share_pct=ratio(checkpoint_ms, reply_ms) * 100,
                throughput_cost_pct=(1 - ratio(median(figures["reply_tps"]), baseline))
                * 100,
            )
        )
    return rows


def node_write_rows(writes: list[NodeWrite]) -> list[NodeWriteRow]:
    """Median cost of writing one node's checkpoint at once, by span size.

    From the ``sync`` replies: what the generating thread paid per node before
    writes were queued, and what the writer thread now pays instead.
    """
    classes: dict[str, list[NodeWrite]] = defaultdict(list)
    for write in writes:
        if write.mode != SYNC:
            continue
        label = next(
            name for name, most in _SIZE_CLASSES if most is None or write.tokens <= most
        )
        classes[label].append(write)
    return [
        NodeWriteRow(
            size=label,
            samples=len(classes[label]),
            tokens=int(median(w.tokens for w in classes[label])),
            bytes=int(median(w.bytes for w in classes[label])),
            capture_ms=median(w.capture_ms for w in classes[label]),
            write_ms=median(w.write_ms for w in classes[label]),
        )
        for label, _most in _SIZE_CLASSES
        if classes[label]
    ]
