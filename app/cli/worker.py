"""``arbor worker``: serve this machine's devices to Arbor on another machine;
``arbor workers``: check such workers from here. Their grammar and bodies.

Starts llama.cpp's RPC server in this process (``app.backend.rpc_worker``),
checks that it answers, prints the address to give the other machine, and
runs until Ctrl+C or SIGTERM. Off this computer's own address it says
loudly that RPC has no authentication or encryption. Arbor's lines go to
stderr: stdout is llama.cpp's (its server's banner), and in one CI run a
line of ours written there never reached the reader.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from app.cli.arguments import int_type, positive_int, worker_type

# How long the server has to answer its own hello before it counts as not
# started (binding a taken port makes llama.cpp's server return at once).
_START_S = 10.0

UNSAFE_WARNING = (
    "WARNING: llama.cpp's RPC has no authentication and no encryption. Anyone "
    "who can reach {endpoint} can use this machine's devices and memory, and "
    "read what they compute. Listen on this address only on a network you "
    "trust, never on the internet."
)


# llama.cpp's rpc-server listens on this port unless told otherwise.
DEFAULT_WORKER_PORT = 50052


def _endpoint(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets: ``[::1]:50052``)."""
    host, colon, port = value.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT with a port of 1 to 65535, not {value!r}"
        )
    return host, int(port)


def add_parser(sub: Any) -> None:
    """Add ``worker`` and ``workers`` to the CLI's subparsers ``sub``."""
    worker = sub.add_parser(
        "worker",
        help="lend this machine's devices to Arbor on another machine (llama.cpp RPC)",
    )
    worker.set_defaults(handler=_cmd_worker)
    worker.add_argument(
        "--listen",
        type=_endpoint,
        default=("127.0.0.1", DEFAULT_WORKER_PORT),
        metavar="HOST:PORT",
        help=f"address to listen on (default 127.0.0.1:{DEFAULT_WORKER_PORT}; RPC "
        "has no authentication or encryption: use other addresses on a trusted "
        "network only)",
    )
    worker.add_argument(
        "--threads",
        dest="worker_threads",
        type=positive_int,
        help="CPU threads for the layers computed here (default: automatic)",
    )

    workers = sub.add_parser(
        "workers",
        help="check `arbor worker`s: whether each answers, its devices and their "
        "free memory (one JSON line per finding)",
    )
    workers.add_argument(
        "addresses",
        type=worker_type,
        nargs="+",
        metavar="HOST:PORT",
        help="a worker to check",
    )
    workers.add_argument(
        "--timeout",
        dest="hello_timeout",
        type=int_type(1, 600, "--timeout must be 1 to 600 seconds"),
        help="seconds each worker has to answer (default 5, as with --worker)",
    )
    workers.set_defaults(handler=_cmd_workers)


def _cmd_worker(args: argparse.Namespace) -> int:
    host, port = args.listen
    return run_worker(host, port, args.worker_threads)


def _cmd_workers(args: argparse.Namespace) -> int:
    from app.backend import rpc_client, worker_survey

    def report(finding: dict[str, object]) -> None:
        # At once: the window reads each line as it comes, and a worker that
        # aborts this process must not take the lines before it along.
        print(json.dumps(finding), flush=True)

    timeout = args.hello_timeout or rpc_client.HELLO_TIMEOUT_S
    return 0 if worker_survey.survey(args.addresses, timeout, report) else 1


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
