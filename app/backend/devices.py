"""The compute devices llama.cpp finds at run time.

Arbor's llama.cpp is built the way llama.cpp's own releases are: each backend
(one CPU variant per instruction-set level, Vulkan, CUDA where it was built)
is a library of its own in the wheel's ``lib`` folder, loaded when the
program starts. llama.cpp picks the CPU variant that suits this processor and
skips a backend whose driver is missing. Its default search looks beside the
Python executable and in the working folder, so Arbor names the folder.

A build with the backends linked in (an older wheel, a custom build) has its
backends registered already; nothing is loaded then.
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llama_cpp
import llama_cpp.llama_cpp as llama_binding

from app.backend import native_log
from app.backend.values import Device

# enum ggml_backend_dev_type, from ggml-backend.h.
_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
# "load_backend: loaded CPU backend from /…/libggml-cpu-zen4.so"
_LOADED = re.compile(r"loaded (\S+) backend from (.+)$")

# ggml's functions are looked up through libllama's handle, which resolves
# them in the libggml that libllama itself uses. A wheel cannot hold symlinks,
# so libggml.so and libggml.so.0 are two files: opening the first by path (as
# llama_cpp._ggml does) loads a second ggml, whose backends libllama never sees.
_ggml: Any = llama_binding._lib
_ggml.ggml_backend_reg_count.restype = ctypes.c_size_t
_ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
_ggml.ggml_backend_load_all_from_path.restype = None
_ggml.ggml_backend_dev_count.restype = ctypes.c_size_t
_ggml.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
_ggml.ggml_backend_dev_get.restype = ctypes.c_void_p
for _name in ("ggml_backend_dev_name", "ggml_backend_dev_description"):
    getattr(_ggml, _name).argtypes = [ctypes.c_void_p]
    getattr(_ggml, _name).restype = ctypes.c_char_p
_ggml.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
_ggml.ggml_backend_dev_type.restype = ctypes.c_int
_ggml.ggml_backend_dev_memory.argtypes = [
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.POINTER(ctypes.c_size_t),
]
_ggml.ggml_backend_dev_memory.restype = None
_ggml.ggml_backend_dev_backend_reg.argtypes = [ctypes.c_void_p]
_ggml.ggml_backend_dev_backend_reg.restype = ctypes.c_void_p
_ggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
_ggml.ggml_backend_reg_name.restype = ctypes.c_char_p


@dataclass(frozen=True)
class BackendFiles:
    """Which backend libraries were loaded at start, by backend name."""

    files: dict[str, str]

    @property
    def cpu_variant(self) -> str:
        """The CPU variant chosen for this processor ("zen4", "haswell", "x64"),
        or "" where the CPU backend is linked in rather than loaded."""
        # libggml-cpu-zen4.so (ggml-cpu-zen4.dll on Windows)
        match = re.match(
            r"(?:lib)?ggml-cpu-([\w-]+)\.", Path(self.files.get("CPU", "")).name
        )
        return match.group(1) if match else ""


_loaded: BackendFiles | None = None


def lib_dir() -> Path:
    """The folder holding llama.cpp's libraries (and its loadable backends)."""
    return Path(llama_cpp.__file__).parent / "lib"


def load_backends() -> BackendFiles:
    """Load the backends from the wheel's folder, once; which files were loaded.

    Must run before ``llama_backend_init``, which would otherwise search the
    executable's folder and find nothing.
    """
    global _loaded
    if _loaded is None:
        native_log.install()
        files: dict[str, str] = {}
        if _ggml.ggml_backend_reg_count() == 0:
            native_log.start_recording()
            try:
                _ggml.ggml_backend_load_all_from_path(os.fsencode(lib_dir()))
            finally:
                lines = native_log.stop_recording()
            for line in lines:
                match = _LOADED.search(line.strip())
                if match:
                    files[match.group(1)] = match.group(2)
        llama_cpp.llama_backend_init()
        _loaded = BackendFiles(files)
    return _loaded


def list_devices() -> list[Device]:
    """Every device llama.cpp found, CPU included, with its free memory now."""
    load_backends()
    return [
        describe(_ggml.ggml_backend_dev_get(index))
        for index in range(_ggml.ggml_backend_dev_count())
    ]


def describe(device: int) -> Device:
    """The device at ``device`` (a ggml_backend_dev_t), with its free memory now."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _ggml.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
    reg = _ggml.ggml_backend_dev_backend_reg(device)
    return Device(
        name=_text(_ggml.ggml_backend_dev_name(device)),
        description=_text(_ggml.ggml_backend_dev_description(device)),
        kind=_DEVICE_KINDS.get(_ggml.ggml_backend_dev_type(device), "other"),
        backend=_text(_ggml.ggml_backend_reg_name(reg)) if reg else "",
        free_bytes=int(free.value),
        total_bytes=int(total.value),
    )


def offload_devices() -> list[Device]:
    """The devices layers would be offloaded to, as they are now."""
    return offload_targets(list_devices())


def offload_targets(found: list[Device]) -> list[Device]:
    """Of ``found``, the devices layers go to (llama.cpp's own choice: every
    GPU with its own memory, or the integrated ones where there is none)."""
    dedicated = [d for d in found if d.kind == "gpu"]
    return dedicated or [d for d in found if d.kind == "igpu"]


def _text(value: bytes | None) -> str:
    return value.decode("utf-8", errors="replace") if value else ""


def ggml_library() -> Any:
    """ggml's functions, looked up through libllama's handle (the ggml that
    llama.cpp itself uses; see above), for the modules that call more of
    them (``rpc_worker``)."""
    return _ggml


def device_name(device: int) -> str:
    """The name llama.cpp gives the device at ``device`` ("CPU", "Vulkan0")."""
    return _text(_ggml.ggml_backend_dev_name(device))
