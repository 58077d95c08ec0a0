"""Build llama.cpp on the GPU machine from the prepared sources, within a budget.

The build is what the Makefile makes (``LLAMA_CMAKE_ARGS``): shared
libraries with every backend a library loaded at run time
(``GGML_BACKEND_DL``), so that ``app/backend/devices.py`` finds and loads
them exactly as on a user's machine. Three differences, each to fit the
machine's minutes: CUDA for this card's architecture only
(``CMAKE_CUDA_ARCHITECTURES``, e.g. 90 for an H100, asked of nvidia-smi)
and without flash attention's kernels unless asked (``--cuda-fa``);
one CPU backend for x86-64-v3 (AVX2, which any GPU server has) instead of
thirteen variants; no RPC backend. ``llama-bench`` is built from the same
sources, so its figures and Arbor's compare the same kernels.

Backends are tried in order (CUDA, then Vulkan through the NVIDIA driver
where the machine has Vulkan's build tools, then the CPU alone) and the
first that builds is used (a build that runs out of time is not replaced:
the next run resumes it); each gets its own build folder, which persists
between runs on a machine that stays up, so a second run resumes or reuses
it (ninja builds only what is missing).

The built libraries are reached through ``site/llama_cpp/lib``, a link to
the build's ``bin`` folder: the pure-Python ``llama_cpp`` package looks for
its libraries there, and every library is then loaded from one path (two
copies of libggml would be two ggml instances; see ``devices.py``).

Standard library only: this runs under the machine's bare Python.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# The Makefile's flags that the check keeps as they are.
COMMON_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_BACKEND_DL=ON",
    "-DGGML_NATIVE=OFF",
    # x86-64-v3, the DESIGN.md flags that work on these VMs (no AMX).
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_RPC=OFF",
    "-DLLAMA_BUILD_COMMON=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
BACKENDS = ("cuda", "vulkan", "cpu")
RESUMABLE = "(resumable)"


@dataclass
class Attempt:
    """One backend's build: how it went, and its log's last lines."""

    backend: str
    ok: bool = False
    seconds: float = 0.0
    reason: str = ""
    flags: list[str] = field(default_factory=list)
    log_tail: str = ""


@dataclass
class Built:
    """The build the check runs on (``backend`` "" when none built)."""

    backend: str = ""
    lib_dir: str = ""
    llama_bench: str = ""
    cuda_arch: str = ""
    attempts: list[Attempt] = field(default_factory=list)


def build(
    prepared: Path,
    work: Path,
    backends: tuple[str, ...],
    budget: float,
    jobs: int,
    log: Path,
    cuda_fa: bool = False,
) -> Built:
    """Build the first of ``backends`` that builds within ``budget`` seconds.

    ``work`` holds the sources, the build folders and ``site/llama_cpp``;
    ``log`` gets every command's output.
    """
    deadline = time.monotonic() + budget
    src = _sources(prepared, work)
    result = Built(cuda_arch=cuda_arch())
    for backend in backends:
        left = deadline - time.monotonic()
        flags = backend_flags(backend, result.cuda_arch, cuda_fa)
        attempt = Attempt(backend, flags=flags)
        result.attempts.append(attempt)
        missing = missing_tools(backend)
        if missing:
            attempt.reason = missing
            continue
        if left < 30:
            attempt.reason = f"no time left to build ({left:.0f} s)"
            continue
        nvcc = _which("nvcc")
        if backend == "cuda" and nvcc:
            flags.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
        started = time.monotonic()
        folder = work / f"build-{backend}"
        ok, attempt.reason = _cmake_build(src, folder, flags, jobs, left, log)
        attempt.seconds = round(time.monotonic() - started, 1)
        attempt.ok = ok
        attempt.log_tail = _tail(log, 40)
        if ok:
            result.backend = backend
            result.lib_dir = str(folder / "bin")
            result.llama_bench = str(folder / "bin" / "llama-bench")
            stage_package(prepared, work, folder / "bin")
            break
        if attempt.reason.endswith(RESUMABLE):
            # Out of time, not broken: the next run resumes this build
            # rather than checking on a lesser backend now.
            break
    return result


def backend_flags(backend: str, arch: str, cuda_fa: bool = False) -> list[str]:
    """The CMake flags of a build for ``backend`` (cuda, vulkan or cpu)."""
    flags = list(COMMON_FLAGS)
    flags.append(f"-DGGML_CUDA={'ON' if backend == 'cuda' else 'OFF'}")
    flags.append(f"-DGGML_VULKAN={'ON' if backend == 'vulkan' else 'OFF'}")
    if backend == "cuda":
        flags += [
            f"-DCMAKE_CUDA_ARCHITECTURES={arch or '90'}",
            # Flash attention's kernels are many (some 80 of the 190 CUDA
            # files are their template instances) and Arbor's default, flash
            # attention off, runs none of them: left out unless asked for
            # (the files still compile, to stubs).
            f"-DGGML_CUDA_FA={'ON' if cuda_fa else 'OFF'}",
            # One GPU: NCCL is for several.
            "-DGGML_CUDA_NCCL=OFF",
        ]
    return flags


def missing_tools(backend: str) -> str:
    """What the machine lacks to build ``backend`` ("" when nothing)."""
    needed = ["cmake", "ninja"]
    if backend == "cuda":
        needed.append("nvcc")
    if backend == "vulkan":
        needed.append("glslc")
    absent = [tool for tool in needed if _which(tool) is None]
    return f"not on PATH: {', '.join(absent)}" if absent else ""


def cuda_arch() -> str:
    """The first GPU's compute capability as CMake names it ("90"), or ""."""
    if _which("nvidia-smi") is None:
        return ""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    first = out.strip().splitlines()[0] if out.strip() else ""
    return first.replace(".", "") if first.replace(".", "").isdigit() else ""


