"""Where a loaded model lives: layers offloaded, and each buffer's size.

llama.cpp reports this only in its log, while it loads the model and creates
the context ("offloaded 25/25 layers to GPU", "Vulkan0 model buffer size =
…", and at debug level "layer 3 assigned to device RPC0"); ``read_placement``
turns those lines into figures Arbor can show. The lines have kept this
wording across llama.cpp releases; an unrecognised log gives zeros, never an
error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from app.backend.values import Device, LayerHolder
from app.text.quantities import format_bytes

_MIB = 1024 * 1024
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# "load_tensors:   Vulkan0 model buffer size =    51.06 MiB"
_BUFFER = re.compile(r"(\S+) (model|KV|compute) buffer size = +([\d.]+) MiB")
# "load_tensors: layer   2 assigned to device RPC1, is_swa = 0"
_ASSIGNED = re.compile(r"layer +(\d+) assigned to device (\S+?),")
# Host-side buffers are named after the CPU ("CPU", "CPU_Mapped",
# "CPU_REPACK", "Vulkan_Host"): their bytes are in system memory.
_HOST_BUFFER = re.compile(r"^CPU|_Host$")


@dataclass(frozen=True)
class Placement:
    """What llama.cpp placed where, as it reported while loading.

    ``offloaded_layers`` of ``offloadable_layers`` (the repeating layers plus
    the output layer) went to a GPU; ``device_bytes`` and ``host_bytes`` add
    up the model, KV and compute buffers by buffer name ("Vulkan0", "CPU"),
    ``compute_bytes`` the GPUs' compute buffers alone. ``layer_devices``
    names the device of each layer, the output layer last.
    """

    offloaded_layers: int = 0
    offloadable_layers: int = 0
    device_bytes: dict[str, int] = field(default_factory=dict)
    host_bytes: dict[str, int] = field(default_factory=dict)
    compute_bytes: dict[str, int] = field(default_factory=dict)  # on GPUs
    layer_devices: tuple[str, ...] = ()

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
    layers: dict[int, str] = {}
    for line in lines:
        if match := _ASSIGNED.search(line):
            layers[int(match.group(1))] = match.group(2)
        elif match := _OFFLOADED.search(line):
            offloaded, offloadable = int(match.group(1)), int(match.group(2))
        elif match := _BUFFER.search(line):
            name, size = match.group(1), round(float(match.group(3)) * _MIB)
            on_host = bool(_HOST_BUFFER.search(name))
            target = host if on_host else device
            target[name] = target.get(name, 0) + size
            if match.group(2) == "compute" and not on_host:
                compute[name] = compute.get(name, 0) + size
    return Placement(
        offloaded,
        offloadable,
        device,
        host,
        compute,
        tuple(layers[i] for i in sorted(layers)),
    )


def layer_holders(
    placement: Placement, found: Sequence[Device], buffers: Mapping[str, str]
) -> tuple[LayerHolder, ...]:
    """Each device holding layers, with them and its bytes, in layer order.

    ``found`` describes the devices; ``buffers`` names the buffers of those
    whose buffers are not called after them (a worker's device "RPC1" has
    the buffers "RPC0[host:port]": its index there, and the worker). This
    machine's CPU holds the host buffers.
    """
    described = {d.name: d.description for d in found}
    layers: dict[str, list[int]] = {}
    for index, name in enumerate(placement.layer_devices):
        layers.setdefault(name, []).append(index)
    return tuple(
        LayerHolder(
            device=name,
            where=described.get(name, ""),
            layers=tuple(held),
            bytes=sum(placement.host_bytes.values())
            if name == "CPU"
            else placement.device_bytes.get(buffers.get(name, name), 0),
        )
        for name, held in layers.items()
    )
