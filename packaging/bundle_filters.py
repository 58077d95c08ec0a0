"""What the PyInstaller spec adds to and removes from Arbor's bundle.

Kept apart from ``arbor.spec`` so the choices are plain functions: the spec
calls them on PyInstaller's lists of ``(destination, source, kind)`` entries.

Two jobs:

- ``llama_cpp_libraries``: llama-cpp-python loads ``libllama`` and ``libggml``
  with ctypes from ``llama_cpp/lib`` next to its modules (see
  ``llama_cpp/_ctypes_extensions.py``); PyInstaller cannot see a ctypes load,
  so the spec names them, at that same path. Their own dependencies
  (``libggml-base``, ``libggml-cpu``, found through ``RUNPATH=$ORIGIN``)
  PyInstaller's binary analysis then collects beside them.
  llama.cpp's backends (a CPU variant per instruction-set level, Vulkan,
  RPC) are loaded at run time from that folder, so they are named too.
- ``drop_unused_qt``: PySide6's hooks collect every plugin of a type and every
  translation; Arbor needs a few. What is dropped, and why, is in the tables;
  ``drop_orphans`` then removes the system libraries only those needed.
- ``drop_machine_libraries``: the Vulkan loader comes from the machine.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

# The libraries llama-cpp-python opens by name (llama_cpp.py, _ggml.py).
LLAMA_LIBRARIES = ("llama", "ggml")
# llama.cpp's backends, which it loads at run time from the same folder
# (app/backend/devices.py): CPU variants, Vulkan, RPC, CUDA where built.
_BACKEND_MODULE = re.compile(r"^(lib)?ggml-(?!base\b)[\w-]+\.(so|dll|dylib)$")
# System libraries the bundle must not carry: the Vulkan loader finds the
# machine's own GPU drivers, so the machine's loader is used; where it has
# none, llama.cpp skips the Vulkan backend and runs on the CPU.
_FROM_THE_MACHINE = re.compile(r"^libvulkan\.so")

# Top-level system libraries the dropped GTK theme, network and image
# plugins pulled in; nothing else in the bundle links to them.
DROPPED_SYSTEM_LIBRARIES = (
    r"lib(atk-1\.0|cairo|cairo-gobject|pango-1\.0|pangocairo-1\.0|pangoft2-1\.0|"
    r"gdk_pixbuf-2\.0|gtk-3|gdk-3|fribidi|datrie|thai|graphite2|harfbuzz|pixman-1|"
    r"gio-2\.0|gmodule-2\.0|gobject-2\.0|mount|blkid|selinux|bsd|md|Xau|Xdmcp|"
    r"Xext|Xrender|jpeg)\.so"
)
_DROPPED_SYSTEM_RE = re.compile(DROPPED_SYSTEM_LIBRARIES)
_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[(.+?)\]")

# Bundle paths (relative to _internal/) that Arbor never loads.
_UNUSED_QT = [
    # Arbor installs no QTranslator: Qt's own translations are never read.
    r"PySide6/Qt/translations/",
    # Platforms for embedded devices and VNC; the desktop needs xcb and
    # wayland, the tests offscreen (minimal is Qt's last resort).
    r"PySide6/Qt/plugins/platforms/lib(qeglfs|qlinuxfb|qvnc|qvkkhrdisplay|"
    r"qminimalegl)\.",
    r"PySide6/Qt/plugins/(egldeviceintegrations|generic)/",
    # The GTK 3 theme links GTK, which a machine either has (then its own
    # cairo and pango must match it, not ours) or lacks (then the plugin does
    # not load): without it Qt uses the XDG portal theme or its own style.
    r"PySide6/Qt/plugins/platformthemes/libqgtk3\.",
    # Network reachability and TLS: Arbor's only network use is a local socket.
    r"PySide6/Qt/plugins/(networkinformation|tls)/",
    # Image formats no asset or dialog of Arbor uses (SVG, PNG, ICO, JPEG,
    # GIF stay: the icons, and pictures a file dialog may preview).
    r"PySide6/Qt/plugins/imageformats/libq(tiff|webp|tga|wbmp|icns)\.",
    r"PySide6/Qt/plugins/platforminputcontexts/lib(qtvirtualkeyboard|ibus)",
    # Server-side buffer integrations serve Wayland compositors, not clients.
    r"PySide6/Qt/plugins/wayland-graphics-integration-client/"
    r"lib(dmabuf|drm-egl|shm-emulation|vulkan)-server\.",
    # Qt modules only those plugins (or unused modules) link to.
    r"(PySide6/Qt/lib/)?libQt6(EglFSDeviceIntegration|EglFsKmsSupport|"
    r"EglFsKmsGbmSupport|Qml|QmlModels|QmlMeta|QmlWorkerScript|Quick|Pdf|"
    r"VirtualKeyboard|Multimedia|3D|Designer|Sql|Test|Charts|Help)",
    r"PySide6/Qt/qml/",
    # Qt's build tools and the type stubs, useless at run time.
    r"PySide6/(Qt/libexec|scripts|include|typesystems|glue|support/generate_pyi)",
    r"PySide6/[^/]+\.pyi$",
    # System libraries that only the plugins above link to (checked: the
    # build fails if a bundled library still needs one, see
    # ``needed_but_dropped``).
    DROPPED_SYSTEM_LIBRARIES,
    # The launchers for Designer, lupdate and such.
    r"PySide6/(designer|linguist|lupdate|lrelease|uic|rcc|qmllint)",
]
_UNUSED_QT_RE = re.compile("|".join(f"(?:{p})" for p in _UNUSED_QT))


def is_unused_qt(destination: str) -> bool:
    """Whether a bundle path is part of Qt that Arbor never loads."""
    return bool(_UNUSED_QT_RE.match(destination.replace("\\", "/")))


def drop_unused_qt(toc: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``toc`` without the entries ``is_unused_qt`` names."""
    return [entry for entry in toc if not is_unused_qt(entry[0])]


