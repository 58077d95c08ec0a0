"""``arbor workers``: what each worker offers, as JSON lines, from a process
of its own (issue 25; the window's Settings → Workers runs it as a child).
Workers are ``arbor worker`` processes on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import run_cli
from tests.helpers.workers import free_port, running_worker


@pytest.fixture(scope="module")
def worker() -> Iterator[str]:
    """A worker serving this machine's CPU: its address."""
    address = f"127.0.0.1:{free_port()}"
    with running_worker(address):
        yield address


def _lines(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_every_hello_first_then_the_ready_workers_devices(worker):
    nobody = f"127.0.0.1:{free_port()}"
    result = run_cli("workers", "--timeout", 2, worker, nobody, timeout=60)
    ready, refused, surveyed = _lines(result.stdout)
    assert ready == {"address": worker, "status": "ready", "version": "7.0.0"}
    assert refused["address"] == nobody
    assert refused["status"] == "nothing listens there"
    assert "connection refused" in str(refused["message"])
    # The worker serves this machine's CPU: one device, its memory as ggml
    # reports it.
    assert surveyed["address"] == worker
    [device] = surveyed["devices"]
    assert device["index"] == 0
    assert 0 < device["free_bytes"] <= device["total_bytes"]
    # Not every worker could be used.
    assert result.returncode == 1


def test_all_ready_is_success_and_a_twin_is_not_surveyed(worker):
    assert run_cli("workers", worker, timeout=60).returncode == 0
    port = worker.rpartition(":")[2]
    twin = f"localhost:{port}"
    result = run_cli("workers", worker, twin, timeout=60)
    lines = _lines(result.stdout)
    # Both answer their hello (one after the other); registered together the
    # second would wait forever, so neither is.
    assert [line.get("status") for line in lines[:2]] == ["ready", "ready"]
    assert all("same worker" in str(line["survey_failed"]) for line in lines[2:])
    assert result.returncode == 1


def test_an_address_that_is_no_worker_is_a_usage_error():
    result = run_cli("workers", "[::1]:50052", timeout=60)
    assert result.returncode == 2
    assert "IPv6" in result.stderr
