"""The backend's plain values, without llama.cpp: sampling parameters, what is
known of a loaded model, and how many alternatives can be generated at once.

Importing this never loads libllama, so the window, the preferences, the jobs
and the CLI can name these types before (or without) a model.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any

from app.backend.errors import InvalidSetting
from app.backend.offload import OffloadCost


class StateKind(StrEnum):
    """What a node's checkpoint holds, which the model's kind of state decides."""

    DELTA = "delta"  # the KV cells of the node's own tokens
    FULL = "full"  # the whole state at the node's end (recurrent, hybrid models)


# How many earlier tokens the repeat penalty looks at.
PENALTY_LAST_N = 64

_INT32_MAX = 2**31 - 1
_UINT32_MAX = 2**32 - 1
# llama.cpp takes these as C floats; far below that limit the output is
# already noise, so a larger value is a typo rather than a choice.
_MAX_FACTOR = 1000.0


def _check_float(
    name: str, value: float, low: float, high: float, low_open: bool = False
) -> None:
    """Raise ``InvalidSetting`` unless ``value`` is a finite number in range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidSetting(f"{name} must be a number, not {value!r}.")
    if not math.isfinite(value):
        raise InvalidSetting(f"{name} must be a finite number, not {value}.")
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        lower = f"above {low:g}" if low_open else f"at least {low:g}"
        raise InvalidSetting(
            f"{name} must be {lower} and at most {high:g}, not {value:g}."
        )


