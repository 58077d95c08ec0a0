"""Using ``arbor worker``s: other machines' devices, over llama.cpp's RPC backend.

llama.cpp's RPC client has no way to fail softly: registering a server where
nothing listens, or one that speaks another protocol version, aborts the
whole process, and one busy with another client (a server takes one at a
time) makes it wait forever (issue 25). So ``connect`` asks every worker
``rpc_worker.hello`` first, with a timeout, and registers none until all of
them answered in a version this build speaks: a worker that cannot be used
is a ``WorkerUnavailable`` naming it, and the process goes on. Registering is
what llama.cpp's own tools do: ``ggml_backend_rpc_add_server`` (looked up in
the RPC backend the wheel loads), then ``ggml_backend_register``, after which
the worker's devices ("RPC0", "RPC1", ... in the order they were added) are
llama.cpp devices like any GPU, and a load names them in
``llama_model_params.devices``.

A registration lasts as long as the process: llama.cpp cannot take a device
back, and would offload to it in any later load that names no devices. So a
process uses one set of workers; another set (or none, after some) is
refused, and asks for a new process.

What the hello cannot prevent: llama.cpp connects again for every query and
for the load itself, so a worker that stops or takes another client between
the hello and the load still aborts or stalls this process; and one that
dies while a model is loaded aborts it at the next decode or capture. The
window therefore runs a model placed on workers in a child process
(``app/runner/child_process.py``), which such an abort ends, not the window.
"""

from __future__ import annotations

import ctypes
import os
import socket
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.backend import devices, rpc_worker
from app.backend.errors import BackendError, WorkerUnavailable
from app.backend.settings import consecutive_runs
from app.backend.values import LayerHolder

# RPC_PROTO_MAJOR_VERSION and _MINOR_VERSION in ggml-rpc.h, as vendored by the
# llama-cpp-python this Arbor pins (0.3.36). llama.cpp's client aborts unless a
# server's major version is this one and its minor version no newer.
# tests/backend/test_rpc_workers.py checks a worker of this install answers them.
PROTOCOL = (7, 0)
# Seconds a worker has to answer the hello: a worker on a network answers in
# milliseconds, so this is only ever waited out by one that cannot answer.
HELLO_TIMEOUT_S = 5.0

_ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)

# ggml's functions as llama.cpp itself calls them (rpc_worker declares the
# ones both modules use: ggml_backend_reg_get_proc_address).
_ggml = devices.ggml_library()
_ggml.ggml_backend_register.argtypes = [ctypes.c_void_p]
_ggml.ggml_backend_register.restype = None
_ggml.ggml_backend_reg_dev_count.argtypes = [ctypes.c_void_p]
_ggml.ggml_backend_reg_dev_count.restype = ctypes.c_size_t
_ggml.ggml_backend_reg_dev_get.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_ggml.ggml_backend_reg_dev_get.restype = ctypes.c_void_p


@dataclass(frozen=True)
class WorkerDevice:
    """One device a worker serves, as registered in this process."""

    name: str  # llama.cpp's name for it here: "RPC0", "RPC1", ...
    index: int  # its index among the worker's devices
    handle: int  # the ggml_backend_dev_t
    total_bytes: int  # its memory, which tells a worker's CPU from its GPU


@dataclass(frozen=True)
class Worker:
    """A worker that answered and was registered."""

    address: str  # HOST:PORT, as given
    version: str  # the RPC protocol version it reported
    devices: tuple[WorkerDevice, ...]

    def buffer_name(self, device: WorkerDevice) -> str:
        """What llama.cpp calls ``device``'s buffers in its log: "RPC0[host:port]"."""
        return f"RPC{device.index}[{self.address}]"


# The workers this process registered, by address.
_registered: dict[str, Worker] = {}
# The models of this process loaded on each worker now. Their buffers keep
# llama.cpp's one connection to the worker open, which its later loads share;
# the worker serves one client at a time, so it would not answer a hello
# from this process meanwhile.
_holding: Counter[str] = Counter()


