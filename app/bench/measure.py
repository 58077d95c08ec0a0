"""Small timing helpers shared by the scenarios."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable


def median(values: Iterable[float]) -> float:
    """Median of ``values`` (0.0 when there are none)."""
    items = list(values)
    return float(statistics.median(items)) if items else 0.0


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, or 0.0 when the denominator is not positive."""
    return numerator / denominator if denominator > 0 else 0.0


class Stopwatch:
    """Milliseconds spent inside a ``with`` block (read ``ms`` afterwards)."""

    def __init__(self) -> None:
        self.ms = 0.0
        self._started = 0.0

    def __enter__(self) -> Stopwatch:
        """Start the clock."""
        self._started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop the clock (also when the block raised)."""
        self.ms = (time.perf_counter() - self._started) * 1000
