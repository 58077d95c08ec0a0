"""How much GPU memory an offload takes, and the largest one that fits.

llama.cpp counts layers from the output: offloading 1 layer puts the output
layer on the GPU, n puts the output layer and n - 1 repeating layers there,
and n_layer + 1 is everything. Each repeating layer brings its weights and
its share of the KV cache; the compute buffers come once.
"""

from __future__ import annotations

from dataclasses import dataclass

_MIB = 1024 * 1024
# Memory a GPU keeps free for the desktop, the driver and what the estimate
# misses: a tenth of it, and never less than this.
_MIN_HEADROOM = 512 * _MIB


@dataclass(frozen=True)
class OffloadCost:
    """The GPU bytes of a model's parts, as a no-allocation load measured them."""

    n_layer: int
    output_bytes: int  # the output layer's weights
    layer_bytes: int  # one repeating layer's weights (their mean)
    kv_bytes_per_token: int  # the KV cache of all layers, per token
    compute_bytes: int  # llama.cpp's compute buffers on the GPU

    @property
    def offloadable_layers(self) -> int:
        """The layer count that offloads everything."""
        return self.n_layer + 1

    def device_bytes(self, n_gpu_layers: int, n_ctx: int) -> int:
        """GPU bytes for ``n_gpu_layers`` (negative: all) at ``n_ctx`` tokens."""
        layers = self.offloadable_layers if n_gpu_layers < 0 else n_gpu_layers
        layers = min(layers, self.offloadable_layers)
        if layers <= 0:
            return 0
        repeating = layers - 1
        kv = n_ctx * self.kv_bytes_per_token * repeating // max(1, self.n_layer)
        return (
            self.output_bytes + repeating * self.layer_bytes + kv + self.compute_bytes
        )


def headroom(total_bytes: int) -> int:
    """What a GPU of ``total_bytes`` keeps free after an automatic offload."""
    return max(_MIN_HEADROOM, total_bytes // 10)


def best_layers(
    cost: OffloadCost, n_ctx: int, free_bytes: int, total_bytes: int
) -> int:
    """The most layers whose estimate leaves the headroom free (0 if none do)."""
    budget = free_bytes - headroom(total_bytes)
    for layers in range(cost.offloadable_layers, 0, -1):
        if cost.device_bytes(layers, n_ctx) <= budget:
            return layers
    return 0
