"""``arbor worker`` processes for tests, on 127.0.0.1: started, read until
they serve, and killed by their process at the end."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest

from tests.conftest import ROOT

START_S = 60


def free_port() -> int:
    """A port nothing listens on now (the system's pick)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different ports nothing listens on now: each held while the
    next is picked, so that the system cannot pick one twice."""
    with ExitStack() as held:
        probes = [held.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]


@contextmanager
def running_worker(listen: str) -> Iterator[tuple[subprocess.Popen[str], str, str]]:
    """A running ``arbor worker --listen LISTEN``, its "Serving" line and what
    it said before (on stderr, where Arbor's lines go)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "worker", "--listen", listen, "--threads", "1"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        before = ""
        for line in process.stderr:
            if line.startswith("Serving"):
                break
            before += line
        else:
            pytest.fail(f"the worker never served: {before} {process.communicate()}")
        yield process, line, before
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=START_S)
