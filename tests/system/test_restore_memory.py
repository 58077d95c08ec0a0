"""Restoring does not grow the process's memory (issue 23).

CPython's sqlite3 keeps a weak reference to every blob a connection opened
until the connection closes (python/cpython#144424): 83 bytes a blob, some
1.8 KiB a restore, for the life of the process. ``storage/db.py`` replaces a
connection once it has opened ``BLOBS_PER_CONNECTION`` blobs. Before that,
the first soak grew by 13.5 MiB and the second by 1.35 MiB.

Each soak runs in a fresh process (``tests/helpers/restore_soak.py``): in this one,
memory freed by earlier tests takes in a leak without the resident set
growing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import ROOT


def _soak(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.restore_soak", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_ten_thousand_alternating_checkpoint_reads_do_not_grow_memory(
    tmp_path: Path,
) -> None:
    # 16 real blobs read and verified per switch, as a restore reads them.
    soak = _soak("reads", str(tmp_path), "--switches", "10000")
    assert soak["grown_bytes"] <= 5 << 20, f"grew {soak['grown_bytes'] / 2**20} MiB"


def test_alternating_real_restores_do_not_grow_memory(
    tmp_path: Path, tiny_model: Path
) -> None:
    # Fewer, for time: 2,000 switches of 8 restored nodes grew 1.35 MiB.
    soak = _soak(
        "restores",
        str(tmp_path),
        "--model",
        str(tiny_model),
        "--switches",
        "2000",
        "--warm-up",
        "300",
    )
    assert soak["grown_bytes"] <= 512 << 10, f"grew {soak['grown_bytes'] >> 10} KiB"
