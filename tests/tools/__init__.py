"""Tests of tools/ (the GPU check, the catalog pinner)."""
