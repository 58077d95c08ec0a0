"""Finding rows by id: what every storage module shares.

Ids SQLite cannot bind are no row (a clear ``NotFound``, not an
``OverflowError``), and many ids are bound in batches SQLite accepts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from storage.errors import NotFound

# SQLite stores ids as signed 64-bit integers; nothing outside 1..2**63-1 can
# be a row id (and binding a larger Python int raises OverflowError).
MAX_ID = 2**63 - 1

# Ids bound in one ``IN (...)`` list: SQLite before 3.32 allows 999 variables.
IDS_PER_QUERY = 500


def id_batches(ids: Sequence[int]) -> list[Sequence[int]]:
    """``ids`` in batches of at most ``IDS_PER_QUERY``."""
    return [ids[i : i + IDS_PER_QUERY] for i in range(0, len(ids), IDS_PER_QUERY)]


def get_row(session: Session, model: type, ident: int) -> Any:
    """The ``model`` row with id ``ident``; ``NotFound`` when there is none."""
    require_valid_id(model, ident)
    obj = session.get(model, ident)
    if obj is None:
        raise NotFound(not_found_message(model, ident))
    return obj


def not_found_message(model: type, ident: object) -> str:
    """What ``NotFound`` says of a missing ``model`` row."""
    return f"No {model.__name__.lower()} with id {ident}."


def valid_id(ident: object) -> bool:
    """Whether ``ident`` can be a row id at all."""
    return isinstance(ident, int) and 0 < ident <= MAX_ID


def require_valid_id(model: type, ident: object) -> None:
    """Raise ``NotFound`` for an ``ident`` that cannot be a row id."""
    if not valid_id(ident):
        raise NotFound(not_found_message(model, ident))


def valid_ids(idents: list[int] | tuple[int, ...]) -> list[int]:
    """``idents`` without those that cannot be row ids (SQLite could not
    even bind them, and they match no row)."""
    return [ident for ident in idents if valid_id(ident)]
