"""One window per data folder: a second launch brings the first to the front."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from app.qt.single_instance import LOCK_FILENAME, Claim, SingleInstance

REPO = Path(__file__).resolve().parents[2]


def _second_launch(data_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.Popen(
        [sys.executable, "-m", "app", "--data-dir", str(data_dir)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lock_holder(data_dir: Path) -> subprocess.Popen:
    # A process that holds the folder's lock but answers nobody: a hung
    # window, or (once killed) a crashed one.
    code = textwrap.dedent(
        f"""
        import sys, time
        from PySide6.QtCore import QLockFile
        lock = QLockFile({str(data_dir / LOCK_FILENAME)!r})
        assert lock.tryLock(0)
        print("locked", flush=True)
        time.sleep(60)
        """
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def test_a_second_launch_brings_the_running_window_forward(qtbot, tmp_path):
    running = SingleInstance(tmp_path)
    assert running.claim() is Claim.OWNED
    try:
        with qtbot.waitSignal(running.activation_requested, timeout=20_000):
            second = _second_launch(tmp_path)
        out, err = second.communicate(timeout=30)
    finally:
        running.release()
    assert second.returncode == 0, err
    assert "already open" in out and "Traceback" not in err


def test_the_folder_is_free_again_after_release(tmp_path):
    first = SingleInstance(tmp_path)
    assert first.claim() is Claim.OWNED
    first.release()
    second = SingleInstance(tmp_path)
    assert second.claim() is Claim.OWNED
    second.release()


def test_a_crashed_windows_lock_is_taken_over(tmp_path):
    holder = _lock_holder(tmp_path)
    holder.send_signal(signal.SIGKILL)
    _end(holder)
    instance = SingleInstance(tmp_path)
    assert instance.claim() is Claim.OWNED
    instance.release()


def test_a_window_that_does_not_answer_is_reported(tmp_path):
    holder = _lock_holder(tmp_path)
    try:
        assert SingleInstance(tmp_path).claim() is Claim.UNREACHABLE
    finally:
        holder.kill()
        _end(holder)


def _end(process: subprocess.Popen) -> None:
    process.wait()
    if process.stdout is not None:
        process.stdout.close()
