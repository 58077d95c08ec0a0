"""The scale benchmark of issue 23: every growth table, one after another.

Each part is a script of its own that builds its sizes in a temporary
folder and prints its table (run one alone to look closer):

- ``scale_delete.py``: deleting 1,001- to 10,001-node paths and a 10k-node
  conversation from a 20k-node file;
- ``scale_first_visit.py``: the first visit of 101- and 1,001-node
  imported paths, and a path that cannot fit;
- ``scale_tree_visits.py``: first visits one by one in 1k- and 10k-node trees;
- ``scale_space.py``: evicting 1 GB of a 2 GB file (the -wal's peak) and
  10,000 restores' memory;
- ``scale_flat.py``: list, search and cold restore in a small and a large file;
- ``window_timing.py --transcript`` and ``graph_memory.py``: the window
  showing 1,000-message paths and 10,000-node graphs;
- ``busy_threads.py``: threads on an idle and a busy machine.

Run it alone (the figures are times): some 10 minutes on the 2-core VM.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/scale.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

TOOLS = Path(__file__).resolve().parent
PARTS: list[tuple[str, list[str], list[str]]] = [
    # (script, its arguments, its arguments with --quick)
    ("scale_delete.py", [], []),
    ("scale_first_visit.py", [], ["--sizes", "101,301"]),
    ("scale_tree_visits.py", [], ["--sizes", "1000", "--visits", "50"]),
    ("scale_space.py", [], ["--gb", "0.5", "--clear-mb", "60", "--switches", "2000"]),
    ("scale_flat.py", [], ["--scale", "5"]),
    ("window_timing.py", ["--transcript"], ["--transcript"]),
    ("graph_memory.py", [], ["--nodes", "1000"]),
    ("busy_threads.py", [], ["--tokens", "600"]),
]


def main() -> int:
    """Run every part; the exit status is the first failing part's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    args = parser.parse_args()
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": os.environ.get("QT_QPA_PLATFORM", "offscreen"),
    }
    status = 0
    for script, full, quick in PARTS:
        command = [
            sys.executable,
            str(TOOLS / script),
            *(quick if args.quick else full),
        ]
        print(f"\n## {script} {' '.join(command[2:])}\n", flush=True)
        started = time.perf_counter()
        result = subprocess.run(command, env=env, check=False)
        print(f"\n({time.perf_counter() - started:.0f} s, exit {result.returncode})")
        status = status or result.returncode
    return status


if __name__ == "__main__":
    raise SystemExit(main())
