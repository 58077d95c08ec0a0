"""Tests of storage/: the SQLite layer on real files."""
