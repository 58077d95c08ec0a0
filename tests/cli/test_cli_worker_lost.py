"""A worker lost under a command line (issue 25): llama.cpp aborts the
process that uses the worker, so ``arbor --worker …`` runs its command in a
child (``app/cli/guarded.py``) and says in one line which worker was lost,
without the debugger backtrace llama.cpp would print; the message sent is
stored, the cut reply is marked ``interrupted`` by the time the command
exits, and the conversation goes on without that worker.

A worker that stops answering without closing its connection (SIGSTOP,
as a frozen machine) is declared lost the same way within its bound
(``ARBOR_WORKER_TIMEOUT``, set short here; issue 43): it hung the command
for good before. The bound is a receive and send timeout on llama.cpp's
sockets to the workers, and on those alone.

Real parts: two ``arbor worker`` processes on 127.0.0.1, ``arbor``
processes on the tiny model, the data folder's database.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.platform import paths
from app.runner.worker_sockets import (
    TIMEOUT_ENV,
    WORKER_TIMEOUT_S,
    WorkerSockets,
    worker_timeout,
)
from tests.conftest import ROOT, run_cli
from tests.helpers.workers import free_ports, running_worker

WAIT_S = 60
# The bound on a worker's answer in these tests (seconds).
BOUND_S = 3


def _reply_being_written(data_dir: Path) -> int | None:
    """The id of the reply a process is writing now, if any."""
    with contextlib.closing(
        sqlite3.connect(paths.database_path(data_dir), timeout=5)
    ) as con:
        found = con.execute(
            "SELECT id FROM node WHERE role = 'assistant' AND status = 'generating'"
        ).fetchone()
    return None if found is None else int(found[0])


def _node(data_dir: Path, node: int) -> tuple[str, str]:
    """The stored status and text of ``node``, read without an Arbor process
    (one would mark a reply left ``generating`` as it opens the database)."""
    with contextlib.closing(
        sqlite3.connect(paths.database_path(data_dir), timeout=5)
    ) as con:
        status, text = con.execute(
            "SELECT status, text FROM node WHERE id = ?", (node,)
        ).fetchone()
    return str(status), str(text or "")


def _status(data_dir: Path, node: int) -> str:
    return _node(data_dir, node)[0]


def _streaming(data_dir: Path, reply: int, sending: subprocess.Popen[str]) -> None:
    """Wait until ``reply``'s text was saved twice while it is written (a
    save every half second): the workers' sockets are in use, and bounded."""
    deadline = time.monotonic() + WAIT_S
    texts = {""}
    while len(texts) < 3:
        assert sending.poll() is None, sending.communicate()
        assert time.monotonic() < deadline, "the reply did not go on"
        status, text = _node(data_dir, reply)
        assert status == "generating", (status, text)
        texts.add(text)
        time.sleep(0.05)


def _sending(
    data_dir: Path, on_workers: list[str | Path], root: int, env: dict[str, str]
) -> tuple[subprocess.Popen[str], int]:
    """``arbor … send`` of a long reply, and the reply's id once it is being
    written."""
    send = ["send", str(root), "Tell me a long story.", "--max-tokens", "3000"]
    sending = subprocess.Popen(
        [sys.executable, "-m", "app", *map(str, on_workers), *send],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # Its own group: a command that hangs is ended with its child.
        start_new_session=True,
    )
    deadline = time.monotonic() + WAIT_S
    while (reply := _reply_being_written(data_dir)) is None:
        assert sending.poll() is None, sending.communicate()
        assert time.monotonic() < deadline, "the reply never began"
        time.sleep(0.05)
    return sending, reply


