"""Garbage is collected on the GUI thread, not on whichever thread allocates
(see app/qt/gui_thread_gc.py for the hang that avoids)."""

from __future__ import annotations

import gc
import threading
import weakref

from app.qt.gui_thread_gc import GuiThreadCollector


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_cycles_made_on_another_thread_are_freed_on_the_gui_thread(qtbot):
    collector = GuiThreadCollector()
    collector.start()
    try:
        assert not gc.isenabled()
        freed_on: list[str] = []

        def make_garbage() -> None:
            cycle = _Cycle()
            weakref.finalize(
                cycle, lambda: freed_on.append(threading.current_thread().name)
            )
            del cycle
            # Enough allocation that an automatic collection would run here.
            junk = [[_Cycle() for _ in range(50)] for _ in range(200)]
            del junk

        worker = threading.Thread(target=make_garbage, name="allocating")
        worker.start()
        worker.join()
        assert freed_on == []  # nothing was collected on that thread
        qtbot.waitUntil(lambda: bool(freed_on), timeout=5000)
        assert freed_on == [threading.current_thread().name]
    finally:
        collector.stop()
    assert gc.isenabled()
