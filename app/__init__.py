"""Arbor: an offline desktop chat for local GGUF models whose conversations are trees.

Subpackages: ``backend`` (the only code that touches llama.cpp), ``conversation``
(the Qt-free service the UI and the CLI drive).
"""
