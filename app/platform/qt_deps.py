"""Which system libraries Qt's X11 plugin lacks, and the line that installs them.

Without them Qt prints "could not load the Qt platform plugin xcb" and aborts,
which tells a user nothing they can act on. ``ldd`` on the plugin names each
missing library; Debian and Ubuntu name packages after the library and its
major version, so the install line can be given exactly. No Qt import here:
this runs before Qt is loaded, and is what ``make run`` checks first.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

# Where the soname rule below does not give the Debian package name.
_PACKAGE_EXCEPTIONS = {"libglib-2.0.so.0": "libglib2.0-0"}

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)
_SONAME = re.compile(r"^(lib.+)\.so\.(\d+)")


def xcb_plugin() -> Path | None:
    """The PySide6 X11 platform plugin, if PySide6 is installed with one."""
    import importlib.util

    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    plugin = root / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def missing_libraries(ldd_output: str) -> list[str]:
    """Library names that ``ldd`` reported as "not found", in order, once each."""
    return list(dict.fromkeys(_NOT_FOUND.findall(ldd_output)))


def debian_package(soname: str) -> str:
    """The Debian/Ubuntu package that ships ``soname`` (e.g. libxcb-icccm4)."""
    if soname in _PACKAGE_EXCEPTIONS:
        return _PACKAGE_EXCEPTIONS[soname]
    match = _SONAME.match(soname)
    if match is None:
        return soname
    name, major = match.group(1).lower(), match.group(2)
    # libxkbcommon-x11.so.0 -> libxkbcommon-x11-0: a hyphen after a digit.
    return f"{name}-{major}" if name[-1].isdigit() else f"{name}{major}"


def install_hint(missing: list[str]) -> str:
    """What to tell the user when Qt's X11 plugin lacks ``missing`` libraries."""
    packages = " ".join(dict.fromkeys(debian_package(m) for m in missing))
    return (
        "Arbor's window needs system libraries that are not installed: "
        f"{', '.join(missing)}.\n"
        f"On Debian or Ubuntu: sudo apt install {packages}\n"
        "(Other distributions name the packages alike, e.g. xcb-util-cursor.)"
    )


def check_xcb() -> str | None:
    """The install hint if the X11 plugin will not load here, else None.

    Checked only where Qt would use X11: on Linux, with a DISPLAY and no other
    platform chosen (offscreen, Wayland).
    """
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return None
    if os.environ.get("QT_QPA_PLATFORM", "xcb").split(":")[0] != "xcb":
        return None
    plugin = xcb_plugin()
    if plugin is None:
        return None
    try:
        result = subprocess.run(
            ["ldd", str(plugin)], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None  # no ldd (e.g. musl): let Qt try
    missing = missing_libraries(result.stdout)
    return install_hint(missing) if missing else None


def main() -> int:
    """Print what is missing (exit 1) or that the window can start (exit 0)."""
    hint = check_xcb()
    if hint:
        print(hint, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
