"""Keep PySide6 builds that assume immortal None/True/False safe on Python 3.11.

PySide6 6.12.0 (an abi3 wheel) returns ``None``, ``True`` and ``False`` from
bound functions without taking a reference, as Python 3.12+ allows because
those objects are immortal there. On Python 3.11 every ``label.setText(...)``
or ``signal.emit(...)`` then steals one reference, and after a few thousand
calls the interpreter aborts ("Fatal Python error: none_dealloc"). We detect
the leak with a probe and, only if present, give the singletons a reference
count so large that it can never reach zero, which is what 3.12 does.
"""

from __future__ import annotations

import ctypes
import sys

from PySide6.QtCore import QObject, Signal

_SINGLETONS = (None, True, False)
# Far more references than a process can ever drop, yet no overflow risk.
_RESERVE = 1 << 48


class _Probe(QObject):
    fired = Signal()


def singletons_leak() -> bool:
    """Whether PySide6 drops references to ``None``/``True``/``False`` here."""
    if sys.version_info >= (3, 12):
        return False  # immortal objects: nothing to drop
    probe = _Probe()
    before = [sys.getrefcount(obj) for obj in _SINGLETONS]
    for _ in range(8):
        probe.setObjectName("probe")  # returns None
        probe.fired.emit()  # returns False (no receiver)
    after = [sys.getrefcount(obj) for obj in _SINGLETONS]
    dropped = [b - a for a, b in zip(after, before, strict=True)]
    for obj, count in zip(_SINGLETONS, dropped, strict=True):
        _add_references(obj, max(0, count))  # undo the probe's own damage
    return any(count > 0 for count in dropped)


def _add_references(obj: object, count: int) -> None:
    # ob_refcnt is the first field of every CPython object.
    ctypes.c_ssize_t.from_address(id(obj)).value += count


_protected = False


def protect_singletons() -> bool:
    """Apply the workaround once, if this PySide6 needs it; return whether it did."""
    global _protected
    if not _protected and singletons_leak():
        for obj in _SINGLETONS:
            _add_references(obj, _RESERVE)
        _protected = True
    return _protected
