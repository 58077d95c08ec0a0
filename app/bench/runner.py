"""Run every scenario on one scratch database and collect the report.

Two engines are loaded for the whole run: the one the service drives (it
builds the conversations and switches between siblings) and a scratch one
for the baselines that decode tokens again. The cold-resume scenario loads a
third, fresh engine for every measurement.

The conversations are built with checkpoints written at once: the scenarios
that read the database then find every checkpoint in it, and those writes
give the node-write table its sizes. Overhead and alternatives measure the
queued writer, as shipped.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.bench import targets, workload
from app.bench.alternatives import run_alternatives
from app.bench.cold_resume import run_cold_resume
from app.bench.config import BenchConfig
from app.bench.errors import BenchError
from app.bench.instrumented import QUEUED, SYNC, BenchService, TimedEngine
from app.bench.machine import describe_machine, load_average
from app.bench.move_breakdown import measure_move_breakdown
from app.bench.overhead import node_write_rows, run_overhead
from app.bench.results import Report
from app.bench.sibling_switch import run_sibling_switch
from app.bench.storage_cost import linear_storage, sqlite_footprint, tree_storage
from storage import node_rows
from storage.db import open_database

# Context left free above the longest path, for the sibling branches' markup.
_CONTEXT_MARGIN = 64


def _model_facts(engine: LlamaEngine) -> dict[str, object]:
    info = engine.info
    return {
        "name": info.name,
        "file": Path(info.path).name,
        "size_bytes": info.size_bytes,
        "kv_bytes_per_token": info.kv_bytes_per_token,
        "kv_cache_type": engine.settings.kv_cache_type,
        "n_ctx": engine.n_ctx,
        "n_batch": engine.settings.n_batch,
        "threads": engine.settings.threads,
        "state_kind": engine.state_kind,
        "llama_cpp": engine.profile_details["llama_cpp"],
        # Figures depend on the kernels: the CPU variant and what is offloaded.
        "cpu_backend": engine.profile_details["cpu_backend"],
        "placement": info.placement,
    }


def run_benchmarks(
    model_path: Path,
    settings: BackendSettings,
    config: BenchConfig,
    progress: Callable[[str], None] = lambda _message: None,
) -> Report:
    """Measure ``model_path`` with ``settings`` and return the report.

    Raises
    ------
    BenchError
        If the model keeps whole-state snapshots (nothing to compare per
        node), or a restore the scenarios rely on falls back to reprocessing.
    """
    started = time.perf_counter()
    machine = describe_machine()
    with tempfile.TemporaryDirectory(prefix="arbor-bench-") as folder:
        db = open_database(Path(folder) / "bench.sqlite3")
        engine = TimedEngine(model_path, settings)
        scratch = LlamaEngine(model_path, settings)
        service = BenchService(db, engine)
        try:
            if engine.state_kind != "delta":
                raise BenchError(
                    f"{engine.info.name} keeps whole-state snapshots "
                    f"({engine.info.state_note}); the benchmark measures delta "
                    "checkpoints."
                )
            report = Report(machine, _model_facts(engine), asdict(config))
            _run_scenarios(
                report, service, scratch, model_path, settings, config, progress
            )
        finally:
            service.close()
            engine.close()
            scratch.close()
            db.close()
    report.targets = targets.judge(report)
    report.machine["load_average_end"] = load_average()
    report.elapsed_s = time.perf_counter() - started
    return report


def _run_scenarios(
    report: Report,
    service: BenchService,
    scratch: LlamaEngine,
    model_path: Path,
    settings: BackendSettings,
    config: BenchConfig,
    progress: Callable[[str], None],
) -> None:
    db, engine = service.db, service.timed_engine
    assert service.profile_id is not None
    service.set_mode(SYNC)
    longest = engine.n_ctx - _CONTEXT_MARGIN - config.reply_tokens

    def fit(target: int) -> int:
        return min(target, longest)

    chat = workload.build_linear_chat(
        service,
        sorted({fit(t) for t in config.path_targets}),
        config.turn_tokens,
        config.reply_tokens,
        progress,
    )
    report.cold_resume = run_cold_resume(
        db, model_path, settings, chat.milestones, scratch, config.repeats, progress
    )
    report.move_breakdown = [
        measure_move_breakdown(db, service.profile_id, node, None, config.repeats)
        for _target, node in sorted(chat.milestones.items())
    ]
    cold_by_node = {
        chat.milestones[row.target_tokens]: row for row in report.cold_resume
    }

    for fork_target, message_tokens in config.sibling_cases:
        fork_id = chat.milestones[fit(fork_target)]
        fork_end = node_rows.get_node(db, fork_id).end_pos
        if fork_end + message_tokens + _CONTEXT_MARGIN > engine.n_ctx:
            progress(f"sibling case {fork_target}/{message_tokens} skipped: no room")
            continue
        pair = workload.build_sibling_pair(
            service, fork_id, message_tokens, config.reply_tokens
        )
        report.sibling_switch.append(
            run_sibling_switch(
                service,
                scratch,
                pair,
                cold_by_node[fork_id].reprocess_ms,
                config.repeats,
                progress,
            )
        )
        report.move_breakdown.append(
            measure_move_breakdown(
                db, service.profile_id, pair.leaves[1], fork_id, config.repeats
            )
        )

    bushy = workload.build_bushy_tree(
        service, config.bushy_width, config.bushy_message_tokens, config.reply_tokens
    )
    kv = engine.info.kv_bytes_per_token
    report.storage = [
        linear_storage(db, service.profile_id, chat.leaf_id, kv),
        tree_storage(db, service.profile_id, bushy, kv),
    ]
    progress("storage measured")

    report.overhead = run_overhead(
        service,
        config.overhead_prompts,
        config.overhead_tokens,
        config.repeats,
        progress,
    )
    report.node_writes = node_write_rows(service.writes)
    service.set_mode(QUEUED)
    report.alternatives = run_alternatives(
        service,
        config.alternatives_counts,
        config.alternatives_tokens,
        config.repeats,
        progress,
    )
    report.sqlite = sqlite_footprint(db)
