"""The one byte formatter every size shown goes through (decimal units)."""

from __future__ import annotations

import pytest

from app.text.quantities import format_bytes, format_duration


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (-5, "0 B"),
        (0, "0 B"),
        (999, "999 B"),
        (2_000, "2.0 kB"),
        (440_000, "440 kB"),
        (999_400, "999 kB"),
        (999_600, "1.0 MB"),
        (3_100_000, "3.1 MB"),
        (98_000_000, "98 MB"),
        (999_600_000, "1.0 GB"),
        (2_500_000_000, "2.5 GB"),
        (25_800_000_000, "25.8 GB"),
    ],
)
def test_sizes_read_in_decimal_units(count: int, text: str) -> None:
    assert format_bytes(count) == text


def test_durations_read_as_people_say_them() -> None:
    assert [format_duration(s) for s in (0.2, 40, 180, 3900, 7200)] == [
        "1 s",
        "40 s",
        "3 min",
        "1 h 5 min",
        "2 h",
    ]