def test_a_worker_lost_mid_reply_is_one_line_and_the_message_is_kept(
    tiny_model, data_dir
):
    first, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    with running_worker(first), running_worker(second) as (second_process, _, _):
        flags = ["--data-dir", data_dir, "--model", tiny_model]
        on_workers = [*flags, "--worker", first, "--worker", second]
        root = run_cli(*on_workers, "new").json["node"]
        sending, reply = _sending(data_dir, on_workers, root, dict(os.environ))
        second_process.kill()  # SIGKILL, mid-reply
        out, err = sending.communicate(timeout=WAIT_S)
        # Marked by the command as it exited, not by the next one to open.
        assert _status(data_dir, reply) == "interrupted"

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


def test_a_worker_that_stops_answering_is_lost_within_the_bound(tiny_model, data_dir):
    first, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    with running_worker(first), running_worker(second) as (second_process, _, _):
        flags = ["--data-dir", data_dir, "--model", tiny_model]
        on_workers = [*flags, "--worker", first, "--worker", second]
        root = run_cli(*on_workers, "new").json["node"]
        env = {**os.environ, TIMEOUT_ENV: str(BOUND_S)}
        sending, reply = _sending(data_dir, on_workers, root, env)
        try:
            _streaming(data_dir, reply, sending)
            # Its connection stays open and nothing answers on it: a machine
            # frozen, or gone from the network without a word.
            second_process.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
            out, err = sending.communicate(timeout=WAIT_S)  # it hung for good
            took = time.monotonic() - stopped
        finally:
            second_process.send_signal(signal.SIGCONT)
            if sending.poll() is None:  # hung: it goes, and its child with it
                os.killpg(sending.pid, signal.SIGKILL)
                sending.communicate()

    assert sending.returncode == 1
    assert err.splitlines()[-1] == (
        f"arbor: error: Worker {second} was lost (it stopped answering). Your "
        "messages and checkpoints are saved."
    )
    assert len(err.splitlines()) <= 3, err  # llama.cpp's lines, then ours
    assert "Traceback" not in err and out == ""
    # Not before the bound (a lower bound holds on any machine; WAIT_S above
    # is what tells a hang).
    assert took >= BOUND_S
    assert _status(data_dir, reply) == "interrupted"
    shown = run_cli(*flags, "show", reply).json["messages"]
    assert shown[1]["text"] == "Tell me a long story."
    again = run_cli(*flags, "send", reply, "Shorter?", "--max-tokens", 4)
    assert again.returncode == 0, again.stderr


def test_only_the_sockets_to_workers_get_the_bound():
    # As llama.cpp's are: blocking sockets, no timeout of Python's.
    worker, other = (
        socket.create_server(("127.0.0.1", 0)),
        socket.create_server(("127.0.0.1", 0)),
    )
    with worker, other:
        address = f"127.0.0.1:{worker.getsockname()[1]}"
        to_worker = socket.create_connection(worker.getsockname())
        to_other = socket.create_connection(other.getsockname())
        with to_worker, to_other:
            to_worker.settimeout(None)
            sockets = WorkerSockets([address], timeout_s=0.5)
            assert sockets.bound_now() == 1
            assert sockets.bound_now() == 0  # seen already
            waits = struct.unpack("@ll", _timeouts(to_worker))
            assert waits == (0, 500_000)
            assert struct.unpack("@ll", _timeouts(to_other)) == (0, 0)
            # A worker that says nothing: the wait ends, as in ggml-rpc's
            # recv (which then aborts the process).
            with pytest.raises(BlockingIOError):
                to_worker.recv(8)


def _timeouts(connection: socket.socket) -> bytes:
    return connection.getsockopt(
        socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.calcsize("@ll")
    )


def test_the_bound_is_a_minute_unless_arbor_worker_timeout_says(monkeypatch):
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert worker_timeout() == WORKER_TIMEOUT_S == 60.0
    monkeypatch.setenv(TIMEOUT_ENV, "90")
    assert worker_timeout() == 90.0
    for unusable in ("", "never", "0", "-1"):
        monkeypatch.setenv(TIMEOUT_ENV, unusable)
        assert worker_timeout() == WORKER_TIMEOUT_S
