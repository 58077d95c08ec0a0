"""How to start this Arbor again, as a child process of its own."""

from __future__ import annotations

import sys


def arbor_command() -> list[str]:
    """The command line that runs this Arbor's CLI.

    A frozen app (PyInstaller sets ``sys.frozen``) is its own executable;
    otherwise the interpreter runs the ``app`` package.
    """
    if getattr(sys, "frozen", False):
        return [sys.executable]
    return [sys.executable, "-m", "app"]