def connect(
    addresses: Sequence[str], timeout: float = HELLO_TIMEOUT_S
) -> tuple[Worker, ...]:
    """Check every worker at ``addresses`` answers, then register them all.

    ``addresses`` are ``HOST:PORT`` as ``settings.worker_address`` writes
    them. Raises ``WorkerUnavailable`` for the first worker that cannot be
    used (none is registered then), and ``BackendError`` where this process
    already uses other workers or where this build has no RPC backend.
    """
    devices.load_backends()
    if set(addresses) != set(_registered) and _registered:
        raise BackendError(
            f"This Arbor process already uses the workers {', '.join(_registered)}; "
            "llama.cpp cannot let go of them. Start a new one for other workers."
        )
    # Registered ones too (llama.cpp connects again for the load), unless a
    # model of this process holds the connection the load will share.
    versions = _probe_all([a for a in addresses if not _holding[a]], timeout)
    new = [address for address in addresses if address not in _registered]
    if new:
        # A worker lost from now on aborts this process, as expected: without
        # this, llama.cpp first attaches gdb to print a backtrace (seconds,
        # and pages of it on the terminal) of what is no bug.
        os.environ.setdefault("GGML_NO_BACKTRACE", "1")
        add_server = _add_server()
        for address in new:
            _registered[address] = _register(add_server, address, versions[address])
    return tuple(_registered[address] for address in addresses)


def probe(addresses: Sequence[str], timeout: float = HELLO_TIMEOUT_S) -> None:
    """Check every worker at ``addresses`` answers in a version this build
    speaks, registering none: ``WorkerUnavailable`` names the first that
    does not. The window asks before it frees a model for a load on workers
    in a process of its own (``app/runner/host.py``)."""
    _probe_all(addresses, timeout)


def hold(workers: Sequence[Worker]) -> None:
    """Note that a model was loaded on ``workers`` (until ``release``)."""
    _holding.update(worker.address for worker in workers)


def release(workers: Sequence[Worker]) -> None:
    """Note that a model ``hold`` noted was freed."""
    _holding.subtract(worker.address for worker in workers)


def device_list(workers: Sequence[Worker]) -> Any:
    """The workers' devices as the NULL-terminated array a load names."""
    handles = [device.handle for worker in workers for device in worker.devices]
    return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)


def device_shares(workers: Sequence[Worker], counts: Sequence[int]) -> list[int]:
    """The layers each of the workers' devices holds, in ``device_list``
    order, for ``counts`` layers per worker: a worker's count split evenly
    between its devices, the first ones taking one more where it does not
    divide (Arbor knows a worker's devices by their memory only, not by
    their speed)."""
    shares: list[int] = []
    for worker, count in zip(workers, counts, strict=True):
        each, more = divmod(count, len(worker.devices))
        shares += [each + (index < more) for index in range(len(worker.devices))]
    return shares


def buffer_names(workers: Sequence[Worker]) -> dict[str, str]:
    """The name of each worker device's buffers, by the device's name."""
    return {d.name: w.buffer_name(d) for w in workers for d in w.devices}


def signature(workers: Sequence[Worker], holders: Sequence[LayerHolder]) -> str:
    """Which machine and device holds and computes each run of layers, for
    the backend profile: "layers 0-1 on 10.0.0.2:50052 device 0
    (33501372416 bytes, RPC 7.0.0), layer 2 on 10.0.0.3:50052 device 0
    (...); weights not repacked".

    A worker is known by its address and its device's memory (a CPU's and a
    GPU's differ): the RPC protocol says nothing more about what computes.
    """
    served = {d.name: (w, d) for w in workers for d in w.devices}
    runs = []
    for holder in holders:
        for first, last in consecutive_runs(holder.layers):
            span = f"layer {first}" if first == last else f"layers {first}-{last}"
            if holder.device in served:
                worker, device = served[holder.device]
                where = (
                    f"{worker.address} device {device.index} ({device.total_bytes} "
                    f"bytes, RPC {worker.version})"
                )
            else:
                where = f"this machine's {holder.device}"
            runs.append((first, f"{span} on {where}"))
    placed = ", ".join(text for _first, text in sorted(runs))
    # Weights are never repacked with workers (the engine turns it off), so
    # that this machine's layers compute as the workers' would.
    return f"{placed}; weights not repacked"


class CheckFailed(WorkerUnavailable):
    """A worker that did not answer its hello as one this build can use.

    ``status`` says why in a few words, for a list of workers ("nothing
    listens there"); the message says it in full, with what to do.
    """

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def check(address: str, timeout: float = HELLO_TIMEOUT_S) -> str:
    """The protocol version of the worker at ``address`` (``HOST:PORT``), if
    this build speaks it; registers nothing, so nothing can abort.

    Raises ``CheckFailed`` (a ``WorkerUnavailable``) where the worker cannot
    be used: an unknown host, nothing listening, no answer (busy with
    another client), an unreachable machine, something else than a worker,
    or another protocol version.
    """
    host, port = _host_port(address)
    return _hello(address, _resolve(address, host), port, timeout)


