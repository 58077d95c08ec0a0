"""Tests of app/bench: ``arbor bench``."""
