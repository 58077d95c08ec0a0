"""The one error the benchmark raises itself."""

from __future__ import annotations


class BenchError(RuntimeError):
    """A scenario could not measure what it set out to (e.g. a restore fell back)."""
