"""Giving the pages that deletions free back to the file system, in steps
that keep the -wal small."""

from __future__ import annotations

import functools
import logging
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from storage import reserve
from storage.db import Database, translate_errors
from storage.errors import StorageUnavailable

log = logging.getLogger(__name__)


T = TypeVar("T")


def releases_space(function: Callable[..., T]) -> Callable[..., T]:
    """Run ``release_space`` after a function that deletes rows."""

    @functools.wraps(function)
    def wrapper(db: Database, *args: Any, **kwargs: Any) -> T:
        result = function(db, *args, **kwargs)
        try:
            release_space(db)
        except StorageUnavailable as exc:
            # The deletion itself is committed; failing to shrink the file now
            # (e.g. locked) only postpones that to the next deletion.
            log.warning("Could not shrink the database: %s", exc)
        return result

    return wrapper


# Giving freed pages back moves the pages at the end of the file into the
# free ones, then cuts the end off. SQLite writes every page it moves to the
# -wal file first, and the file only shrinks at the checkpoint after: done
# in one transaction, the -wal grew by all that was moved, up to the size of
# the data kept (issue 23). So it goes in steps of at most this much, each one
# transaction, with a TRUNCATE checkpoint after each: the -wal holds one
# step at most, and each step needs no more free disk than it frees.
_RELEASE_STEP_BYTES = 16 << 20

# On a nearly full disk a step takes at most this share of what is free
# (the -wal needs room for it before the file shrinks), and never less than
# this many pages.
_RELEASE_FREE_SHARE = 2

_RELEASE_MIN_PAGES = 16

# PRAGMA auto_vacuum's value for INCREMENTAL (what new files get, db.py).
_AUTO_VACUUM_INCREMENTAL = 2

Progress = Callable[[int, int], None]
"""A callback told ``(done, total)`` as long work goes on."""


def release_space(db: Database, progress: Progress | None = None) -> None:
    """Give the pages freed by deletions back to the file system, in steps.

    Checkpoints are most of the file; without this, deleting them would free
    room inside the file but never shrink it. Each step is one transaction
    (a kill leaves the file consistent, the rest free inside it for later)
    followed by a TRUNCATE checkpoint, which shrinks the file and empties the
    -wal (see ``_RELEASE_STEP_BYTES``). ``progress(done, total)`` is told the
    pages given back after each step has committed, while the -wal still
    holds it. Best effort: the deletion is already committed, so a failure
    here (a disk still too full to move pages, a reader that keeps the -wal
    from being emptied) is only logged, and the next deletion gives back the
    rest. Then the disk space reserve is made again if it was spent. Does
    nothing on a read-only database.
    """
    if db.read_only:
        return
    try:
        with translate_errors(db.path):
            pooled = db.engine.raw_connection()
            try:
                raw: sqlite3.Connection = pooled.driver_connection  # type: ignore[assignment]
                _release_in_steps(db, raw, progress)
            finally:
                pooled.close()
    except StorageUnavailable as exc:
        log.warning("could not give freed space back yet: %s", exc)
    reserve.keep(db.path)


def _release_in_steps(
    db: Database, raw: sqlite3.Connection, progress: Progress | None
) -> None:
    def pragma(statement: str) -> int:
        return int(raw.execute(f"PRAGMA {statement}").fetchone()[0])

    if pragma("auto_vacuum") != _AUTO_VACUUM_INCREMENTAL:
        # A file made without it (by hand, or an older SQLite tool) keeps
        # its free pages for reuse; the pragma would do nothing.
        return
    page_size = pragma("page_size")
    total = left = pragma("freelist_count")
    while left > 0:
        step = min(left, _release_step_pages(db, page_size))
        # The pragma gives back one page per step of its statement and
        # sqlite3's execute() steps only once; executescript() runs it to
        # the end, one transaction in autocommit mode.
        raw.executescript(f"PRAGMA incremental_vacuum({step});")
        now = pragma("freelist_count")
        if now >= left:
            return  # nothing given back (another writer freed more meanwhile)
        left = now
        if progress is not None:
            progress(total - min(left, total), total)
        busy, _frames, _copied = raw.execute(
            "PRAGMA wal_checkpoint(TRUNCATE)"
        ).fetchone()
        if busy:
            # A reader still needs what the -wal holds: another step would
            # only grow it. The pages stay free inside the file until then.
            log.info("giving freed space back paused: the database is in use")
            return


def _release_step_pages(db: Database, page_size: int) -> int:
    step = _RELEASE_STEP_BYTES
    free = reserve.free_bytes(db.path)
    if free is not None:
        step = min(step, free // _RELEASE_FREE_SHARE)
    return max(_RELEASE_MIN_PAGES, step // page_size)
