"""Quick timing of the two restore targets of issue 11, for iterating on them.

Builds (once, then reuses) a database with the benchmark's 2k-token linear
chat and a sibling pair with a 35-token suffix under it, then times:

- cold resume: a fresh engine, database connection and service restore the
  2k-token leaf (in this process, as ``arbor bench`` does; with ``--processes``
  also in fresh processes, which start with no warm memory at all);
- sibling switch: one warm service switching between the two siblings.

With ``--stalls``, a thread that asks to run every millisecond (as the
window's GUI thread does) watches each cold restore and then a capture of
the last 256 positions: its longest wait is how long the work held the GIL
or the CPU from other threads ("restore_stall", "capture_stall", with
"capture" the capture's own time). Off by default: the watcher's wake-ups
cost the restore a little.

Medians of ``--repeats``. The parts (SQLite read, checksum, engine) come from
``SyncStats`` where the code under test reports them.

    python tools/restore_timing.py --db /tmp/restore-timing.sqlite3 --repeats 9
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.bench import workload
from app.conversation.service import ConversationService
from app.platform.starter_model import starter_model_path
from storage.db import open_database

PARTS = ("read_ms", "verify_ms", "apply_ms")
CAPTURED_TOKENS = 256


class StallWatch:
    """A thread that ticks every millisecond while it runs; ``longest`` is the
    longest gap between two ticks, in ms (1 when nothing held it up)."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        time.sleep(0.005)  # running before the work starts
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _tick(self) -> None:
        last = time.perf_counter()
        while not self._stop.wait(0.001):
            now = time.perf_counter()
            self.longest = max(self.longest, (now - last) * 1000)
            last = now


def build(db_path: Path, model: Path) -> dict[str, int]:
    """Build the conversation once; return the node ids the timings use."""
    ids_path = db_path.with_suffix(".json")
    if db_path.exists() and ids_path.exists():
        return dict(json.loads(ids_path.read_text()))
    db = open_database(db_path)
    engine = LlamaEngine(model, BackendSettings())
    service = ConversationService(db, engine)
    chat = workload.build_linear_chat(service, [2048], 240, 8, print)
    fork = chat.milestones[2048]
    pair = workload.build_sibling_pair(service, fork, 16, 8)
    ids = {"leaf": fork, "first": pair.leaves[0], "second": pair.leaves[1]}
    engine.close()
    db.close()
    ids_path.write_text(json.dumps(ids))
    return ids


def cold_once(
    db_path: Path, model: Path, leaf: int, stalls: bool = False
) -> dict[str, float]:
    """One cold restore in this process; its figures in ms."""
    engine = LlamaEngine(model, BackendSettings())
    db = open_database(db_path)
    figures: dict[str, float] = {}
    try:
        service = ConversationService(db, engine)
        with StallWatch() if stalls else contextlib.nullcontext() as watch:
            started = time.perf_counter()
            stats = service.restore(leaf)
            wall = (time.perf_counter() - started) * 1000
        if watch is not None:
            figures["restore_stall"] = watch.longest
        started = time.perf_counter()
        flush = getattr(db, "flush_deferred", None)
        if flush is not None:
            flush()
        write = (time.perf_counter() - started) * 1000
        if stalls:
            end = engine.n_past
            with StallWatch() as watch:
                started = time.perf_counter()
                engine.capture(end - CAPTURED_TOKENS, end)
                figures["capture"] = (time.perf_counter() - started) * 1000
            figures["capture_stall"] = watch.longest
    finally:
        engine.close()
        db.close()
    if stats.reprocessed_tokens:
        raise SystemExit(f"fell back: {stats.fallbacks}")
    figures.update({"restore": wall, "sync": stats.restore_ms, "write_after": write})
    figures.update({p: getattr(stats, p, float("nan")) for p in PARTS})
    return figures


def switch_times(db_path: Path, model: Path, ids: dict[str, int], repeats: int):
    """Switch between the siblings ``repeats`` times each way in one process."""
    engine = LlamaEngine(model, BackendSettings())
    db = open_database(db_path)
    service = ConversationService(db, engine)
    service.restore(ids["first"])
    samples: list[dict[str, float]] = []
    for _ in range(repeats):
        for leaf in (ids["second"], ids["first"]):
            started = time.perf_counter()
            stats = service.restore(leaf)
            wall = (time.perf_counter() - started) * 1000
            if stats.reprocessed_tokens or not stats.kept_tokens:
                raise SystemExit(f"switch fell back: {stats.fallbacks}")
            figures = {"switch": wall, "sync": stats.restore_ms}
            figures.update({p: getattr(stats, p, float("nan")) for p in PARTS})
            samples.append(figures)
    engine.close()
    db.close()
    return samples


def medians(samples: list[dict[str, float]]) -> dict[str, float]:
    """Median of every figure."""
    return {
        key: round(statistics.median(s[key] for s in samples), 2) for key in samples[0]
    }


def main() -> None:
    """Parse arguments, build if needed, print the medians."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, default=Path("/tmp/restore-timing.sqlite3"))
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--processes", action="store_true")
    parser.add_argument("--stalls", action="store_true")
    parser.add_argument("--one-cold", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model = starter_model_path()
    assert model is not None
    ids = build(args.db, model)
    if args.one_cold:
        print(json.dumps(cold_once(args.db, model, ids["leaf"], args.stalls)))
        return
    cold = [
        cold_once(args.db, model, ids["leaf"], args.stalls) for _ in range(args.repeats)
    ]
    print("cold resume, in process:", medians(cold))
    if args.processes:
        runs = [
            json.loads(
                subprocess.run(
                    [sys.executable, __file__, "--db", str(args.db), "--one-cold"]
                    + (["--stalls"] if args.stalls else []),
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            for _ in range(args.repeats)
        ]
        print("cold resume, fresh processes:", medians(runs))
    print("sibling switch:", medians(switch_times(args.db, model, ids, args.repeats)))


if __name__ == "__main__":
    main()
