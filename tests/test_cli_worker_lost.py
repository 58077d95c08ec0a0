"""A worker lost under a command line (issue 25): llama.cpp aborts the
process that uses the worker, so ``arbor --worker …`` runs its command in a
child (``app/cli/guarded.py``) and says in one line which worker was lost,
without the debugger backtrace llama.cpp would print; the message sent is
stored, and the conversation goes on without that worker.

Real parts: two ``arbor worker`` processes on 127.0.0.1, ``arbor``
processes on the tiny model, the data folder's database.
"""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from app.platform import paths
from tests.conftest import ROOT, run_cli
from tests.workers import free_ports, running_worker

WAIT_S = 60


def _reply_being_written(data_dir: Path) -> int | None:
    """The id of the reply a process is writing now, if any."""
    with contextlib.closing(
        sqlite3.connect(paths.database_path(data_dir), timeout=5)
    ) as con:
        found = con.execute(
            "SELECT id FROM node WHERE role = 'assistant' AND status = 'generating'"
        ).fetchone()
    return None if found is None else int(found[0])


def test_a_worker_lost_mid_reply_is_one_line_and_the_message_is_kept(
    tiny_model, data_dir
):
    first, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    with running_worker(first), running_worker(second) as (second_process, _, _):
        flags = ["--data-dir", data_dir, "--model", tiny_model]
        on_workers = [*flags, "--worker", first, "--worker", second]
        root = run_cli(*on_workers, "new").json["node"]
        send = ["send", str(root), "Tell me a long story.", "--max-tokens", "3000"]
        sending = subprocess.Popen(
            [sys.executable, "-m", "app", *map(str, on_workers), *send],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + WAIT_S
        while (reply := _reply_being_written(data_dir)) is None:
            assert sending.poll() is None, sending.communicate()
            assert time.monotonic() < deadline, "the reply never began"
            time.sleep(0.05)
        second_process.kill()  # SIGKILL, mid-reply
        out, err = sending.communicate(timeout=WAIT_S)

    assert sending.returncode == 1
    assert err.splitlines()[-1] == (
        f"arbor: error: Worker {second} was lost (it stopped answering). Your "
        "messages and checkpoints are saved."
    )
    # llama.cpp's own line may come before it, not a debugger's backtrace.
    assert len(err.splitlines()) <= 2, err
    assert "Traceback" not in err and out == ""
    # The message and what the reply had are stored; the conversation goes
    # on here, without workers, under the interrupted reply.
    shown = run_cli(*flags, "show", reply).json["messages"]
    assert [m["role"] for m in shown] == ["system", "user", "assistant"]
    assert shown[1]["text"] == "Tell me a long story."
    assert shown[2]["status"] == "interrupted"
    again = run_cli(*flags, "send", reply, "Shorter?", "--max-tokens", 4)
    assert again.returncode == 0, again.stderr
