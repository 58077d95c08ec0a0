"""A bound on how long llama.cpp waits for a worker (issue 43).

llama.cpp's RPC client (ggml-rpc) talks to each worker over a blocking TCP
socket, from a thread of its own, without a timeout. A worker that stops
answering without closing its connection (its process stopped, its machine
frozen, the network gone without a reset) leaves that thread in ``recv``
for good, and the process waiting behind it: ``arbor --worker A --worker B
send`` said nothing for minutes, and the window's engine waited until the
user pressed Stop and its grace ran out. A worker that is killed, on the
other hand, closes the connection; ggml-rpc's ``recv`` fails, and it aborts
the process ("Remote RPC server crashed"), which Arbor already turns into
one line naming the worker that no longer answers (the window's child:
``child_process``; the command line's: ``app/cli/guarded.py``).

So a silent worker is made to look like a dead one: a process that uses
workers gives each of llama.cpp's sockets to them a receive and a send
timeout (``SO_RCVTIMEO``, ``SO_SNDTIMEO``) of ``worker_timeout()`` seconds,
60 unless ``ARBOR_WORKER_TIMEOUT`` says otherwise. A request the worker
does not answer within that fails in ggml-rpc, which aborts, and the worker
is named lost as if it had been killed: within the bound plus the hello
that names it (``child_process.LOST_HELLO_S``). The option bounds one wait
for the worker, not a whole job: a long load or a long reply goes on as
long as each answer comes. What must fit is the longest single answer, a
batch computed on the worker: 512 tokens of a large model on a slow CPU
can take tens of seconds, hence a minute, not a few seconds.

The sockets are llama.cpp's, made inside ggml-rpc when it first needs a
worker (and again if it lets one go), so a daemon thread looks at the
process's open descriptors every ``_LOOK_S`` and sets the options on each
TCP socket connected to a worker's address, through a duplicate of the
descriptor (options belong to the socket, not to the descriptor). Setting
them while another thread waits in ``recv`` applies from its next call; a
socket is seen within ``_LOOK_S`` of its making, before a reply waits on it
(a worker's sockets are made as the model loads and kept while it is
loaded). A wait that began before its socket was seen is not bounded: a
worker that stops in that quarter of a second still hangs the process.

Where it does not reach: systems that list no descriptors (Windows: there
the window's Stop, with its grace, still ends such a job), and llama.cpp
builds that talk to workers over RDMA rather than TCP.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
import struct
import threading
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

# Seconds a worker has to answer one request before it is declared lost.
WORKER_TIMEOUT_S = 60.0
# Set in seconds, it replaces WORKER_TIMEOUT_S (for a worker known to be slow,
# and for tests).
TIMEOUT_ENV = "ARBOR_WORKER_TIMEOUT"
# How often the open descriptors are looked at (seconds): a socket is bounded
# this long after llama.cpp made it (a wait begun before is not). Listing some
# tens of descriptors four times a second costs nothing that shows.
_LOOK_S = 0.25
# Where a process's open descriptors are listed: Linux, then the BSDs and macOS.
_FD_FOLDERS = (Path("/proc/self/fd"), Path("/dev/fd"))


def worker_timeout() -> float:
    """Seconds a worker has to answer one request: ``TIMEOUT_ENV`` when it
    holds a positive number, else ``WORKER_TIMEOUT_S``."""
    try:
        seconds = float(os.environ.get(TIMEOUT_ENV, ""))
    except ValueError:
        return WORKER_TIMEOUT_S
    return seconds if seconds > 0 else WORKER_TIMEOUT_S


class WorkerSockets:
    """Bounds the waits of this process's sockets to ``workers``.

    Parameters
    ----------
    workers
        ``HOST:PORT`` of each worker, as given to llama.cpp.
    timeout_s
        The receive and send timeout; None: ``worker_timeout()``.

    ``start`` begins looking (a daemon thread); ``bound_now`` looks once.
    """

    def __init__(self, workers: Sequence[str], timeout_s: float | None = None) -> None:
        self.timeout_s = worker_timeout() if timeout_s is None else timeout_s
        self._peers = _addresses(workers)
        # Sockets already looked at, by descriptor and inode: a descriptor
        # number is used again for a new socket once the old one is closed.
        self._seen: set[tuple[int, int]] = set()
        # The looking thread and a caller of bound_now share what was seen.
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._look, name="arbor-worker-sockets", daemon=True
        )

    @property
    def supported(self) -> bool:
        """Whether this system lists a process's descriptors."""
        return _fd_folder() is not None

    def start(self) -> None:
        """Look now, then every ``_LOOK_S``, until ``stop`` (or the end of
        the process: the thread is a daemon)."""
        if not self.supported:
            log.info("no bound on the workers' answers: descriptors are not listed")
            return
        self.bound_now()
        self._thread.start()

    def stop(self) -> None:
        """Stop looking (the options set stay)."""
        self._stopped.set()

    def bound_now(self) -> int:
        """Set the timeouts on the sockets to workers not seen before;
        return how many were set. Any thread; never raises."""
        folder = _fd_folder()
        if folder is None or not self._peers:
            return 0
        with self._lock:
            try:
                names = os.listdir(folder)
            except OSError as exc:  # out of descriptors, say: next time
                log.warning("the workers' sockets were not looked at: %s", exc)
                return 0
            now: set[tuple[int, int]] = set()
            bounded = 0
            for name in names:
                key = _socket_key(name)
                if key is None:
                    continue
                now.add(key)
                if key in self._seen:
                    continue
                verdict = self._bound(key[0])
                if verdict is None:
                    continue  # not connected yet: looked at again next time
                self._seen.add(key)
                bounded += verdict
            self._seen &= now
            return bounded

    def _bound(self, fd: int) -> bool | None:
        """Bound ``fd`` if it is a socket connected to a worker: True if set,
        False if it is another socket, None if it is not connected yet."""
        try:
            duplicate = socket.socket(fileno=os.dup(fd))
        except OSError:
            return False  # closed meanwhile, or no socket Python knows
        with duplicate:
            try:
                peer = duplicate.getpeername()
            except OSError:
                return None
            if not isinstance(peer, tuple) or (peer[0], peer[1]) not in self._peers:
                return False
            whole = int(self.timeout_s)
            wait = struct.pack("@ll", whole, int((self.timeout_s - whole) * 1e6))
            try:
                duplicate.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, wait)
                duplicate.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, wait)
            except OSError as exc:
                log.warning("no bound on the socket to %s: %s", peer, exc)
                return False
        log.debug("answers from %s:%s bounded to %g s", *peer[:2], self.timeout_s)
        return True

    def _look(self) -> None:
        while not self._stopped.wait(_LOOK_S):
            self.bound_now()


def _fd_folder() -> Path | None:
    for folder in _FD_FOLDERS:
        if folder.is_dir():
            return folder
    return None


def _socket_key(name: str) -> tuple[int, int] | None:
    """(descriptor, inode) of the open descriptor ``name`` if it is a socket."""
    with contextlib.suppress(ValueError, OSError):
        fd = int(name)
        info = os.fstat(fd)
        if stat.S_ISSOCK(info.st_mode):
            return fd, info.st_ino
    return None


def _addresses(workers: Sequence[str]) -> set[tuple[str, int]]:
    """Every (address, port) the workers' names resolve to."""
    found: set[tuple[str, int]] = set()
    for worker in workers:
        host, _colon, port = worker.rpartition(":")
        try:
            infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError) as exc:
            log.warning("worker %s not resolved for its bound: %s", worker, exc)
            continue
        for *_rest, address in infos:
            found.add((str(address[0]), int(address[1])))
    return found