def _check_int(name: str, value: int, low: int, high: int) -> None:
    """Raise ``InvalidSetting`` unless ``value`` is a whole number in range."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSetting(f"{name} must be a whole number, not {value!r}.")
    if not low <= value <= high:
        raise InvalidSetting(f"{name} must be between {low:,} and {high:,}.")


@dataclass(frozen=True)
class SamplingParams:
    """How the next token is chosen. ``temperature`` 0 means greedy.

    ``seed`` None picks a random seed; the seed actually used is recorded on
    the reply so it can be reproduced. ``stop``: texts that end the reply
    before them, as a turn marker does (an API client's ``stop``).
    """

    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.1
    max_tokens: int = 512
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Checked here, where every caller (CLI, settings dialog, stored
        # preferences) passes: llama.cpp takes these as C floats and 32-bit
        # integers, where a NaN or an overflow would be silently wrong.
        _check_float("The temperature", self.temperature, 0.0, _MAX_FACTOR)
        _check_float("top_p", self.top_p, 0.0, 1.0, low_open=True)
        _check_float("min_p", self.min_p, 0.0, 1.0)
        _check_float(
            "The repeat penalty", self.repeat_penalty, 0.0, _MAX_FACTOR, low_open=True
        )
        _check_int("top_k", self.top_k, 0, _INT32_MAX)
        _check_int("max_tokens", self.max_tokens, 1, _INT32_MAX)
        if self.seed is not None:
            _check_int("The seed", self.seed, 0, _UINT32_MAX)
        # Stored as a JSON list: read back, it is a tuple again.
        stop = self.stop
        if not isinstance(stop, tuple | list) or not all(
            isinstance(text, str) and text for text in stop
        ):
            raise InvalidSetting("Stop strings must be non-empty texts.")
        object.__setattr__(self, "stop", tuple(stop))

    def with_seed(self) -> SamplingParams:
        """Return these params with a concrete seed (drawn now if unset)."""
        if self.seed is not None:
            return self
        return replace(self, seed=random.randrange(2**31))

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, for storing on a node."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SamplingParams:
        """Build from a stored dict, ignoring unknown keys."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


# How many alternatives are generated together at most (each is a sequence of
# the engine's context besides the main and scratch ones): an API client's
# ``n`` up to 8. The sequences cost next to nothing unused (SmolLM2 at 8,192
# tokens: 0.8 MB more resident at 8 than at 4); the window offers 2 to 4.
MAX_FORKS = 8


@dataclass(frozen=True)
class Device:
    """One device llama.cpp can compute on, with its memory as it is now."""

    name: str  # llama.cpp's name for it: "CPU", "Vulkan0", "CUDA0"
    description: str  # what the driver calls it: "NVIDIA GeForce RTX 4070"
    kind: str  # "cpu", "gpu" (own memory), "igpu" (shares system memory), "accel"
    backend: str  # the backend that drives it: "CPU", "Vulkan", "CUDA", "RPC"
    free_bytes: int
    total_bytes: int

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, for the CLI's JSON."""
        return asdict(self)

    def describe(self) -> str:
        """One line: "Vulkan0: NVIDIA GeForce RTX 4070 (GPU, 7.2 of 8.0 GB free)"."""
        kind = {"gpu": "GPU", "igpu": "integrated GPU", "cpu": "CPU"}.get(
            self.kind, self.kind
        )
        return (
            f"{self.name}: {self.description} ({kind}, "
            f"{self.free_bytes / 1e9:.1f} of {self.total_bytes / 1e9:.1f} GB free)"
        )


@dataclass(frozen=True)
class LayerHolder:
    """The layers one device holds, as llama.cpp placed them while loading.

    Layers are numbered as llama.cpp numbers them: the repeating layers from
    0, then the output layer (number ``n_layer``). The token embeddings stay
    on this machine's CPU and are no layer here.
    """

    device: str  # llama.cpp's name for it in this process: "CPU", "Vulkan0", "RPC0"
    where: str  # the device's description: a worker's HOST:PORT for "RPC…"
    layers: tuple[int, ...]
    bytes: int  # its model, KV cache and compute buffers

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, for the CLI's JSON."""
        return asdict(self)


@dataclass(frozen=True)
class ModelInfo:
    """What the UI and the CLI show about the loaded model."""

    path: str
    name: str
    size_bytes: int
    n_layer: int
    n_vocab: int
    n_ctx: int
    n_ctx_train: int
    n_gpu_layers: int
    gpu_offload_supported: bool
    state_kind: StateKind
    state_note: str
    chat_format: str  # "gguf" (the model's template) or "chatml" (fallback)
    kv_bytes_per_token: int
    chat_format_note: str = ""  # why ChatML is used, when it is
    reasoning_format: str = "none"  # how replies separate thinking from answer
    reasoning_choices: tuple[str, ...] = ()  # the template's reasoning switch
    reasoning_default: str | None = None
    # How tools are called: "native" (the template writes tool calls, and
    # replies use the model's own syntax) or "generic" (it writes none: a
    # generic JSON format, which small models may follow poorly). "" where
    # whoever built this did not learn it.
    tool_format: str = ""
    context_note: str = ""  # why n_ctx is not the size asked for, when it is not
    # The file's content identity (``model_file.content_identity``): which
    # model a conversation was made with, whatever the file is called.
    identity: str = ""
    # What llama.cpp placed on a GPU, read back from its load log: layers
    # (the output layer counts as one) and the bytes of each GPU's buffers.
    offloaded_layers: int = 0
    offloadable_layers: int = 0
    gpu_bytes: int = 0
    placement: str = ""  # one line: "26/26 layers offloaded (Vulkan0 512 MiB)"
    cpu_variant: str = ""  # the CPU backend llama.cpp chose: "zen4", "haswell"
    # Where layers would go and what they would cost there (None: no GPU).
    offload_cost: OffloadCost | None = None
    offload_target: str = ""  # "Vulkan0 (NVIDIA GeForce RTX 4070)"
    offload_free_bytes: int = 0
    offload_total_bytes: int = 0
    devices: tuple[Device, ...] = ()  # every device llama.cpp found, CPU included
    # Which device holds which layers (workers' devices included), in layer order.
    layer_holders: tuple[LayerHolder, ...] = ()

    @property
    def workers(self) -> tuple[str, ...]:
        """The workers (``HOST:PORT``) holding layers, in layer order: what
        the window names as where the model runs."""
        found = [h.where for h in self.layer_holders if h.device.startswith("RPC")]
        return tuple(dict.fromkeys(found))
