"""Where a loaded model lives: layers offloaded, and each buffer's size.

llama.cpp reports this only in its log, while it loads the model and creates
the context ("offloaded 25/25 layers to GPU", "Vulkan0 model buffer size =
…"); ``read_placement`` turns those lines into figures Arbor can show. The
lines have kept this wording across llama.cpp releases; an unrecognised log
gives zeros, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.library.units import format_bytes

_MIB = 1024 * 1024
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# "load_tensors:   Vulkan0 model buffer size =    51.06 MiB"
_BUFFER = re.compile(r"(\S+) (model|KV|compute) buffer size = +([\d.]+) MiB")
# Host-side buffers are named after the CPU ("CPU", "CPU_Mapped",
# "CPU_REPACK", "Vulkan_Host"): their bytes are in system memory.
_HOST_BUFFER = re.compile(r"^CPU|_Host$")


@dataclass(frozen=True)
class Placement:
    """What llama.cpp placed where, as it reported while loading.

    ``offloaded_layers`` of ``offloadable_layers`` (the repeating layers plus
    the output layer) went to a GPU; ``device_bytes`` and ``host_bytes`` add
    up the model, KV and compute buffers by buffer name ("Vulkan0", "CPU"),
    ``compute_bytes`` the GPUs' compute buffers alone.
    """

    offloaded_layers: int = 0
    offloadable_layers: int = 0
    device_bytes: dict[str, int] = field(default_factory=dict)
    host_bytes: dict[str, int] = field(default_factory=dict)
    compute_bytes: dict[str, int] = field(default_factory=dict)  # on GPUs

    @property
    def offloaded_all(self) -> bool:
        """Every layer, the output one included, is on a GPU."""
        return 0 < self.offloadable_layers <= self.offloaded_layers

    def describe(self) -> str:
        """One line for Settings and ``arbor info``."""
        if not self.offloaded_layers:
            return "all layers on the CPU"
        on = ", ".join(
            f"{name} {format_bytes(size)}"
            for name, size in sorted(self.device_bytes.items())
        )
        return f"{self.offloaded_layers}/{self.offloadable_layers} layers offloaded" + (
            f" ({on})" if on else ""
        )


def read_placement(lines: Iterable[str]) -> Placement:
    """The placement llama.cpp reported in ``lines`` of its load log."""
    offloaded = offloadable = 0
    device: dict[str, int] = {}
    host: dict[str, int] = {}
    compute: dict[str, int] = {}
    for line in lines:
        if match := _OFFLOADED.search(line):
            offloaded, offloadable = int(match.group(1)), int(match.group(2))
        elif match := _BUFFER.search(line):
            name, size = match.group(1), round(float(match.group(3)) * _MIB)
            on_host = bool(_HOST_BUFFER.search(name))
            target = host if on_host else device
            target[name] = target.get(name, 0) + size
            if match.group(2) == "compute" and not on_host:
                compute[name] = compute.get(name, 0) + size
    return Placement(offloaded, offloadable, device, host, compute)
