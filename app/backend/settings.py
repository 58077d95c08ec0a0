"""Backend settings a user chooses, with their defaults."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

# Names of the KV cache element types a user can pick, as llama.cpp's ggml_type ids.
KV_CACHE_TYPES = {
    "f16": 1,
    "f32": 0,
    "q8_0": 8,
    "q4_0": 2,
    "q4_1": 3,
    "q5_0": 6,
    "q5_1": 7,
}


def _default_threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class BackendSettings:
    """How to load a model and size its context.

    ``n_gpu_layers`` = -1 offloads every layer (when the build supports a GPU).
    Quantized KV caches (q8_0, ...) need flash attention for the V cache.
    """

    n_ctx: int = 4096
    n_gpu_layers: int = 0
    n_threads: int = 0  # 0: pick from the CPU count
    n_batch: int = 512
    flash_attn: bool = False
    kv_cache_type: str = "f16"

    def __post_init__(self) -> None:
        if self.n_ctx < 64:
            raise ValueError("n_ctx must be at least 64")
        if self.n_batch < 1:
            raise ValueError("n_batch must be at least 1")
        if self.kv_cache_type not in KV_CACHE_TYPES:
            raise ValueError(
                f"unknown KV cache type {self.kv_cache_type!r}; choose one of "
                + ", ".join(KV_CACHE_TYPES)
            )

    @property
    def threads(self) -> int:
        """Threads to use, resolving 0 to a sensible default."""
        return self.n_threads if self.n_threads > 0 else _default_threads()

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, for storing as JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BackendSettings:
        """Build from a stored dict, ignoring unknown keys."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
