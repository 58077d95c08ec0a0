"""Reading llama.cpp's load log for placement, and the offload arithmetic."""

from __future__ import annotations

from app.backend.offload import OffloadCost, best_layers, headroom
from app.backend.placement import layer_holders, read_placement
from app.backend.values import Device, LayerHolder

MIB = 1024 * 1024
# As llama.cpp logs a partial offload (the lines Arbor reads among others).
LOAD_LOG = [
    "load_tensors: offloading output layer to GPU",
    "load_tensors: offloading 20 repeating layers to GPU",
    "load_tensors: offloaded 21/31 layers to GPU",
    "load_tensors:      Vulkan0 model buffer size =    51.06 MiB",
    "load_tensors:   CPU_Mapped model buffer size =    40.00 MiB",
    "llama_context: Vulkan_Host  output buffer size =     0.19 MiB",
    "llama_kv_cache:    Vulkan0 KV buffer size =    60.00 MiB",
    "llama_kv_cache:        CPU KV buffer size =    30.00 MiB",
    "sched_reserve:    Vulkan0 compute buffer size =   150.50 MiB",
    "sched_reserve: Vulkan_Host compute buffer size =    12.00 MiB",
]


def test_placement_splits_device_and_host_buffers():
    placement = read_placement(LOAD_LOG)
    assert (placement.offloaded_layers, placement.offloadable_layers) == (21, 31)
    assert not placement.offloaded_all
    assert placement.device_bytes == {"Vulkan0": round((51.06 + 60 + 150.5) * MIB)}
    assert placement.host_bytes == {
        "CPU_Mapped": 40 * MIB,
        "CPU": 30 * MIB,
        "Vulkan_Host": 12 * MIB,
    }
    assert placement.compute_bytes == {"Vulkan0": round(150.5 * MIB)}
    assert placement.describe() == "21/31 layers offloaded (Vulkan0 274 MB)"


def test_an_unknown_log_reads_as_nothing_offloaded():
    placement = read_placement(["something else entirely", ""])
    assert placement.offloaded_layers == 0
    assert placement.describe() == "all layers on the CPU"


COST = OffloadCost(
    n_layer=10,
    output_bytes=100 * MIB,
    layer_bytes=50 * MIB,
    kv_bytes_per_token=1000,
    compute_bytes=200 * MIB,
)


def test_layers_count_the_output_layer_first():
    assert COST.offloadable_layers == 11
    assert COST.device_bytes(0, 4096) == 0
    # One layer is the output layer alone, with the compute buffers.
    assert COST.device_bytes(1, 4096) == 300 * MIB
    # Each repeating layer adds its weights and a tenth of the KV cache.
    assert COST.device_bytes(2, 4096) - COST.device_bytes(1, 4096) == (
        50 * MIB + 4096 * 1000 // 10
    )
    assert COST.device_bytes(-1, 4096) == COST.device_bytes(11, 4096)
    assert COST.device_bytes(99, 4096) == COST.device_bytes(11, 4096)


def test_best_layers_leaves_the_headroom_free():
    assert headroom(1024 * MIB) == 512 * MIB  # at least 512 MiB
    assert headroom(80 * 1024 * MIB) == 8 * 1024 * MIB  # else a tenth
    total = 8 * 1024 * MIB
    assert best_layers(COST, 4096, total, total) == 11
    # Room for the output layer and 3 repeating layers only.
    free = headroom(total) + COST.device_bytes(4, 4096)
    assert best_layers(COST, 4096, free, total) == 4
    assert best_layers(COST, 4096, headroom(total), total) == 0


# A load on two workers' devices, as llama.cpp logs it (the layer lines at
# debug level): each worker's buffers are named by its own device index.
RPC_LOAD_LOG = [
    "load_tensors: layer   0 assigned to device RPC0, is_swa = 0",
    "load_tensors: layer   1 assigned to device RPC0, is_swa = 0",
    "load_tensors: layer   2 assigned to device RPC1, is_swa = 0",
    "load_tensors: offloaded 3/3 layers to GPU",
    "load_tensors: RPC0[10.0.0.2:50052] model buffer size =     0.50 MiB",
    "load_tensors: RPC0[10.0.0.3:50052] model buffer size =     0.25 MiB",
    "load_tensors:   CPU_Mapped model buffer size =     0.06 MiB",
    "llama_kv_cache: RPC0[10.0.0.2:50052] KV buffer size =     1.00 MiB",
]


def test_the_layers_of_each_device_and_its_buffers():
    placement = read_placement(RPC_LOAD_LOG)
    assert placement.layer_devices == ("RPC0", "RPC0", "RPC1")
    found = [
        Device("CPU", "a CPU", "cpu", "CPU", 0, 0),
        Device("RPC0", "10.0.0.2:50052", "gpu", "RPC", 0, 0),
        Device("RPC1", "10.0.0.3:50052", "gpu", "RPC", 0, 0),
    ]
    buffers = {"RPC0": "RPC0[10.0.0.2:50052]", "RPC1": "RPC0[10.0.0.3:50052]"}
    assert layer_holders(placement, found, buffers) == (
        LayerHolder("RPC0", "10.0.0.2:50052", (0, 1), round(1.5 * MIB)),
        LayerHolder("RPC1", "10.0.0.3:50052", (2,), round(0.25 * MIB)),
    )
    # Where every layer is on this machine's CPU, it holds the host buffers.
    here = read_placement(
        [f"load_tensors: layer {n} assigned to device CPU, is_swa = 0" for n in (0, 1)]
        + ["load_tensors:   CPU_Mapped model buffer size =     2.00 MiB"]
    )
    assert layer_holders(here, found, {}) == (
        LayerHolder("CPU", "a CPU", (0, 1), 2 * MIB),
    )
