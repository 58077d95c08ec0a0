"""Sizes and times as the model library shows them, in the window and the CLI."""

from __future__ import annotations


def format_bytes(count: int) -> str:
    """Sizes as people read them: 98 MB, 2.5 GB (decimal, like the Hub)."""
    if count < 1000**2:
        return f"{max(count, 0) / 1000:.0f} kB"
    if count < 1000**3:
        return f"{count / 1000**2:.0f} MB"
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
