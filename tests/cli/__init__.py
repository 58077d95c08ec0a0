"""Tests of app/cli: the ``arbor`` command line as a user runs it."""
