"""The library's failures a person can act on, for the CLI and the window.

Kept apart from the modules that raise them so that importing the tuple
costs nothing (no ``huggingface_hub``).
"""

from __future__ import annotations

from app.library.catalog import CatalogError
from app.library.hub import HubError
from app.library.installed import LibraryError

LIBRARY_ERRORS: tuple[type[Exception], ...] = (HubError, LibraryError, CatalogError)
