"""Locate bundled assets (icons, stylesheets) in ``resources/``.

One helper for every asset, so that the same code works from a checkout, an
editable install and a PyInstaller bundle (which unpacks data under
``sys._MEIPASS``).
"""

from __future__ import annotations

import sys
from pathlib import Path


def resources_dir() -> Path:
    """The folder holding ``icons/`` and ``styles/``."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root is not None:
        return Path(frozen_root) / "resources"
    return Path(__file__).resolve().parents[2] / "resources"


def get_asset(relative: str) -> Path:
    """Return the path of an asset, e.g. ``get_asset("icons/send.svg")``.

    Raises
    ------
    FileNotFoundError
        If the asset is not shipped: a packaging bug, not a user error.
    """
    path = resources_dir() / relative
    if not path.is_file():
        raise FileNotFoundError(f"Missing bundled asset: {path}")
    return path
