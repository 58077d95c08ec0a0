"""Qt item models over the conversation data, and the Qt-free snapshots behind them."""

from app.qt_runtime import protect_singletons

# Before any other PySide6 call: see app/qt_runtime.py.
protect_singletons()
