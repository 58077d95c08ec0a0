"""Tests of no one package: end to end suites (exactness, faults, real models),
the import rules (layering, import weight) and the layout of tests/ itself."""
