"""``arbor worker``: serve this machine's devices to Arbor on another machine.

Starts llama.cpp's RPC server in this process (``app.backend.rpc_worker``),
checks that it answers, prints the address to give the other machine, and
runs until Ctrl+C or SIGTERM. Off this computer's own address it says
loudly that RPC has no authentication or encryption. Arbor's lines go to
stderr: stdout is llama.cpp's (its server's banner), and in one CI run a
line of ours written there never reached the reader.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType

# How long the server has to answer its own hello before it counts as not
# started (binding a taken port makes llama.cpp's server return at once).
_START_S = 10.0

UNSAFE_WARNING = (
    "WARNING: llama.cpp's RPC has no authentication and no encryption. Anyone "
    "who can reach {endpoint} can use this machine's devices and memory, and "
    "read what they compute. Listen on this address only on a network you "
    "trust, never on the internet."
)


def run_worker(host: str, port: int, threads: int | None) -> int:
    """Serve until stopped; the exit status."""
    from app.backend import rpc_worker
    from app.backend.threads import automatic_threads
    from app.server.serve import is_loopback

    endpoint = f"{host}:{port}"
    # From here on Ctrl+C and SIGTERM end the process (there is no call that
    # stops llama.cpp's server).
    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    if not is_loopback(host):
        print(UNSAFE_WARNING.format(endpoint=endpoint), file=sys.stderr, flush=True)
    try:
        serving = rpc_worker.serve(host, port, threads or automatic_threads())
    except rpc_worker.WorkerError as exc:
        print(f"arbor: error: {exc}", file=sys.stderr)
        return 1
    version = _answering(host, port, serving.thread)
    if version is None:
        print(
            f"arbor: error: could not listen at {endpoint} (is the port taken, "
            "or the address not this machine's?)",
            file=sys.stderr,
        )
        return 1
    print(
        f"Serving {', '.join(serving.devices)} at {endpoint} (llama.cpp RPC "
        f"{version}). Give the other machine this address: {endpoint}\n"
        "Ctrl+C stops.",
        file=sys.stderr,
        flush=True,
    )
    while serving.thread.is_alive():
        serving.thread.join(0.5)
    print("arbor: error: the RPC server stopped by itself", file=sys.stderr)
    return 1


def _answering(host: str, port: int, thread: threading.Thread) -> str | None:
    """The server's protocol version once it answers; None if its thread
    ended first or it never did."""
    from app.backend.rpc_worker import hello

    # Listening on every address: ask on this computer's own.
    probe = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline:
        try:
            return hello(probe, port, timeout=1.0)
        except OSError:
            if not thread.is_alive():
                return None
            time.sleep(0.05)
    return None


def _stop(_signum: int | None = None, _frame: FrameType | None = None) -> None:
    print("Stopped.", file=sys.stderr, flush=True)
    # The server's thread is inside llama.cpp with no way to end it: the
    # process ends here, as llama.cpp's own rpc-server does.
    os._exit(0)
