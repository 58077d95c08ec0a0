"""This machine's devices served to another Arbor over llama.cpp's RPC backend.

``arbor worker`` runs ggml-rpc's server inside this process
(``ggml_backend_rpc_start_server``, looked up in the RPC backend the wheel
loads, ``libggml-rpc``): the same Arbor install is the worker, no separate
``rpc-server`` binary. It serves the machine's accelerators, or its CPU where
it has none, as llama.cpp's own ``rpc-server`` does. The call blocks for the
life of the server and ctypes releases the GIL while it runs, so it runs on a
daemon thread and the main thread stays free for signals; there is no call to
stop it: ending the process does.

``hello`` asks a server its protocol version from Python, with a timeout.
llama.cpp's client aborts its whole process when a server is missing or
speaks another version, and waits forever on one busy with another client:
a client asks ``hello`` first (issue 25).
"""

from __future__ import annotations

import ctypes
import socket
import threading
from dataclasses import dataclass
from typing import Any

from app.backend import devices

# enum ggml_backend_dev_type (ggml-backend.h): what rpc-server leaves out of
# the devices it serves (the CPU unless there is nothing else; accelerators
# such as BLAS are not devices of their own).
_CPU, _ACCEL = 0, 3
# RPC_CMD_HELLO (14), its payload size (24: transport capabilities, none);
# the reply is a u64 size (28), then major, minor and patch, padding and 24
# bytes of capabilities.
_HELLO = bytes([14]) + (24).to_bytes(8, "little") + bytes(24)
_HELLO_REPLY_BYTES = 8 + 28

_START_SERVER = ctypes.CFUNCTYPE(
    None,
    ctypes.c_char_p,  # endpoint, host:port
    ctypes.c_char_p,  # cache folder (None: no cache)
    ctypes.c_size_t,  # CPU threads
    ctypes.c_size_t,  # number of devices
    ctypes.POINTER(ctypes.c_void_p),  # the devices
)

_ggml = devices.ggml_library()
_ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
_ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
_ggml.ggml_backend_reg_get_proc_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_ggml.ggml_backend_reg_get_proc_address.restype = ctypes.c_void_p
_ggml.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
_ggml.ggml_backend_dev_by_type.restype = ctypes.c_void_p


class WorkerError(Exception):
    """The worker cannot serve (a build without RPC, no device)."""


@dataclass(frozen=True)
class Serving:
    """A server running in this process: where, on which devices."""

    endpoint: str
    devices: tuple[str, ...]
    thread: threading.Thread


def serve(host: str, port: int, threads: int) -> Serving:
    """Start serving this machine's devices at ``host:port`` on a daemon
    thread; ``WorkerError`` if this build cannot."""
    devices.load_backends()
    start = _start_server()
    served = _served_devices()
    if not served:
        raise WorkerError("llama.cpp found no device to serve on this machine.")
    array = (ctypes.c_void_p * len(served))(*served)
    endpoint = f"{host}:{port}"
    thread = threading.Thread(
        target=start,
        args=(endpoint.encode(), None, threads, len(served), array),
        name="arbor-rpc-server",
        daemon=True,
    )
    thread.start()
    names = tuple(devices.device_name(device) for device in served)
    return Serving(endpoint, names, thread)


class NoHello(OSError):
    """A connection was made, but no hello came back in time: the server is
    busy with another client (it serves one at a time), or is no RPC server."""


class NotRpc(OSError):
    """What answered is not llama.cpp's RPC (it closed, or said something else)."""


def hello(host: str, port: int, timeout: float = 3.0) -> str:
    """The protocol version the server at ``host:port`` reports ("7.0.0").

    Raises ``OSError`` when nothing answers there in ``timeout`` seconds:
    ``ConnectionRefusedError`` (nothing listens), ``TimeoutError`` (no
    connection: the host is unreachable), ``NoHello`` (connected, no
    answer), ``NotRpc``, or another ``OSError`` from the network.
    """
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.sendall(_HELLO)
        reply = b""
        while len(reply) < _HELLO_REPLY_BYTES:
            try:
                chunk = connection.recv(_HELLO_REPLY_BYTES - len(reply))
            except TimeoutError as exc:
                raise NoHello(f"no hello in {timeout:g} s") from exc
            if not chunk:
                raise NotRpc("the connection closed before the server said hello")
            reply += chunk
    if int.from_bytes(reply[:8], "little") != 28:
        raise NotRpc("the answer is not ggml-rpc's")
    major, minor, patch = reply[8:11]
    return f"{major}.{minor}.{patch}"


NO_RPC = (
    "This build of llama.cpp has no RPC backend; rebuild it with -DGGML_RPC=ON "
    "(the Makefile's default)."
)


def rpc_backend() -> int | None:
    """llama.cpp's RPC backend (its ggml_backend_reg_t), None in a build
    without one."""
    devices.load_backends()
    reg: int | None = _ggml.ggml_backend_reg_by_name(b"RPC")
    return reg or None


def _start_server() -> Any:
    reg = rpc_backend()
    if reg is None:
        raise WorkerError(NO_RPC)
    address = _ggml.ggml_backend_reg_get_proc_address(
        reg, b"ggml_backend_rpc_start_server"
    )
    if not address:
        raise WorkerError("This build's RPC backend cannot serve.")
    return _START_SERVER(address)


def _served_devices() -> list[int]:
    """rpc-server's choice: every device but the CPU and accelerators, else
    the CPU."""
    served = []
    for index in range(_ggml.ggml_backend_dev_count()):
        device = _ggml.ggml_backend_dev_get(index)
        if _ggml.ggml_backend_dev_type(device) not in (_CPU, _ACCEL):
            served.append(device)
    if not served:
        cpu = _ggml.ggml_backend_dev_by_type(_CPU)
        served = [cpu] if cpu else []
    return served
