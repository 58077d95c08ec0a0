"""``arbor worker`` (issue 25, its first part): llama.cpp's RPC server run in
an Arbor process on 127.0.0.1, answering the protocol's hello, stopped by
Ctrl+C; a taken port and a bad address are clear errors; off loopback it
warns that RPC has no authentication."""

from __future__ import annotations

import re
import signal
import socket

import pytest

from app.backend.rpc_worker import hello
from tests.conftest import run_cli
from tests.helpers.workers import START_S, free_port, running_worker


def test_a_worker_serves_its_devices_answers_hello_and_stops_on_ctrl_c():
    port = free_port()
    with running_worker(f"127.0.0.1:{port}") as (process, serving, before):
        found = re.search(r"at (127\.0\.0\.1:\d+) \(llama\.cpp RPC ([\d.]+)\)", serving)
        assert found is not None, serving
        assert found.group(1) == f"127.0.0.1:{port}"
        assert "CPU" in serving
        # Asked twice: the server takes one client after another.
        assert hello("127.0.0.1", port) == found.group(2)
        assert hello("127.0.0.1", port) == found.group(2)
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=START_S)
        assert process.returncode == 0, err
        assert "Stopped." in err
        assert "WARNING" not in before + err


def test_off_loopback_the_worker_warns_that_rpc_has_no_authentication():
    port = free_port()
    with running_worker(f"0.0.0.0:{port}") as (process, _serving, before):
        assert re.fullmatch(r"\d+\.\d+\.\d+", hello("127.0.0.1", port))
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=START_S)
        assert process.returncode == 0
        assert "no authentication and no encryption" in before


def test_a_taken_port_is_an_error_not_a_hang():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("worker", "--listen", f"127.0.0.1:{port}", timeout=START_S)
    assert result.returncode == 1
    assert f"could not listen at 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("listen", ["50052", "host:", "host:0", "host:70000"])
def test_a_bad_address_is_a_usage_error(listen):
    result = run_cli("worker", "--listen", listen, timeout=START_S)
    assert result.returncode == 2
    assert "HOST:PORT" in result.stderr


def test_hello_to_nothing_is_an_os_error_at_once():
    with pytest.raises(OSError):
        hello("127.0.0.1", free_port(), timeout=2.0)
