"""``prepare``: the folder that travels to the GPU machine (``.gpu-check/``).

The GPU machine has no network and a bare Python 3.12 (numpy and aiohttp
only), so everything the check needs besides the working tree goes in one
git-ignored folder, well under the 64 MiB the machine accepts:

- ``llama-src.tar.gz``: llama.cpp as vendored in the llama-cpp-python sdist
  the Makefile caches, with this project's patches (``packaging/llama/``)
  applied, and trimmed to what a CUDA, Vulkan or CPU build of the libraries
  and ``llama-bench`` reads (no docs, models, tests, examples, other
  backends, or tools besides llama-bench, whose CMake list is cut to it);
- ``site/``: the sdist's pure-Python ``llama_cpp`` package (its ctypes
  bindings, without libraries: the build puts them beside it) and the
  wheels of every other package the check imports, unpacked (wheels are zip
  files; unpacking one into a folder on ``sys.path`` installs it);
- ``manifest.json``: what went in, from where, and the sizes.

Everything here is Python's standard library, so that the tests can call it
and the GPU machine can read the manifest without any package.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

# The carried paths and the tree travel together within 64 MiB.
LIMIT_BYTES = 64 << 20
# What the check imports besides numpy (on the machine already), found by
# tracing the imports of its steps (tests/tools/test_gpu_check.py keeps this true).
# Binary wheels are for CPython 3.12 on x86-64 Linux (manylinux).
WHEELS = (
    "SQLAlchemy",
    "typing_extensions",
    "Jinja2",
    "MarkupSafe",
    "xxhash",
    "platformdirs",
    "diskcache",
    "gguf",
    "PyYAML",
    "tqdm",
)
PYTHON_VERSION = "3.12"
PLATFORM = "manylinux2014_x86_64"
# Paths of vendor/llama.cpp that a build of the libraries and llama-bench reads.
KEEP = (
    "CMakeLists.txt",
    "LICENSE",
    "licenses/",
    "cmake/",
    "include/",
    "src/",
    "common/",
    "vendor/",
    "ggml/CMakeLists.txt",
    "ggml/cmake/",
    "ggml/include/",
    "ggml/src/",
    "tools/llama-bench/",
)
# Backends of ggml/src that no build here enables (ggml_add_backend only
# enters the folders of the enabled ones).
OTHER_BACKENDS = (
    "cann",
    "et",
    "hexagon",
    "hip",
    "metal",
    "musa",
    "opencl",
    "openvino",
    "sycl",
    "virtgpu",
    "webgpu",
    "zdnn",
    "zendnn",
)
# tools/CMakeLists.txt adds a dozen tools; the check builds one.
TOOLS_CMAKE = """\
# Cut by tools/gpu_check/prepare.py: llama-bench only.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(llama-bench)
"""


def prepare(
    dest: Path, sdist: Path, patches: list[Path], wheels: Path | None = None
) -> dict[str, Any]:
    """Write the folder at ``dest`` (replacing it) and return its manifest.

    ``wheels`` is a folder of wheels to use instead of downloading them
    (``pip download``, the one step that needs the network).
    """
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "site").mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        root = _unpack_sdist(sdist, Path(scratch))
        llama = root / "vendor" / "llama.cpp"
        for patch in patches:
            subprocess.run(
                ["patch", "-d", str(llama), "-p1", "-s", "-i", str(patch)], check=True
            )
        kept = _trimmed_tar(llama, dest / "llama-src.tar.gz")
        shutil.copytree(
            root / "llama_cpp",
            dest / "site" / "llama_cpp",
            ignore=shutil.ignore_patterns("__pycache__", "lib"),
        )
        version = _version(root / "llama_cpp" / "__init__.py")
        if wheels is None:
            wheels = Path(scratch) / "wheels"
            download_wheels(wheels)
        installed = [
            _unpack_wheel(w, dest / "site") for w in sorted(wheels.glob("*.whl"))
        ]
    manifest: dict[str, Any] = {
        "sdist": sdist.name,
        "sdist_sha256": _sha256(sdist),
        "llama_cpp_python": version,
        "patches": [p.name for p in patches],
        "source_files": kept,
        "wheels": installed,
        "bytes": folder_bytes(dest),
        "limit_bytes": LIMIT_BYTES,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def download_wheels(folder: Path) -> None:
    """``pip download`` the wheels of ``WHEELS`` for the GPU machine's Python."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            PYTHON_VERSION,
            "--platform",
            PLATFORM,
            "-d",
            str(folder),
            *WHEELS,
        ],
        check=True,
    )


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (links not followed)."""
    return sum(
        p.stat().st_size
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
    )


def _unpack_sdist(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tar:
        tar.extractall(into, filter="data")
    (root,) = into.glob("llama_cpp_python-*")
    return root


def _kept(relative: str) -> bool:
    if not any(relative == k or relative.startswith(k) for k in KEEP):
        return False
    parts = relative.split("/")
    return not (
        relative.startswith("ggml/src/ggml-")
        and len(parts) > 3
        and parts[2].removeprefix("ggml-") in OTHER_BACKENDS
    )


def _trimmed_tar(llama: Path, target: Path) -> int:
    """Pack the kept sources of ``llama`` as ``llama.cpp/…``; how many files."""
    count = 0
    with tarfile.open(target, "w:gz", compresslevel=9) as tar:
        for path in sorted(llama.rglob("*")):
            relative = path.relative_to(llama).as_posix()
            if path.is_file() and _kept(relative):
                tar.add(path, f"llama.cpp/{relative}", recursive=False)
                count += 1
        data = TOOLS_CMAKE.encode()
        info = tarfile.TarInfo("llama.cpp/tools/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return count + 1


def _unpack_wheel(wheel: Path, site: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return wheel.name


def _version(init: Path) -> str:
    for line in init.read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    return "unknown"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
