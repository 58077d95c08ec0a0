"""The text of Help → About: Arbor's version and what it runs on."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version

from PySide6 import __version__ as PYSIDE_VERSION
from PySide6.QtCore import qVersion

from app.platform.version import __version__


def about_text() -> str:
    """Name, version and library versions, as rich text for ``QMessageBox.about``."""
    # From the package metadata: importing llama_cpp here would load libllama.
    try:
        llama = distribution_version("llama_cpp_python")
    except PackageNotFoundError:
        llama = "unknown"
    return (
        f"<h3>Arbor {__version__}</h3>"
        "<p>Offline chat with local language models, as a tree of conversations "
        "whose every message restores instantly.</p>"
        f"<p>llama-cpp-python {llama}<br>Qt {qVersion()} (PySide6 {PYSIDE_VERSION})"
        f"<br>Python {platform.python_version()}</p><p>MIT License</p>"
    )
