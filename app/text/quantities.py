"""Sizes and times as Arbor shows them, in the window, the CLI and errors.

Sizes are decimal (SI: 1 kB = 1000 bytes), as the Hugging Face Hub and
the README give a model's size, so that "2.5 GB" means the same on the
Hub's page and here; memory is shown the same way, so a model's size
and the memory it needs read in one unit.
"""

from __future__ import annotations


def format_bytes(count: float) -> str:
    """A byte count for people: "512 B", "2.0 kB", "440 kB", "98 MB", "2.5 GB".

    kB and MB keep one decimal below 10 (a checkpoint of 2.0 kB, not 2 kB);
    GB always keep one, since whether a model fits turns on tenths.
    """
    count = max(count, 0)
    if count < 1000:
        return f"{count:.0f} B"
    for unit, scale in (("kB", 1000), ("MB", 1000**2)):
        if count < scale * 999.5:
            value = count / scale
            return f"{value:.1f} {unit}" if value < 9.95 else f"{value:.0f} {unit}"
    return f"{count / 1000**3:.1f} GB"


def format_duration(seconds: float) -> str:
    """A time left as people say it: "40 s", "3 min", "1 h 5 min"."""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"
