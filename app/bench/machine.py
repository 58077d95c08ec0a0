"""A description of the machine and software a run was measured on."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def load_average() -> float | None:
    """One-minute load average: how busy the machine was besides the benchmark."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def describe_machine() -> dict[str, object]:
    """CPU, cores, memory, OS and Python of this machine."""
    return {
        "cpu": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average_start": load_average(),
    }
