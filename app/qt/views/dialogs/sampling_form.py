"""``SamplingForm``: the fields of a ``SamplingParams``, for the Settings and
a conversation's own sampling."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QDoubleSpinBox, QFormLayout, QSpinBox, QWidget

from app.backend.values import SamplingParams


class SamplingForm(QWidget):
    """Temperature, top p/k, min p, repeat penalty, max tokens and seed.

    Signals
    -------
    changed()
        A field was edited (or ``set_params`` filled them).
    """

    changed = Signal()

    def __init__(self, params: SamplingParams, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        self.temperature = _double(0, 5, 0.05)
        self.temperature.setToolTip("0 always picks the most likely token.")
        form.addRow("Temperature", self.temperature)
        self.top_p = _double(0.01, 1, 0.01)
        form.addRow("Top p", self.top_p)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 1000)
        self.top_k.setSpecialValueText("off")
        form.addRow("Top k", self.top_k)
        self.min_p = _double(0, 1, 0.01)
        form.addRow("Min p", self.min_p)
        self.repeat_penalty = _double(0.5, 3, 0.05)
        form.addRow("Repeat penalty", self.repeat_penalty)
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 1_000_000)
        form.addRow("Max tokens per reply", self.max_tokens)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        form.addRow("Seed", self.seed)
        self.set_params(params)
        for box in (self.temperature, self.top_p, self.min_p, self.repeat_penalty):
            box.valueChanged.connect(self.changed)
        for spin in (self.top_k, self.max_tokens, self.seed):
            spin.valueChanged.connect(self.changed)

    def set_params(self, params: SamplingParams) -> None:
        """Show ``params`` in the fields."""
        self.temperature.setValue(params.temperature)
        self.top_p.setValue(params.top_p)
        self.top_k.setValue(params.top_k)
        self.min_p.setValue(params.min_p)
        self.repeat_penalty.setValue(params.repeat_penalty)
        self.max_tokens.setValue(params.max_tokens)
        self.seed.setValue(-1 if params.seed is None else params.seed)

    def params(self) -> SamplingParams:
        """What the fields say; raises ``InvalidSetting`` if it is not valid."""
        return SamplingParams(
            temperature=self.temperature.value(),
            top_k=self.top_k.value(),
            top_p=self.top_p.value(),
            min_p=self.min_p.value(),
            repeat_penalty=self.repeat_penalty.value(),
            max_tokens=self.max_tokens.value(),
            seed=None if self.seed.value() < 0 else self.seed.value(),
        )


def _double(low: float, high: float, step: float) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(low, high)
    box.setSingleStep(step)
    box.setDecimals(2)
    return box
