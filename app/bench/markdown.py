"""A run's report as Markdown: one table per scenario, then the targets."""

from __future__ import annotations

from collections.abc import Sequence

from app.bench.results import Report

_MIB = 1024 * 1024


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def _ms(value: float) -> str:
    # Sub-millisecond figures keep two decimals; long ones need none.
    if value < 10:
        return f"{value:.2f}"
    if value < 1000:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def _x(value: float) -> str:
    return f"{value:,.0f}x" if value >= 10 else f"{value:.1f}x"


def _mib(value: float) -> str:
    return f"{value / _MIB:.2f}"


def render(report: Report) -> str:
    """Render the whole report as Markdown."""
    m, model, config = report.machine, report.model, report.config
    lines = [
        f"## Arbor benchmark: {model['name']}",
        "",
        f"- Model: `{model['file']}` ({model['size_bytes']:,} bytes), KV cache "
        f"{model['kv_cache_type']}, {model['kv_bytes_per_token']:,} bytes of KV per "
        f"token, n_ctx {model['n_ctx']}, n_batch {model['n_batch']}, "
        f"{model['threads']} threads, llama-cpp-python {model['llama_cpp']}.",
        f"- Machine: {m['cpu']}, {m['logical_cores']} logical cores, "
        f"{m['memory_gib']} GiB RAM, {m['os']}, Python {m['python']}; "
        f"load average {m['load_average_start']} at the start and "
        f"{m.get('load_average_end')} "
        "at the end (other work on the machine adds noise).",
        f"- Medians of {config['repeats']} repeats; "
        f"whole run {report.elapsed_s:.0f} s.",
        "",
        "### 1. Cold resume: fresh engine and service, "
        "restore from SQLite vs. reprocess",
        "",
    ]
    lines += _table(
        [
            "path tokens",
            "nodes",
            "MiB read",
            "restore ms",
            "of which SQLite read ms",
            "checksums ms",
            "engine ms (llama.cpp, combining)",
            "tree and Python ms",
            "bookkeeping written after ms",
            "reprocess ms",
            "speed-up",
            "best restore / reprocess ms",
            "speed-up, best runs",
            "model load ms",
        ],
        [
            [
                r.path_tokens,
                r.nodes,
                _mib(r.bytes_read),
                _ms(r.restore_ms),
                _ms(r.read_ms),
                _ms(r.verify_ms),
                _ms(r.backend_ms),
                _ms(r.restore_ms - r.read_ms - r.verify_ms - r.backend_ms),
                _ms(r.write_ms),
                _ms(r.reprocess_ms),
                _x(r.speedup),
                f"{_ms(r.best_restore_ms)} / {_ms(r.best_reprocess_ms)}",
                _x(r.best_speedup),
                _ms(r.load_ms),
            ]
            for r in report.cold_resume
        ],
    )
    lines += [
        "",
        "### 2. Sibling switch: shared prefix kept in memory, divergent suffix applied",
        "",
    ]
    lines += _table(
        [
            "prefix tokens",
            "suffix tokens (nodes)",
            "switch ms",
            "of which SQLite read ms",
            "checksums ms",
            "engine ms (llama.cpp, combining)",
            "bytes read",
            "suffix checkpoint bytes",
            "full restore ms",
            "reprocess suffix ms",
            "reprocess path ms",
            "vs full restore",
            "vs reprocess suffix",
            "vs reprocess path",
        ],
        [
            [
                r.prefix_tokens,
                f"{r.suffix_tokens} ({r.suffix_nodes})",
                _ms(r.switch_ms),
                _ms(r.read_ms),
                _ms(r.verify_ms),
                _ms(r.backend_ms),
                f"{r.bytes_read:,}",
                f"{r.suffix_checkpoint_bytes:,}",
                _ms(r.full_restore_ms),
                _ms(r.suffix_reprocess_ms),
                _ms(r.full_reprocess_ms),
                _x(r.vs_full_restore),
                _x(r.vs_suffix_reprocess),
                _x(r.vs_full_reprocess),
            ]
            for r in report.sibling_switch
        ],
    )
    lines += [
        "",
        "Where a move's database time goes, each step timed on its own: what "
        "a move does now (tree index or cache, blobs opened and read into one "
        "reused buffer, the bookkeeping written after the move) beside the "
        "earlier ways (a recursive path query, the blobs selected in one query "
        "or one transaction each, the active node written during the move):",
        "",
    ]
    lines += _table(
        [
            "move",
            "tokens kept",
            "tokens moved (nodes)",
            "tree index ms (cold)",
            "path from cache ms (warm)",
            "blobs read ms",
            "checksums ms",
            "bookkeeping written after ms",
            "earlier: path query ms",
            "earlier: blobs selected ms",
            "earlier: one transaction per blob ms",
            "earlier: set active node ms",
        ],
        [
            [
                r.move,
                r.kept_tokens,
                f"{r.moved_tokens} ({r.moved_nodes})",
                _ms(r.index_ms),
                _ms(r.cached_path_ms),
                _ms(r.blob_read_ms),
                _ms(r.verify_ms),
                _ms(r.deferred_write_ms),
                _ms(r.get_path_ms),
                _ms(r.batched_read_ms),
                _ms(r.per_node_read_ms),
                _ms(r.set_active_ms),
            ]
            for r in report.move_breakdown
        ],
    )
    lines += ["", "### 3. Storage: checkpoint bytes per token of conversation", ""]
    lines += _table(
        [
            "conversation",
            "nodes",
            "tokens",
            "checkpoint MiB",
            "bytes/token",
            "vs KV bytes/token",
            "one full snapshot per node, MiB",
            "full / delta",
        ],
        [
            [
                r.shape,
                r.nodes,
                r.tokens,
                _mib(r.checkpoint_bytes),
                f"{r.bytes_per_token:,.0f}",
                f"{r.overhead_pct:+.2f}%",
                _mib(r.full_snapshot_bytes),
                _x(r.full_over_delta),
            ]
            for r in report.storage
        ],
    )
    sqlite = report.sqlite
    if sqlite:
        lines += [
            "",
            f"SQLite file: {_mib(sqlite['file_bytes'])} MiB for "
            f"{_mib(sqlite['checkpoint_bytes'])} MiB of checkpoint blobs (all "
            "conversations of the run, plus their messages).",
        ]
    lines += [
        "",
        "### 4. Overhead: replies with checkpoints off, written at once, and queued",
        "",
        "Queued is as shipped (the writer thread writes them); written at once "
        "is how Arbor wrote them before, on the generating thread.",
        "",
    ]
    lines += _table(
        [
            "checkpoints",
            "tokens generated",
            "sampling loop tok/s",
            "reply tok/s",
            "reply ms",
            "checkpoint ms on the generating thread",
            "share of reply",
            "reply tok/s vs off",
        ],
        [
            [
                r.mode,
                r.generated_tokens,
                f"{r.generate_tps:.1f}",
                f"{r.reply_tps:.1f}",
                _ms(r.reply_ms),
                _ms(r.checkpoint_ms),
                f"{r.checkpoint_share_pct:.2f}%",
                f"{-r.throughput_cost_pct:+.1f}%",
            ]
            for r in report.overhead
        ],
    )
    lines += [
        "",
        "Checkpointing one node (capture, then write to SQLite: the write is "
        "what the writer thread now does):",
        "",
    ]
    lines += _table(
        ["span", "nodes", "tokens", "bytes", "capture ms", "write ms"],
        [
            [
                r.size,
                r.samples,
                r.tokens,
                f"{r.bytes:,}",
                _ms(r.capture_ms),
                _ms(r.write_ms),
            ]
            for r in report.node_writes
        ],
    )
    lines += [
        "",
        "### 5. Alternatives: N replies generated together vs. one by one",
        "",
        "Tokens/s over the whole operation; the parallel arm includes decoding "
        "each reply again alone, which makes its checkpoint exact (its sampling "
        "loop alone in the next column).",
        "",
    ]
    lines += _table(
        [
            "N",
            "one by one: tokens",
            "ms",
            "tok/s",
            "together: tokens",
            "ms",
            "tok/s",
            "sampling tok/s",
            "re-decode ms",
            "speed-up",
        ],
        [
            [
                r.n,
                r.sequential_tokens,
                _ms(r.sequential_ms),
                f"{r.sequential_tps:.1f}",
                r.parallel_tokens,
                _ms(r.parallel_ms),
                f"{r.parallel_tps:.1f}",
                f"{r.sampling_tps:.1f}",
                _ms(r.redecode_ms),
                f"{r.speedup:.2f}x",
            ]
            for r in report.alternatives
        ],
    )
    lines += ["", "### Targets", ""]
    lines += _table(
        ["target", "goal", "measured", "met"],
        [
            [t.name, t.target, t.measured, "yes" if t.met else "**no**"]
            for t in report.targets
        ],
    )
    return "\n".join(lines) + "\n"
