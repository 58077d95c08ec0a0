"""The window's logic without Qt: the presenter and the parts that hold its
state (the shown conversation, the model session, the reply in flight), the
action table, and the protocols of the window and the engine it speaks to
(the jobs it submits are ``app.jobs``). Importing it loads no PySide6
(tests/system/test_import_weight.py)."""
