"""Each worker object lives on a long-lived ``QThread`` of its own; these are
the one way it gets that thread and gives it back.

A thread is named (``arbor-engine``, ``arbor-downloads``, ...) for crash
reports and debuggers. It ends when the worker, asked through a queued
signal, quits its event loop after the work queued before; a thread that
does not stop in time is terminated rather than left to outlive the window.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, QThread, SignalInstance

log = logging.getLogger(__name__)


def worker_thread(worker: QObject, name: str) -> QThread:
    """A new thread called ``name`` with ``worker`` moved onto it.

    Start it once the worker's signals are connected.
    """
    thread = QThread()
    thread.setObjectName(name)
    worker.moveToThread(thread)
    return thread


def end_thread(thread: QThread, quit_requested: SignalInstance, wait_ms: int) -> None:
    """Have the worker end ``thread`` (``quit_requested`` reaches its slot that
    calls ``quit_current_thread``) and wait for it, ``wait_ms`` at most."""
    if not thread.isRunning():
        return
    quit_requested.emit()
    if not thread.wait(wait_ms):
        log.error(
            "the %s thread did not stop within %d ms", thread.objectName(), wait_ms
        )
        thread.terminate()
        thread.wait()


def quit_current_thread() -> None:
    """End the event loop of the thread this runs on (a worker's last slot)."""
    thread = QThread.currentThread()
    if thread is not None:
        thread.quit()
