"""``arbor bench``: run the benchmark, print Markdown, optionally write JSON."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from app.backend.settings import BackendSettings
from app.bench.config import BenchConfig
from app.bench.errors import BenchError
from app.bench.markdown import render
from app.bench.report_json import to_json
from app.bench.runner import run_benchmarks


def _stderr_progress() -> Callable[[str], None]:
    started = time.perf_counter()

    def report(message: str) -> None:
        print(
            f"[{time.perf_counter() - started:6.1f} s] {message}",
            file=sys.stderr,
            flush=True,
        )

    return report


def run_bench(
    model_path: Path,
    settings: BackendSettings,
    repeats: int | None,
    quick: bool,
    json_path: Path | None,
) -> int:
    """Benchmark ``model_path``; print the Markdown report; return the exit status.

    Parameters
    ----------
    model_path
        The GGUF model to measure.
    settings
        Backend settings (context size, threads, KV cache type, ...).
    repeats
        Measurements per figure; None: 3, or 1 with ``quick``.
    quick
        Tiny sizes (for tests and a first look), every section still present.
    json_path
        Where to write the figures as JSON as well, if given.
    """
    if repeats is not None and repeats < 1:
        raise ValueError("--repeats must be at least 1")
    if quick:
        config = BenchConfig.quick(repeats or 1)
    else:
        config = BenchConfig(repeats=repeats or BenchConfig.repeats)
    try:
        report = run_benchmarks(model_path, settings, config, _stderr_progress())
    except BenchError as exc:
        print(f"arbor: benchmark failed: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(render(report))
    if json_path is not None:
        try:
            json_path.write_text(json.dumps(to_json(report), indent=2) + "\n")
        except OSError as exc:  # the report is on stdout already: nothing is lost
            message = f"arbor: could not write {json_path}: {exc.strerror}"
            print(message, file=sys.stderr)
            return 1
    return 0
