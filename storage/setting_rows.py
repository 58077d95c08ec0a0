"""Preferences and other settings: JSON values by key."""

from __future__ import annotations

from typing import Any

from storage.db import Database
from storage.models import (
    Setting,
)


def get_setting(db: Database, key: str, default: Any = None) -> Any:
    """Return a stored preference, or ``default``."""
    with db.read() as s:
        row = s.get(Setting, key)
        return default if row is None else row.value


def set_setting(db: Database, key: str, value: Any) -> None:
    """Store a preference (any JSON value)."""
    with db.write() as s:
        s.merge(Setting(key=key, value=value))
