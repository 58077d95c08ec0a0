"""Tests of packaging/: the desktop bundle, run as a user runs it."""
