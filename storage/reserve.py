"""A little disk space held in reserve beside the database, for a full disk.

When the disk is full, SQLite cannot even open the database for writing: it
must first create its -wal and -shm files. Yet deleting conversations and
checkpoints is exactly how a user frees space. So Arbor keeps a small file of
really allocated blocks next to the database (``arbor.sqlite3.reserve``),
gives it up when an open for writing fails on a full disk, and makes it again
once there is room. Nothing here raises: the reserve is a help, not a need.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

RESERVE_BYTES = 1024 * 1024
# Only made where it takes at most half of what is free: never the file that
# fills a disk.
_FREE_FACTOR = 2


def reserve_path(database: Path) -> Path:
    """The reserve file of the database at ``database``."""
    return database.with_name(database.name + ".reserve")


def free_bytes(database: Path) -> int | None:
    """Free disk space beside the database, or None when it cannot be told."""
    try:
        return shutil.disk_usage(database.parent).free
    except OSError:
        return None


def keep(database: Path) -> None:
    """Make the reserve if it is missing and the disk has room for it."""
    reserve = reserve_path(database)
    if reserve.exists():
        return
    try:
        free = free_bytes(database)
        if free is None or free < _FREE_FACTOR * RESERVE_BYTES:
            return
        with reserve.open("wb") as file:
            # Allocated blocks, not a sparse file: only those free space later.
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(file.fileno(), 0, RESERVE_BYTES)
            else:  # pragma: no cover - macOS, Windows
                file.write(b"\0" * RESERVE_BYTES)
    except OSError as exc:
        log.info("no disk space reserve beside %s: %s", database, exc)
        reserve.unlink(missing_ok=True)


def give_up(database: Path) -> bool:
    """Delete the reserve to make room; whether there was one to delete."""
    try:
        reserve_path(database).unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("cannot delete the disk space reserve: %s", exc)
        return False
    return True


def spend_if_short(database: Path) -> None:
    """Give up the reserve before a deletion when the disk is nearly full.

    A deletion writes too (to the -wal file) before it frees anything.
    """
    free = free_bytes(database)
    if free is None or free < _FREE_FACTOR * RESERVE_BYTES:
        give_up(database)
