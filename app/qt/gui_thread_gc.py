"""Python's cyclic garbage collector, run on the GUI thread only.

Left automatic, a collection runs on whichever thread happens to allocate
(the engine thread, the local server's, a download's). There it may finalize
a PySide6 connection to a dead receiver, which takes one of Qt's connection
mutexes and then waits for the GIL, while the GUI thread, holding the GIL,
waits for that mutex to connect a signal: the process hangs (seen in CI,
gdb: QObject::disconnect from PySide6's weakref handler on the engine
thread). With automatic collection off and a timer collecting on the GUI
thread, every finalizer of Qt objects runs where Qt expects it. PyQtGraph
and other long-lived PySide/PyQt programs do the same.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

# The youngest generation is collected this often (ms): cheap, a fraction of
# a millisecond; every tenth tick collects everything.
_INTERVAL_MS = 1000
_FULL_EVERY = 10


class GuiThreadCollector(QObject):
    """Collects garbage on its own (the GUI) thread, on a timer."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._ticks = 0
        self._timer = QTimer(self)
        self._timer.setInterval(_INTERVAL_MS)
        self._timer.timeout.connect(self.collect)

    def start(self) -> None:
        """Turn automatic collection off and collect on the timer instead."""
        gc.disable()
        self._timer.start()

    def stop(self) -> None:
        """Back to automatic collection (at the end of the GUI's run)."""
        self._timer.stop()
        gc.enable()

    def collect(self) -> None:
        """One tick: the young generation, or everything every tenth time."""
        self._ticks += 1
        gc.collect(2 if self._ticks % _FULL_EVERY == 0 else 0)
