"""Preferences and other settings: JSON values by key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select

from storage.db import Database
from storage.models import Setting


def get_setting(db: Database, key: str, default: Any = None) -> Any:
    """Return a stored preference, or ``default``."""
    with db.read() as s:
        row = s.get(Setting, key)
        return default if row is None else row.value


def set_setting(db: Database, key: str, value: Any) -> None:
    """Store a preference (any JSON value)."""
    with db.write() as s:
        s.merge(Setting(key=key, value=value))


def get_settings(db: Database, keys: Iterable[str]) -> dict[str, Any]:
    """The stored values of those of ``keys`` that are set, from one snapshot."""
    wanted = list(keys)
    with db.read() as s:
        rows = s.execute(select(Setting).where(Setting.key.in_(wanted))).scalars()
        return {row.key: row.value for row in rows}


def set_settings(db: Database, values: Mapping[str, Any]) -> None:
    """Store several preferences (JSON values) in one transaction."""
    with db.write() as s:
        for key, value in values.items():
            s.merge(Setting(key=key, value=value))