def drop_machine_libraries(
    toc: Iterable[tuple[str, str, str]],
) -> list[tuple[str, str, str]]:
    """``toc`` without the system libraries the machine must provide itself."""
    return [e for e in toc if not _FROM_THE_MACHINE.match(Path(e[0]).name)]


def _is_system_library(source: str) -> bool:
    return source.startswith(("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"))


def drop_orphans(toc: Iterable[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """``toc`` without the system libraries nothing kept still needs.

    PyInstaller collects the dependencies of every Qt plugin before the
    plugins above are dropped, so each library only they needed stays behind
    unless removed too. Which ones depends on what the build machine has
    installed (a desktop's at-spi and X11 extras, say, where a bare image has
    none), so they are found by their links rather than named: a system
    library is kept only while a kept binary or Python extension needs it
    (``DT_NEEDED``).
    """
    entries = list(toc)
    while True:
        needed: set[str] = set()
        for _dest, source, kind in entries:
            if kind in ("BINARY", "EXTENSION") and Path(source).is_file():
                needed.update(_needed(Path(source)))
        kept = [
            e
            for e in entries
            if e[2] != "BINARY"
            or not _is_system_library(e[1])
            or Path(e[0]).name in needed
        ]
        if len(kept) == len(entries):
            return kept
        entries = kept


@functools.cache
def _needed(path: Path) -> list[str]:
    """The direct dependencies (``DT_NEEDED``) of a binary, by ``readelf``."""
    dynamic = subprocess.run(
        ["readelf", "-d", str(path)], capture_output=True, text=True, check=False
    ).stdout
    return _NEEDED.findall(dynamic)


def needed_but_dropped(bundle: Path) -> list[str]:
    """``"library: needs dropped.so"`` for each bundled library needing a dropped one.

    Run on the finished bundle, so that a new dependency on a library dropped
    above fails the build instead of the first start on a machine without it.
    Reads each file's direct dependencies (``DT_NEEDED``) with ``readelf``
    from binutils, which PyInstaller needs on Linux anyway.
    """
    problems = []
    for path in sorted(bundle.rglob("*.so*")):
        if path.is_symlink() or not path.is_file():
            continue
        for name in _needed(path):
            if _DROPPED_SYSTEM_RE.match(name):
                problems.append(f"{path.relative_to(bundle)}: needs {name}")
    return problems


def _library_names(name: str) -> list[str]:
    if sys.platform == "win32":
        return [f"{name}.dll", f"lib{name}.dll"]
    if sys.platform == "darwin":
        return [f"lib{name}.dylib", f"lib{name}.so"]
    return [f"lib{name}.so"]


def llama_cpp_libraries() -> list[tuple[str, str]]:
    """``(source, destination folder)`` of the libraries llama_cpp loads by name.

    Raises
    ------
    SystemExit
        If llama-cpp-python or its libraries are missing from the build
        environment: the bundle would start and fail at the first model.
    """
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llama-cpp-python is not installed in the build environment")
    lib_dir = Path(next(iter(spec.submodule_search_locations))) / "lib"
    found: list[tuple[str, str]] = []
    for name in LLAMA_LIBRARIES:
        for candidate in _library_names(name):
            if (lib_dir / candidate).is_file():
                found.append((str(lib_dir / candidate), "llama_cpp/lib"))
                break
        else:
            raise SystemExit(f"lib{name} not found in {lib_dir}")
    backends = [p for p in sorted(lib_dir.iterdir()) if _BACKEND_MODULE.match(p.name)]
    if (
        not any("cpu" in p.name for p in backends)
        and not (lib_dir / _library_names("ggml-cpu")[0]).is_file()
    ):
        raise SystemExit(f"no CPU backend of llama.cpp in {lib_dir}")
    return found + [(str(p), "llama_cpp/lib") for p in backends]
