"""The check that names the libraries Qt's X11 plugin lacks, with the apt line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.platform import qt_deps

LDD_OUTPUT = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibQt6XcbQpa.so.6 => /venv/PySide6/Qt/lib/libQt6XcbQpa.so.6 (0x00007f)
\tlibxcb-cursor.so.0 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxkbcommon-x11.so.0 => not found
\tlibxcb-cursor.so.0 => not found
\tlibglib-2.0.so.0 => not found
\tlibxcb.so.1 => /lib/x86_64-linux-gnu/libxcb.so.1 (0x00007f)
"""


def test_missing_libraries_are_read_from_ldd_once_each():
    assert qt_deps.missing_libraries(LDD_OUTPUT) == [
        "libxcb-cursor.so.0",
        "libxcb-icccm.so.4",
        "libxkbcommon-x11.so.0",
        "libglib-2.0.so.0",
    ]


@pytest.mark.parametrize(
    ("soname", "package"),
    [
        ("libxcb-cursor.so.0", "libxcb-cursor0"),
        ("libxcb-icccm.so.4", "libxcb-icccm4"),
        ("libxcb-render-util.so.0", "libxcb-render-util0"),
        ("libxkbcommon-x11.so.0", "libxkbcommon-x11-0"),
        ("libX11-xcb.so.1", "libx11-xcb1"),
        ("libEGL.so.1", "libegl1"),
        ("libdbus-1.so.3", "libdbus-1-3"),
        ("libglib-2.0.so.0", "libglib2.0-0"),
    ],
)
def test_debian_package_names(soname, package):
    assert qt_deps.debian_package(soname) == package


def test_the_hint_gives_one_apt_line():
    hint = qt_deps.install_hint(qt_deps.missing_libraries(LDD_OUTPUT))
    assert (
        "sudo apt install libxcb-cursor0 libxcb-icccm4 libxkbcommon-x11-0 "
        "libglib2.0-0\n" in hint
    )


def test_the_real_plugin_is_checked_with_ldd(monkeypatch):
    plugin = qt_deps.xcb_plugin()
    if plugin is None:
        pytest.skip("this PySide6 has no X11 plugin")
    output = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True)
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.delenv("QT_QPA_PLATFORM", raising=False)
    hint = qt_deps.check_xcb()
    # Whatever this machine lacks, the check reports exactly that.
    missing = qt_deps.missing_libraries(output.stdout)
    assert hint == (qt_deps.install_hint(missing) if missing else None)


def test_no_check_where_qt_does_not_use_x11(monkeypatch):
    monkeypatch.setenv("DISPLAY", ":99")
    monkeypatch.setenv("QT_QPA_PLATFORM", "offscreen")
    assert qt_deps.check_xcb() is None


def test_module_runs_as_the_make_run_check():
    result = subprocess.run(
        [sys.executable, "-m", "app.platform.qt_deps"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "QT_QPA_PLATFORM": "offscreen"},
    )
    assert result.returncode == 0 and result.stderr == ""
