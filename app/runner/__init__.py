"""Running the window's jobs without Qt: on the engine thread, or in a child
process when the model is placed on workers (see ``app/runner/host.py``)."""
