"""The window's logic without Qt: the presenter's state machine, the action
table, the jobs the window submits and the reply being streamed. Importing it
loads no PySide6 (tests/test_import_weight.py)."""
