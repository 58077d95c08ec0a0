"""The plain values the window, the jobs and the preferences name: sampling
parameters, backend settings, what is known of a loaded model.

The window side may not import ``app.backend`` (tests/test_layering.py): it
names these types through this module. They are defined beside the backend,
which consumes them, in modules that import no native code, so naming them
never loads libllama (tests/test_import_weight.py).
"""

from __future__ import annotations

from app.backend.errors import InvalidSetting
from app.backend.offload import OffloadCost, best_layers
from app.backend.settings import (
    ALL_GPU_LAYERS,
    AUTO_GPU_LAYERS,
    KV_CACHE_TYPES,
    BackendSettings,
)
from app.backend.values import MAX_FORKS, ModelInfo, SamplingParams

__all__ = [
    "ALL_GPU_LAYERS",
    "AUTO_GPU_LAYERS",
    "KV_CACHE_TYPES",
    "MAX_FORKS",
    "BackendSettings",
    "InvalidSetting",
    "ModelInfo",
    "OffloadCost",
    "SamplingParams",
    "best_layers",
]
