"""Automatic threads follow the free cores: real busy processes, the real
/proc/loadavg and the real engine on the tiny model (Linux)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.backend import threads
from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings

BUSY = "while True: pass"


def _loadavg(tmp_path: Path, runnable: int, monkeypatch) -> None:
    fake = tmp_path / "loadavg"
    fake.write_text(f"0.50 0.40 0.30 {runnable}/321 4567\n")
    monkeypatch.setattr(threads, "_LOADAVG", fake)


@pytest.mark.parametrize(
    ("cores", "runnable", "expected"),
    [
        (2, 1, 1),  # idle 2 cores: one for llama.cpp, one for the window
        (8, 1, 7),
        (8, 4, 4),  # three other programs busy
        (4, 9, 1),  # busier than the machine: still one
        (16, 1, threads.MAX_AUTOMATIC_THREADS),
        (2, 500, 1),  # a host's count in a container: ignored
        (8, 500, 7),
    ],
)
def test_automatic_threads_leave_busy_cores_and_one_more(
    tmp_path, monkeypatch, cores, runnable, expected
):
    monkeypatch.setattr(threads, "usable_cores", lambda: cores)
    _loadavg(tmp_path, runnable, monkeypatch)
    assert threads.automatic_threads() == expected


def test_without_a_load_figure_all_cores_but_one_are_used(tmp_path, monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 6)
    monkeypatch.setattr(threads, "_LOADAVG", tmp_path / "missing")
    assert threads.automatic_threads() == 5


@pytest.mark.skipif(not Path("/proc/loadavg").exists(), reason="Linux only")
def test_the_engine_computes_on_fewer_threads_while_other_programs_run(
    tiny_model, monkeypatch
):
    # As if the machine had 6 cores: three busy programs leave two threads.
    monkeypatch.setattr(threads, "usable_cores", lambda: 6)
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=512)) as engine:
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(3)]
        try:
            time.sleep(0.3)  # running, not starting
            engine.decode(engine.tokenize("Hello there, how are you?"))
            assert 1 <= engine.threads_in_use <= 2
        finally:
            for process in busy:
                process.kill()
                process.wait()
    # A count the user chose is kept whatever runs.
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=512, n_threads=3)) as engine:
        engine.decode(engine.tokenize("Hello"))
        assert engine.threads_in_use == 3