def cuda_library_path() -> str:
    """The CUDA toolkit's library folder beside nvcc, or "" (the built
    libraries find libcudart and libcublas through it where their run path
    does not name it)."""
    nvcc = _which("nvcc")
    if nvcc is None:
        return ""
    lib64 = Path(nvcc).resolve().parent.parent / "lib64"
    return str(lib64) if lib64.is_dir() else ""


def stage_package(prepared: Path, work: Path, lib_dir: Path) -> Path:
    """``work/site/llama_cpp``: the prepared bindings with ``lib`` linked to
    ``lib_dir``; returns ``work/site``."""
    site = work / "site"
    package = site / "llama_cpp"
    if package.exists():
        shutil.rmtree(package)
    shutil.copytree(prepared / "site" / "llama_cpp", package)
    (package / "lib").symlink_to(lib_dir.resolve(), target_is_directory=True)
    return site


def _sources(prepared: Path, work: Path) -> Path:
    """The prepared sources unpacked under ``work`` (again if they changed)."""
    tar = prepared / "llama-src.tar.gz"
    stamp = work / "src.stamp"
    src = work / "src" / "llama.cpp"
    # By content: the carried folder is copied anew for every run. The
    # files keep the archive's times, so ninja sees nothing changed.
    mark = hashlib.sha256(tar.read_bytes()).hexdigest()
    if not (src.exists() and stamp.exists() and stamp.read_text() == mark):
        if src.parent.exists():
            shutil.rmtree(src.parent)
        src.parent.mkdir(parents=True)
        with tarfile.open(tar) as archive:
            archive.extractall(src.parent, filter="data")
        stamp.write_text(mark)
    return src


def _cmake_build(
    src: Path, folder: Path, flags: list[str], jobs: int, budget: float, log: Path
) -> tuple[bool, str]:
    deadline = time.monotonic() + budget
    configure = ["cmake", "-S", str(src), "-B", str(folder), "-G", "Ninja", *flags]
    compile_ = ["cmake", "--build", str(folder), "-j", str(jobs)]
    commands = [("configure", configure), ("build", compile_)]
    # A folder configured with these flags before (a second run on a machine
    # that stayed up) is built again as it is: ninja then does what is left.
    stamp = folder / "gpu-check-flags.txt"
    if stamp.exists() and stamp.read_text() == "\n".join(configure):
        commands = commands[1:]
    for step, command in commands:
        left = deadline - time.monotonic()
        with log.open("a") as out:
            out.write(f"\n$ {' '.join(command)}\n")
            out.flush()
            try:
                done = subprocess.run(
                    command, stdout=out, stderr=subprocess.STDOUT, timeout=max(1, left)
                )
            except subprocess.TimeoutExpired:
                return False, f"{step} ran out of its {budget:.0f} s {RESUMABLE}"
        if done.returncode != 0:
            return False, f"{step} failed (exit {done.returncode}; see the log)"
        if step == "configure":
            stamp.write_text("\n".join(configure))
    if not (folder / "bin" / "llama-bench").exists():
        return False, "built, but bin/llama-bench is missing"
    return True, ""


def _which(tool: str) -> str | None:
    found = shutil.which(tool)
    if found is None and tool == "nvcc":
        # CUDA images often leave the toolkit off PATH.
        for candidate in ("/usr/local/cuda/bin/nvcc", os.environ.get("CUDACXX", "")):
            if candidate and Path(candidate).exists():
                return candidate
    return found


def _tail(log: Path, lines: int) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
