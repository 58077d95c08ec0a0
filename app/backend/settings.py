"""Backend settings a user chooses, with their defaults and their limits."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from app.backend.errors import InvalidSetting
from app.backend.threads import automatic_threads

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

# n_gpu_layers: every layer, or as many as fit the GPU's free memory (chosen
# when the model is loaded, leaving headroom for the desktop).
ALL_GPU_LAYERS = -1
AUTO_GPU_LAYERS = -2

DEFAULT_N_CTX = 4096
MIN_N_CTX = 64
# llama.cpp takes n_ctx as a uint32 (a larger value silently wraps) and
# positions as int32, so nothing above this can be meant.
MAX_N_CTX = 2**31 - 1
# More threads than this only thrash; a typo like 100000 would spawn them all.
MAX_THREADS = 1024
_INT32_MAX = 2**31 - 1


def _check_range(name: str, value: int, low: int, high: int) -> None:
    # bool is an int in Python, but True is no context size.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSetting(f"{name} must be a whole number, not {value!r}.")
    if not low <= value <= high:
        raise InvalidSetting(f"{name} must be between {low:,} and {high:,}.")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def worker_address(text: str) -> str:
    """A worker's ``HOST:PORT``, checked and written one way ("host:50052").

    llama.cpp's RPC client splits an address at its first colon and looks the
    host up by IPv4 only (``gethostbyname``), so an IPv6 address cannot name
    a worker. Raises ``InvalidSetting`` for anything it could not reach.
    """
    if not isinstance(text, str):
        raise InvalidSetting(f"A worker is a HOST:PORT text, not {text!r}.")
    host, colon, port = text.strip().rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidSetting(
            f"A worker is HOST:PORT with a port of 1 to 65535, not {text!r}."
        )
    if ":" in host or host.startswith("["):
        raise InvalidSetting(
            f"Worker {text!r}: llama.cpp reaches workers by IPv4 address or host "
            "name only, not by IPv6 address."
        )
    return f"{host}:{int(port)}"


def consecutive_runs(layers: Iterable[int]) -> list[tuple[int, int]]:
    """Layer numbers, in the order given, as runs of consecutive ones:
    (first, last) pairs."""
    runs: list[tuple[int, int]] = []
    for layer in layers:
        if runs and runs[-1][1] == layer - 1:
            runs[-1] = (runs[-1][0], layer)
        else:
            runs.append((layer, layer))
    return runs


def layers_text(total: int) -> str:
    """A model's ``total`` layers as llama.cpp places them, for people:
    "31 layers: 0-29 and the output" (the output layer is number
    ``total - 1``, after the repeating ones)."""
    if total <= 1:
        return "1 layer: the output"
    repeating = "0" if total == 2 else f"0-{total - 2}"
    return f"{total} layers: {repeating} and the output"


@dataclass(frozen=True)
class BackendSettings:
    """How to load a model and size its context.

    ``n_gpu_layers`` = ``ALL_GPU_LAYERS`` offloads every layer, and
    ``AUTO_GPU_LAYERS`` (the default) as many as fit the GPU; without a GPU
    nothing is offloaded whatever it says.
    Quantized KV caches (q8_0, ...) need flash attention for the V cache.
    ``workers`` are the ``HOST:PORT`` of ``arbor worker``s (llama.cpp's RPC
    servers) whose devices take the offloaded layers instead of this
    machine's GPUs; with workers "auto" offloads every layer, split between
    them by their free memory. ``worker_layers`` splits them by hand
    instead: one count per worker, in the order of ``workers`` (the output
    layer counts as the model's last layer); this machine keeps the layers
    they leave, the first ones. Empty: the split by free memory.
    Out-of-range values raise ``InvalidSetting``; whether
    ``n_ctx`` suits the model (its training length, the memory it needs) is
    checked when the model is loaded.
    """

    n_ctx: int = DEFAULT_N_CTX
    n_gpu_layers: int = AUTO_GPU_LAYERS
    n_threads: int = 0  # 0: pick from the CPU count
    n_batch: int = 512
    flash_attn: bool = False
    kv_cache_type: str = "f16"
    workers: tuple[str, ...] = ()
    worker_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_range("The context size (n_ctx)", self.n_ctx, MIN_N_CTX, MAX_N_CTX)
        _check_range(
            "The GPU layers (n_gpu_layers)",
            self.n_gpu_layers,
            AUTO_GPU_LAYERS,
            _INT32_MAX,
        )
        _check_range("The thread count", self.n_threads, 0, MAX_THREADS)
        _check_range("The batch size (n_batch)", self.n_batch, 1, _INT32_MAX)
        if self.kv_cache_type not in KV_CACHE_TYPES:
            raise InvalidSetting(
                f"Unknown KV cache type {self.kv_cache_type!r}; choose one of "
                + ", ".join(KV_CACHE_TYPES)
                + "."
            )
        self._check_workers()
        self._check_worker_layers()

    def _check_workers(self) -> None:
        # Stored as a JSON list: read back, it is a tuple again.
        if not isinstance(self.workers, tuple | list):
            raise InvalidSetting(
                f"Workers are a list of HOST:PORT, not {self.workers!r}."
            )
        workers = tuple(worker_address(text) for text in self.workers)
        if len(set(workers)) < len(workers):
            raise InvalidSetting("A worker is named twice; name each one once.")
        if workers and self.n_gpu_layers == 0:
            raise InvalidSetting(
                "With workers, at least one layer must go to them (n_gpu_layers "
                "0 keeps every layer here)."
            )
        object.__setattr__(self, "workers", workers)

    def _check_worker_layers(self) -> None:
        # Stored as a JSON list too.
        if not isinstance(self.worker_layers, tuple | list):
            raise InvalidSetting(
                f"The layers split by hand are a list of counts, not "
                f"{self.worker_layers!r}."
            )
        counts = tuple(self.worker_layers)
        object.__setattr__(self, "worker_layers", counts)
        if not counts:
            return
        if len(counts) != len(self.workers):
            raise InvalidSetting(
                f"The layers split by hand are one count per worker: "
                f"{_count(len(counts), 'count')} for "
                f"{_count(len(self.workers), 'worker')}."
            )
        for count in counts:
            _check_range("A worker's layer count", count, 0, _INT32_MAX)
        if not any(counts):
            raise InvalidSetting(
                "The layers split by hand give the workers none: give at least "
                "one worker a layer."
            )
        # Two ways of saying how many layers leave this machine: they must agree.
        if self.n_gpu_layers not in (AUTO_GPU_LAYERS, sum(counts)):
            raise InvalidSetting(
                f"With the layers split by hand, the workers get {sum(counts)}: "
                "leave the GPU layers (n_gpu_layers) at auto (as many as fit), "
                f"or make them {sum(counts)}."
            )

    @property
    def uses_flash_attn(self) -> bool:
        """Whether the context computes with flash attention: as set, and
        always with workers. Without it the V cache is stored transposed, and
        reading a checkpoint back from a worker takes one network round trip
        per V row (a 500-token delta: 352 ms against 13 ms on loopback,
        ``tools/worker_speed.py``)."""
        return self.flash_attn or bool(self.workers)

    @property
    def threads(self) -> int:
        """Threads to use now, resolving 0 ("automatic") to the free cores
        but one (``threads.automatic_threads``)."""
        return self.n_threads if self.n_threads > 0 else automatic_threads()

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, for storing as JSON."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BackendSettings:
        """Build from a stored dict, ignoring unknown keys."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
