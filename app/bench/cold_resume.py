"""Scenario 1: cold resume from SQLite vs. reprocessing the same tokens.

"Cold" is what a restart gives: a freshly loaded engine, a fresh service and a
fresh connection to the same database file, then ``restore(node)``. The
operating system's page cache is warm (the file was just written), as it is
when an app is reopened soon after; a first read after a reboot adds the
disk's read time for the bytes listed. It runs in this process, so memory
freed by the previous measurement may be reused; the buffers the restore
path keeps belong to the engine and the service, which are new each time
(``tools/restore_timing.py --processes`` measures fresh processes too).

The restore call is split into reading the blobs from SQLite, their
checksums, the engine (llama.cpp, and combining small deltas) and the rest
(the tree index, Python). The bookkeeping it defers (active node, last use
of the checkpoints) is written right after it and timed on its own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.bench.errors import BenchError
from app.bench.instrumented import TimedEngine
from app.bench.measure import Stopwatch, median, ratio
from app.bench.results import ColdResumeRow
from app.conversation.service import ConversationService
from storage import node_rows
from storage.db import Database, open_database


def reprocess_ms(engine: LlamaEngine, tokens: list[int]) -> float:
    """Time decoding ``tokens`` from an empty context, as apps without checkpoints do.

    Batches of ``n_batch``, the default of ``LlamaEngine.decode``. Emptying the
    context stands in for a fresh one: the compute is the same, and loading
    the model again would only add time that is not part of reprocessing.
    """
    engine.truncate(0)
    with Stopwatch() as watch:
        engine.decode(tokens)
    return watch.ms


def run_cold_resume(
    db: Database,
    model_path: Path,
    settings: BackendSettings,
    milestones: dict[int, int],
    reprocessor: LlamaEngine,
    repeats: int,
    progress: Callable[[str], None],
) -> list[ColdResumeRow]:
    """Measure each milestone node (target tokens -> node id) ``repeats`` times.

    Cold restores and reprocessing alternate, so noise from other work on the
    machine falls on both arms alike.
    """
    paths = {
        target: node_rows.get_path(db, node) for target, node in milestones.items()
    }
    samples: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for repeat in range(repeats):
        for target, path in sorted(paths.items()):
            figures = samples[target]
            with Stopwatch() as load:
                engine = TimedEngine(model_path, settings)
            cold_db = open_database(db.path)
            try:
                service = ConversationService(cold_db, engine)
                with Stopwatch() as wall:
                    stats = service.restore(path[-1].id)
                with Stopwatch() as write:
                    cold_db.flush_deferred()
            finally:
                engine.close()
                cold_db.close()
            if stats.reprocessed_tokens or stats.fallbacks:
                raise BenchError(
                    f"cold restore of node {path[-1].id} fell back to reprocessing: "
                    + "; ".join(stats.fallbacks)
                )
            figures["load"].append(load.ms)
            figures["restore"].append(wall.ms)
            figures["sync"].append(stats.restore_ms)
            figures["read"].append(stats.read_ms)
            figures["verify"].append(stats.verify_ms)
            figures["write"].append(write.ms)
            figures["backend"].append(engine.times.switch_ms)
            figures["bytes"].append(stats.checkpoint_bytes_read)
            tokens = [t for node in path for t in node.tokens]
            figures["reprocess"].append(reprocess_ms(reprocessor, tokens))
            progress(
                f"cold resume {path[-1].end_pos} tokens, "
                f"repeat {repeat + 1}/{repeats}: "
                f"restore {wall.ms:.1f} ms, reprocess {figures['reprocess'][-1]:.0f} ms"
            )
    rows = []
    for target, path in sorted(paths.items()):
        figures = samples[target]
        restore = median(figures["restore"])
        reprocess = median(figures["reprocess"])
        rows.append(
            ColdResumeRow(
                target_tokens=target,
                path_tokens=path[-1].end_pos,
                nodes=len(path),
                bytes_read=int(median(figures["bytes"])),
                restore_ms=restore,
                sync_ms=median(figures["sync"]),
                backend_ms=median(figures["backend"]),
                reprocess_ms=reprocess,
                speedup=ratio(reprocess, restore),
                best_restore_ms=min(figures["restore"]),
                best_reprocess_ms=min(figures["reprocess"]),
                best_speedup=ratio(min(figures["reprocess"]), min(figures["restore"])),
                load_ms=median(figures["load"]),
                read_ms=median(figures["read"]),
                verify_ms=median(figures["verify"]),
                write_ms=median(figures["write"]),
            )
        )
    return rows
