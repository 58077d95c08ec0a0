"""What ``arbor worker``s offer: whether each answers, then its devices and
their free memory, as JSON lines (``arbor workers``).

A worker's devices are known only once it is registered with llama.cpp, and
registering is what can end a process: llama.cpp aborts when a worker goes
away between its hello and the registration, or dies while registered. So
the window never surveys in its own process; it runs ``arbor workers`` as a
throwaway child and reads its lines (``app/qt/workers/worker_check.py``).
If the child aborts, only the child is lost, and the lines it wrote first
(every worker's hello) are still read.

One line per finding, written as soon as it is known:

- ``{"address": A, "status": "ready", "version": "7.0.0"}``, or
  ``{"address": A, "status": "nothing listens there", "message": "..."}``
  (``rpc_client.CheckFailed``'s few words and its full sentence), for every
  worker first, in the order given;
- then ``{"address": A, "devices": [{"index": 0, "free_bytes": F,
  "total_bytes": T}, ...]}`` for every ready one, or ``{"address": A,
  "survey_failed": "..."}`` where registering them failed without an abort.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.backend import devices, rpc_client
from app.backend.errors import BackendError

Report = Callable[[dict[str, Any]], None]


def survey(addresses: Sequence[str], timeout: float, report: Report) -> bool:
    """Ask every worker its hello, then register the ready ones and report
    their devices; whether every worker was ready and surveyed.

    ``addresses`` are ``HOST:PORT`` as ``settings.worker_address`` writes
    them; ``timeout`` is each hello's limit in seconds. Registers workers in
    this process (which may abort there): run it in a process of its own.
    """
    ready = []
    for address in addresses:
        try:
            version = rpc_client.check(address, timeout)
        except rpc_client.CheckFailed as exc:
            report({"address": address, "status": exc.status, "message": str(exc)})
            continue
        report({"address": address, "status": "ready", "version": version})
        ready.append(address)
    if not ready:
        return False
    try:
        workers = rpc_client.connect(ready, timeout)
    except BackendError as exc:  # gone since its hello, or two names of one
        for address in ready:
            report({"address": address, "survey_failed": str(exc)})
        return False
    for worker in workers:
        found = []
        for device in worker.devices:
            # Its free memory now (the registration noted only the total).
            described = devices.describe(device.handle)
            found.append(
                {
                    "index": device.index,
                    "free_bytes": described.free_bytes,
                    "total_bytes": described.total_bytes,
                }
            )
        report({"address": worker.address, "devices": found})
    return len(ready) == len(addresses)
