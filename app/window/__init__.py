"""The window's logic without Qt: the presenter's state machine, the action
table and the reply being streamed (the jobs it submits are ``app.jobs``).
Importing it loads no PySide6 (tests/test_import_weight.py)."""
