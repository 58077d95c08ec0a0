"""Qt workers: the engine thread and the jobs it runs."""

from app.qt_runtime import protect_singletons

# Before any other PySide6 call: see app/qt_runtime.py.
protect_singletons()
