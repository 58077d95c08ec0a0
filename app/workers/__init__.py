"""Qt workers: the engine thread and the jobs it runs."""
