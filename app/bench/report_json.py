"""A run's report as JSON-ready data."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from app.bench.results import Report


def to_json(report: Report) -> dict[str, Any]:
    """Plain dicts and lists; floats rounded to what the clocks can tell."""

    def rounded(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 4)
        if isinstance(value, dict):
            return {k: rounded(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rounded(v) for v in value]
        return value

    data: dict[str, Any] = rounded(asdict(report))
    return data
