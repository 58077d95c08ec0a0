"""The port Arbor's local server listens on unless told.

Its own module, imported by the server, the preferences (the window's local
server setting) and the command line's grammar, so that none of them imports
another for a number, and the grammar loads nothing heavy.
"""

from __future__ import annotations

# llama.cpp's server takes 8080 and Ollama 11434; this one is free of both.
DEFAULT_PORT = 8790
