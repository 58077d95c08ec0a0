"""How fast ggml copies between a device's memory and the process's, measured
through the calls llama.cpp's state functions make.

A checkpoint capture is ``ggml_backend_tensor_get`` into Arbor's buffer (one
call per K row range and, with flash attention off, one per V row: the V
cache is stored transposed), a restore is ``ggml_backend_tensor_set``. So
the ceiling of capture and restore throughput is one large get or set, and
what many small ones cost says what the row-by-row path pays per call.
Measured on the first GPU llama.cpp found (the CPU's memory where none).

ggml's functions are reached through libllama's handle, as
``app/backend/devices.py`` reaches them (the ggml libllama itself uses).
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import numpy as np

from app.backend import devices

_GGML_TYPE_I8 = 24  # enum ggml_type


class _InitParams(ctypes.Structure):
    _fields_ = (
        ("mem_size", ctypes.c_size_t),
        ("mem_buffer", ctypes.c_void_p),
        ("no_alloc", ctypes.c_bool),
    )


def _bind() -> Any:
    lib = devices.ggml_library()
    lib.ggml_init.argtypes = [_InitParams]
    lib.ggml_init.restype = ctypes.c_void_p
    lib.ggml_free.argtypes = [ctypes.c_void_p]
    lib.ggml_new_tensor_1d.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    lib.ggml_new_tensor_1d.restype = ctypes.c_void_p
    lib.ggml_backend_dev_buffer_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_buffer_type.restype = ctypes.c_void_p
    lib.ggml_backend_alloc_ctx_tensors_from_buft.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    lib.ggml_backend_alloc_ctx_tensors_from_buft.restype = ctypes.c_void_p
    lib.ggml_backend_buffer_free.argtypes = [ctypes.c_void_p]
    for name in ("ggml_backend_tensor_get", "ggml_backend_tensor_set"):
        getattr(lib, name).argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_size_t,
        ]
        getattr(lib, name).restype = None
    return lib


def _device() -> tuple[int, str]:
    """The first GPU (else the first device, the CPU) and its name."""
    devices.load_backends()
    lib = devices.ggml_library()
    count = lib.ggml_backend_dev_count()
    found = [lib.ggml_backend_dev_get(i) for i in range(count)]
    described = [devices.describe(d) for d in found]
    for dev, info in zip(found, described, strict=True):
        if info.kind == "gpu":
            return dev, f"{info.name} ({info.description})"
    return found[0], f"{described[0].name} ({described[0].description})"


def measure(total_bytes: int = 256 << 20, row_bytes: int = 1024) -> dict[str, Any]:
    """Large-copy rates (GB/s) each way and the cost of a small copy (µs).

    ``row_bytes`` is the size of the small copies, about one V row of a
    few hundred tokens' delta (2 bytes a token in an f16 cache).
    """
    lib = _bind()
    dev, name = _device()
    ctx = lib.ggml_init(_InitParams(1 << 16, None, True))
    tensor = lib.ggml_new_tensor_1d(ctx, _GGML_TYPE_I8, total_bytes)
    buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(
        ctx, lib.ggml_backend_dev_buffer_type(dev)
    )
    if not buffer:
        lib.ggml_free(ctx)
        return {"device": name, "error": f"could not allocate {total_bytes} bytes"}
    # Pageable memory, as Arbor's capture buffer is (a ctypes array).
    host = np.ones(total_bytes, dtype=np.uint8)
    address = host.ctypes.data
    try:
        lib.ggml_backend_tensor_set(tensor, address, 0, total_bytes)  # warm up
        set_s = best(
            lambda: lib.ggml_backend_tensor_set(tensor, address, 0, total_bytes)
        )
        get_s = best(
            lambda: lib.ggml_backend_tensor_get(tensor, address, 0, total_bytes)
        )
        calls = 2000

        def small_gets() -> None:
            for i in range(calls):
                offset = (i * row_bytes * 7) % (total_bytes - row_bytes)
                lib.ggml_backend_tensor_get(tensor, address, offset, row_bytes)

        small_s = best(small_gets)
    finally:
        lib.ggml_backend_buffer_free(buffer)
        lib.ggml_free(ctx)
    return {
        "device": name,
        "bytes": total_bytes,
        "device_to_host_gbps": total_bytes / get_s / 1e9,
        "host_to_device_gbps": total_bytes / set_s / 1e9,
        "small_get_bytes": row_bytes,
        "small_get_us": small_s / calls * 1e6,
    }


def best(work: Any, repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs of ``work``, in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)
