"""The issue's targets, judged against a run's figures."""

from __future__ import annotations

from app.bench.config import REFERENCE_PATH_TOKENS
from app.bench.results import Report, TargetRow

# Issue 11: the restore call of the ~2k-token path, cold; a sibling switch
# under it with the shortest suffix, end to end (warm process).
COLD_RESUME_MAX_MS = 25.0
SWITCH_MAX_MS = 1.5
STORAGE_MAX_OVERHEAD_PCT = 10.0
# Issue 11: the generating thread's share of a 64-token reply spent on
# checkpoints, with the queued writer Arbor ships.
CHECKPOINT_MAX_SHARE_PCT = 0.5


def _nearest(values: list[int], wanted: int) -> int:
    return min(values, key=lambda v: abs(v - wanted))


def judge(report: Report) -> list[TargetRow]:
    """One row per target the report has figures for."""
    rows = []
    if report.cold_resume:
        wanted = _nearest(
            [r.target_tokens for r in report.cold_resume], REFERENCE_PATH_TOKENS
        )
        cold = next(r for r in report.cold_resume if r.target_tokens == wanted)
        rows.append(
            TargetRow(
                name=f"cold resume of a {cold.path_tokens}-token path",
                target=f"restore call <= {COLD_RESUME_MAX_MS:.0f} ms",
                measured=f"median {cold.restore_ms:.1f} ms (SQLite read "
                f"{cold.read_ms:.1f}, checksums {cold.verify_ms:.1f}, engine "
                f"{cold.backend_ms:.1f}; bookkeeping written after it "
                f"{cold.write_ms:.1f}), {cold.speedup:,.0f}x reprocessing "
                f"({cold.reprocess_ms:,.0f} ms); best run {cold.best_restore_ms:.1f} "
                f"ms, {cold.best_speedup:,.0f}x",
                met=cold.restore_ms <= COLD_RESUME_MAX_MS,
            )
        )
    if report.sibling_switch:
        prefix = _nearest(
            [r.prefix_tokens for r in report.sibling_switch], REFERENCE_PATH_TOKENS
        )
        under = [r for r in report.sibling_switch if r.prefix_tokens == prefix]
        shortest = min(under, key=lambda r: r.suffix_tokens)
        rows.append(
            TargetRow(
                name=f"sibling switch under a {prefix}-token prefix: bytes read",
                target="no more than the suffix's checkpoint bytes",
                measured=", ".join(
                    f"{r.suffix_tokens}-token suffix: {r.bytes_read:,} B read, "
                    f"{r.suffix_checkpoint_bytes:,} B stored"
                    for r in under
                ),
                met=all(r.excess_bytes <= 0 for r in under),
            )
        )
        rows.append(
            TargetRow(
                name=f"sibling switch under a {prefix}-token prefix",
                target=f"<= {SWITCH_MAX_MS} ms end to end (shortest suffix)",
                measured=f"{shortest.switch_ms:.2f} ms for a "
                f"{shortest.suffix_tokens}-token suffix ({shortest.backend_ms:.2f} "
                "ms in the engine)",
                met=shortest.switch_ms <= SWITCH_MAX_MS,
            )
        )
    linear = [r for r in report.storage if r.shape.startswith("linear")]
    if linear:
        row = linear[0]
        rows.append(
            TargetRow(
                name="storage of a linear chat",
                target=f"within {STORAGE_MAX_OVERHEAD_PCT:.0f}% of tokens x "
                f"{row.kv_bytes_per_token:,} B",
                measured=f"{row.bytes_per_token:,.0f} B/token "
                f"({row.overhead_pct:+.2f}%)",
                met=abs(row.overhead_pct) <= STORAGE_MAX_OVERHEAD_PCT,
            )
        )
    shipped = [r for r in report.overhead if r.mode == "queued"]
    if shipped:
        queued = shipped[0]
        rows.append(
            TargetRow(
                name="checkpointing on the generating thread (queued writer)",
                target=f"<= {CHECKPOINT_MAX_SHARE_PCT}% of a reply's time",
                measured=f"{queued.checkpoint_share_pct:.2f}% of reply time "
                f"({queued.checkpoint_ms:.2f} ms of {queued.reply_ms:,.0f} ms); "
                "reply throughput against checkpoints off "
                f"{-queued.throughput_cost_pct:+.1f}%",
                met=queued.checkpoint_share_pct <= CHECKPOINT_MAX_SHARE_PCT,
            )
        )
    return rows
