"""The GPU layers field: slider, "as many as fit", the memory estimate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.backend.offload import OffloadCost
from app.backend.settings import ALL_GPU_LAYERS, AUTO_GPU_LAYERS
from app.backend.values import Device, ModelInfo, StateKind
from app.qt.views.dialogs.gpu_layers import NO_GPU_EXPLANATION, GpuLayersField

GIB = 1024**3
# A 7B-like model: 32 repeating layers of 120 MiB, 0.25 GiB output, 128 KiB
# of KV cache per token, 300 MiB of compute buffers.
COST = OffloadCost(
    n_layer=32,
    output_bytes=GIB // 4,
    layer_bytes=120 * 1024**2,
    kv_bytes_per_token=128 * 1024,
    compute_bytes=300 * 1024**2,
)


def _loaded(free: int, total: int = 8 * GIB, **changes) -> ModelInfo:
    info = ModelInfo(
        path="/models/seven.gguf",
        name="seven",
        size_bytes=4 * GIB,
        n_layer=32,
        n_vocab=32000,
        n_ctx=4096,
        n_ctx_train=8192,
        n_gpu_layers=AUTO_GPU_LAYERS,
        gpu_offload_supported=True,
        state_kind=StateKind.DELTA,
        state_note="",
        chat_format="gguf",
        kv_bytes_per_token=COST.kv_bytes_per_token,
        placement="all layers on the CPU",
        offload_cost=COST,
        offload_target="Vulkan0 (Test GPU)",
        offload_free_bytes=free,
        offload_total_bytes=total,
    )
    return replace(info, **changes)


def test_auto_shows_what_would_fit_and_its_estimate(qtbot):
    field = GpuLayersField(AUTO_GPU_LAYERS, 4096, _loaded(free=3 * GIB), True)
    qtbot.addWidget(field)
    assert field.value() == AUTO_GPU_LAYERS
    assert not field.slider.isEnabled()
    # 3 GiB free less 0.8 GiB headroom: output + n layers of 120 MiB + KV.
    layers = int(field.count_label.text().split()[0])
    assert COST.device_bytes(layers, 4096) <= 3 * GIB - 0.8 * GIB
    assert COST.device_bytes(layers + 1, 4096) > 3 * GIB - 0.8 * GIB
    assert "on Vulkan0 (Test GPU)" in field.estimate_label.text()
    assert "KV cache at 4,096 tokens" in field.estimate_label.text()


def test_the_slider_chooses_a_count_or_all_and_warns_past_free_memory(qtbot):
    field = GpuLayersField(ALL_GPU_LAYERS, 4096, _loaded(free=2 * GIB), True)
    qtbot.addWidget(field)
    assert field.value() == ALL_GPU_LAYERS
    assert field.count_label.text() == "all 33 layers"
    assert "More than is free" in field.estimate_label.text()
    field.slider.setValue(5)
    assert field.value() == 5
    assert field.count_label.text() == "5 of 33 layers"
    assert "More than is free" not in field.estimate_label.text()
    field.slider.setValue(0)
    assert field.value() == 0 and field.count_label.text() == "none (CPU)"


def test_the_estimate_grows_with_the_context(qtbot):
    field = GpuLayersField(ALL_GPU_LAYERS, 4096, _loaded(free=40 * GIB), True)
    qtbot.addWidget(field)
    small = field.estimate_label.text()
    field.set_context(32768)
    assert field.estimate_label.text() != small
    assert "32,768 tokens" in field.estimate_label.text()


@pytest.mark.parametrize("value", [AUTO_GPU_LAYERS, 12])
def test_without_a_gpu_the_field_is_off_and_says_why(qtbot, value):
    field = GpuLayersField(value, 4096, None, gpu_supported=False)
    qtbot.addWidget(field)
    assert not field.isEnabled()
    assert field.slider.value() == 0  # shown: nothing goes to a GPU here
    # ... but the setting stays as it was: OK neither changes it nor reloads.
    assert field.value() == value
    assert field.toolTip() == NO_GPU_EXPLANATION
    assert "Vulkan" in field.estimate_label.text()


def test_loaded_now_shows_what_llama_cpp_offloaded(qtbot):
    info = _loaded(free=3 * GIB, placement="20/33 layers offloaded (Vulkan0 2.6 GiB)")
    field = GpuLayersField(20, 4096, info, True)
    qtbot.addWidget(field)
    assert field.loaded_label.text() == (
        "Loaded now: 20/33 layers offloaded (Vulkan0 2.6 GiB)."
    )
    gpu = Device("Vulkan0", "Test GPU", "gpu", "Vulkan", 3 * GIB, 8 * GIB)
    cpu = Device("CPU", "Test CPU", "cpu", "CPU", 12 * GIB, 16 * GIB)
    info = replace(info, devices=(gpu, cpu), cpu_variant="haswell")
    field = GpuLayersField(20, 4096, info, True)
    qtbot.addWidget(field)
    assert field.loaded_label.text().splitlines() == [
        "Loaded now: 20/33 layers offloaded (Vulkan0 2.6 GiB). CPU backend: haswell.",
        "Devices found:",
        "Vulkan0: Test GPU (GPU, 3.2 of 8.6 GB free)",
        "CPU: Test CPU (CPU, 12.9 of 17.2 GB free)",
    ]
