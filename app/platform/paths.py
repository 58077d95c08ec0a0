"""Where Arbor keeps its data: the platform's user data folder, or ``--data-dir``."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from storage.probe import DATABASE_FILENAME

APP_NAME = "Arbor"


def default_data_dir() -> Path:
    """The per-user data folder (e.g. ~/.local/share/Arbor on Linux)."""
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def database_path(data_dir: Path | None) -> Path:
    """The SQLite file inside ``data_dir`` (the default folder when None)."""
    return (data_dir or default_data_dir()) / DATABASE_FILENAME
