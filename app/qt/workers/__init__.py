"""Qt workers: the engine thread, and the download and library threads."""
