"""Everything that imports PySide6: the window's widgets, its Qt item models,
the worker threads that own the engine, and the GUI's entry point.

Nothing outside this package imports Qt (tests/system/test_layering.py), and importing
any of it first applies the PySide6 workaround below, once.
"""

from app.qt.runtime import protect_singletons

# Before any other PySide6 call: see app/qt/runtime.py.
protect_singletons()
