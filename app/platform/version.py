"""Arbor's version, as written once in ``pyproject.toml``.

Read from the installed distribution's metadata (``arbor-chat``). The desktop
bundle carries that metadata too (``packaging/arbor.spec`` copies it), so the
same call answers there. A checkout that was never installed reads the
``pyproject.toml`` next to it instead.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "arbor-chat"


def _read_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        pass
    import tomllib  # only for a checkout that was never installed

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        with pyproject.open("rb") as file:
            return str(tomllib.load(file)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"


__version__ = _read_version()
