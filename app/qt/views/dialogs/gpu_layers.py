"""``GpuLayersField``: how many layers go to the GPU, with what that costs.

A slider from none to all, or "as many as fit" (the default, chosen when the
model loads). Under it: the memory the chosen offload takes on the GPU (the
weights, the KV cache at the context size chosen beside it, the compute
buffers) against what is free there, and what llama.cpp actually offloaded
for the model loaded now.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from app.backend.offload import best_layers
from app.backend.settings import ALL_GPU_LAYERS, AUTO_GPU_LAYERS
from app.backend.values import ModelInfo
from app.text.quantities import format_bytes

NO_GPU_EXPLANATION = (
    "llama.cpp found no GPU here, so without workers every layer runs on the "
    "CPU. Arbor drives "
    "NVIDIA, AMD and Intel GPUs through Vulkan: install the graphics driver's "
    "Vulkan support (on Debian and Ubuntu: mesa-vulkan-drivers for AMD and "
    "Intel, the NVIDIA driver for NVIDIA), then restart Arbor. `arbor info` "
    "lists the devices found."
)
ON_WORKERS = (
    "The loaded model's layers are on workers (the Workers tab says which); "
    "this setting is for this computer's own GPU. "
)
# The slider's length when no model is loaded to say how many layers it has.
_UNKNOWN_LAYERS = 100


class GpuLayersField(QWidget):
    """The GPU layers setting; ``value()`` is a count, ``ALL_GPU_LAYERS`` or
    ``AUTO_GPU_LAYERS``."""

    def __init__(
        self,
        value: int,
        n_ctx: int,
        loaded: ModelInfo | None,
        gpu_supported: bool,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._loaded = loaded
        self._n_ctx = n_ctx
        cost = loaded.offload_cost if loaded else None
        self._all = cost.offloadable_layers if cost else _UNKNOWN_LAYERS
        self.auto = QCheckBox("As many as fit")
        self.auto.setToolTip(
            "Chosen when the model loads: the most layers whose weights, KV "
            "cache and compute buffers leave a tenth of the GPU's memory free."
        )
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, self._all)
        self.count_label = QLabel()
        self.count_label.setMinimumWidth(110)
        self.estimate_label = QLabel()
        self.estimate_label.setObjectName("PanelHint")
        self.estimate_label.setWordWrap(True)
        self.loaded_label = QLabel()
        self.loaded_label.setObjectName("PanelHint")
        self.loaded_label.setWordWrap(True)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.auto)
        row.addWidget(self.slider, 1)
        row.addWidget(self.count_label)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.estimate_label)
        layout.addWidget(self.loaded_label)

        self.auto.setChecked(value == AUTO_GPU_LAYERS)
        self.slider.setValue(self._all if value < 0 else min(value, self._all))
        if loaded is not None:
            found = "\n".join(d.describe() for d in loaded.devices)
            variant = (
                f" CPU backend: {loaded.cpu_variant}." if loaded.cpu_variant else ""
            )
            self.loaded_label.setText(
                f"Loaded now: {loaded.placement}.{variant}"
                + (f"\nDevices found:\n{found}" if found else "")
            )
        self.auto.toggled.connect(self._on_auto_toggled)
        self.slider.valueChanged.connect(self._on_slider_value_changed)
        # Without a GPU the field only shows 0; the setting stays as it was,
        # so that OK changes nothing here (and reloads no model for it).
        self._kept = None if gpu_supported else value
        if not gpu_supported:
            self.auto.setChecked(False)
            self.slider.setValue(0)
            self.setEnabled(False)
            # On workers the layers are not "on the CPU": say where they are.
            why = ON_WORKERS if loaded is not None and loaded.workers else ""
            self.setToolTip(why + NO_GPU_EXPLANATION)
            self.estimate_label.setText(why + NO_GPU_EXPLANATION)
        self._show()

    def value(self) -> int:
        """The setting as chosen (as it was, where no GPU can be used)."""
        if self._kept is not None:
            return self._kept
        if self.auto.isChecked():
            return AUTO_GPU_LAYERS
        layers = self.slider.value()
        return ALL_GPU_LAYERS if layers >= self._all else layers

    def set_context(self, n_ctx: int) -> None:
        """The context size the estimate is for (the KV cache grows with it)."""
        self._n_ctx = n_ctx
        self._show()

    @Slot(bool)
    def _on_auto_toggled(self, _checked: bool) -> None:
        self._show()

    @Slot(int)
    def _on_slider_value_changed(self, _value: int) -> None:
        self._show()

    def _layers(self) -> int:
        """The layer count to estimate: what "auto" would pick, or the slider."""
        info = self._loaded
        if self.auto.isChecked() and info is not None and info.offload_cost:
            return best_layers(
                info.offload_cost,
                self._n_ctx,
                _available(info),
                info.offload_total_bytes,
            )
        return self.slider.value()

    def _show(self) -> None:
        self.slider.setEnabled(not self.auto.isChecked())
        layers = self._layers()
        if self.auto.isChecked() and not (self._loaded and self._loaded.offload_cost):
            self.count_label.setText("when loaded")
        elif layers >= self._all:
            self.count_label.setText(f"all {self._all} layers")
        elif layers == 0:
            self.count_label.setText("none (CPU)")
        else:
            self.count_label.setText(f"{layers} of {self._all} layers")
        if not self.isEnabled():
            return
        info = self._loaded
        if info is None or info.offload_cost is None:
            self.estimate_label.setText(
                "The memory estimate shows once a model is loaded."
            )
            return
        need = info.offload_cost.device_bytes(layers, self._n_ctx)
        free = _available(info)
        warning = (
            " More than is free: the model may fail to load." if need > free else ""
        )
        self.estimate_label.setText(
            f"About {format_bytes(need)} on {info.offload_target} (weights, "
            f"KV cache at {self._n_ctx:,} tokens, compute buffers); "
            f"{format_bytes(free)} of {format_bytes(info.offload_total_bytes)} "
            f"free.{warning}"
        )


def _available(info: ModelInfo) -> int:
    """GPU memory a reload could use: what is free, plus what the loaded
    model holds there (freed before the next one loads). Drivers that share
    system memory (lavapipe) report free memory that does not shrink."""
    return min(info.offload_free_bytes + info.gpu_bytes, info.offload_total_bytes)