def _probe_all(addresses: Sequence[str], timeout: float) -> dict[str, str]:
    """Every worker's protocol version; ``WorkerUnavailable`` for the first
    that does not answer in one this build speaks, or that is another's twin."""
    versions: dict[str, str] = {}
    seen: dict[tuple[str, int], str] = {}
    for address in addresses:
        host, port = _host_port(address)
        ip = _resolve(address, host)
        if (ip, port) in seen:
            # Both would be connected at once: the second would wait forever.
            raise WorkerUnavailable(
                f"Workers {seen[ip, port]} and {address} are the same worker; "
                "name it once."
            )
        seen[ip, port] = address
        versions[address] = _hello(address, ip, port, timeout)
    return versions


def _host_port(address: str) -> tuple[str, int]:
    host, _colon, port = address.rpartition(":")
    return host, int(port)


def _resolve(address: str, host: str) -> str:
    """The IPv4 address llama.cpp will connect to (it resolves by IPv4 only)."""
    try:
        return socket.gethostbyname(host)
    except OSError as exc:
        raise CheckFailed(
            "unknown host",
            f"Worker {address}: the host {host} is not known here "
            f"({exc.strerror or exc}).",
        ) from None


def _hello(address: str, ip: str, port: int, timeout: float) -> str:
    """The worker's protocol version, if this build speaks it."""
    try:
        version = rpc_worker.hello(ip, port, timeout)
    except ConnectionRefusedError:
        raise CheckFailed(
            "nothing listens there",
            f"Worker {address}: nothing listens there (connection refused). Start "
            f"`arbor worker --listen HOST:{port}` on that machine, or check the "
            "address.",
        ) from None
    except rpc_worker.NoHello:
        raise CheckFailed(
            "busy with another client",
            f"Worker {address} accepted the connection but did not answer in "
            f"{timeout:g} s: it is busy with another Arbor (a worker serves one "
            "at a time), or it is not an Arbor worker.",
        ) from None
    except rpc_worker.NotRpc as exc:
        raise CheckFailed(
            "not a worker",
            f"Worker {address} is not an Arbor worker or llama.cpp RPC server ({exc}).",
        ) from None
    except TimeoutError:
        raise CheckFailed(
            "unreachable",
            f"Worker {address} could not be reached in {timeout:g} s (the machine "
            "is off or unreachable, or a firewall drops the connection).",
        ) from None
    except OSError as exc:
        raise CheckFailed(
            "unreachable",
            f"Worker {address} could not be reached: {exc.strerror or exc}.",
        ) from None
    major, minor, _patch = (int(part) for part in version.split("."))
    if major != PROTOCOL[0] or minor > PROTOCOL[1]:
        raise CheckFailed(
            f"another version (RPC {version})",
            f"Worker {address} speaks llama.cpp RPC {version}, this Arbor speaks "
            f"{PROTOCOL[0]}.{PROTOCOL[1]}: install the same Arbor version on both "
            "machines.",
        )
    return version


def _add_server() -> Any:
    """llama.cpp's ``ggml_backend_rpc_add_server``; ``BackendError`` without RPC."""
    reg = rpc_worker.rpc_backend()
    if reg is None:
        raise BackendError(rpc_worker.NO_RPC)
    address = _ggml.ggml_backend_reg_get_proc_address(
        reg, b"ggml_backend_rpc_add_server"
    )
    if not address:
        raise BackendError("This build's RPC backend cannot connect to workers.")
    return _ADD_SERVER(address)


def _register(add_server: Any, address: str, version: str) -> Worker:
    """Register the worker at ``address`` (it answered its hello just now)."""
    reg = add_server(address.encode())
    if not reg:
        raise WorkerUnavailable(f"Worker {address} serves no device.")
    _ggml.ggml_backend_register(reg)
    served = []
    for index in range(_ggml.ggml_backend_reg_dev_count(reg)):
        handle = _ggml.ggml_backend_reg_dev_get(reg, index)
        device = devices.describe(handle)
        served.append(WorkerDevice(device.name, index, handle, device.total_bytes))
    return Worker(address, version, tuple(served))
