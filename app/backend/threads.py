"""How many CPU threads llama.cpp computes with when the user chose
"automatic": the cores free right now, one left over.

llama.cpp's threads meet at a barrier after every step of the model's graph
and wait there by spinning, so one thread that the system pauses stalls all
the others until it runs again. On a machine whose cores other programs keep
busy, as many threads as cores collapse: reprocessing 2,595 tokens on the
2-core VM took 25.7 s on two threads and 0.52 s on one (issue 23). So the
count follows what is free, asked again before every decode (a read of
``/proc/loadavg``, some 10 us; ``llama_set_n_threads`` only when it
changes), and one core is always left for the window and the system.

Where the free cores cannot be told (not Linux), all but one are used.
"""

from __future__ import annotations

import os
from pathlib import Path

# More threads than this gain nothing on the models Arbor runs on a CPU
# (memory bandwidth is the limit), as llama.cpp's own default says.
MAX_AUTOMATIC_THREADS = 8
_LOADAVG = Path("/proc/loadavg")
# The runnable count of /proc/loadavg is the whole machine's; in a container
# it can be the host's, whose other tasks are not competing for our cores. A
# count this many times our cores is taken for that, and ignored.
_HOST_WIDE = 4


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def others_running(cores: int) -> int | None:
    """How many tasks besides this thread are runnable now (None: unknown).

    ``/proc/loadavg``'s fourth field is "runnable/total"; the thread reading
    it is one of the runnable.
    """
    try:
        runnable = int(_LOADAVG.read_text().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None
    others = max(0, runnable - 1)
    return None if others > _HOST_WIDE * cores else others


def automatic_threads() -> int:
    """Threads for "automatic": the free cores but one, at least one, at
    most ``MAX_AUTOMATIC_THREADS``."""
    cores = usable_cores()
    busy = others_running(cores) or 0
    return max(1, min(MAX_AUTOMATIC_THREADS, cores - busy - 1))
