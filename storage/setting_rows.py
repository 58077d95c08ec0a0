"""Preferences and other settings: JSON values by key."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from storage.db import Database
from storage.tables import Setting


def get_setting(db: Database, key: str, default: Any = None) -> Any:
    """Return a stored preference, or ``default``."""
    with db.read() as s:
        row = s.connection().execute(_VALUE_OF, {"key": key}).first()
        return default if row is None else row[0]


# Built once: the local server looks up its client's conversation per request.
_VALUE_OF = select(Setting.value).where(Setting.key == bindparam("key"))


def set_setting(db: Database, key: str, value: Any) -> None:
    """Store a preference (any JSON value)."""
    set_settings(db, {key: value})


def get_settings(db: Database, keys: Iterable[str]) -> dict[str, Any]:
    """The stored values of those of ``keys`` that are set, from one snapshot."""
    wanted = list(keys)
    with db.read() as s:
        rows = s.execute(select(Setting).where(Setting.key.in_(wanted))).scalars()
        return {row.key: row.value for row in rows}


def set_settings(db: Database, values: Mapping[str, Any]) -> None:
    """Store several preferences (JSON values) in one transaction."""
    if not values:
        return
    rows = [{"key": key, "value": value} for key, value in values.items()]
    with db.write() as s:
        # One statement, built once: a client of the local server has its
        # conversation remembered before its first reply.
        s.connection().execute(_UPSERT, rows)


_UPSERT = (
    sqlite_insert(Setting)
    .values(key=bindparam("key"), value=bindparam("value"))
    .on_conflict_do_update(
        index_elements=[Setting.key], set_={"value": bindparam("value")}
    )
)
