"""The sha256 of the files in the models folder, remembered by size and mtime.

A pull of a model that is there already must say whether its bytes are the
version the Hub serves now, and only a hash says that (a changed file can
keep its size). Hashing runs at about 1 GB/s from memory here and slower
from a disk, so a model of several GB costs seconds to a minute; a pull
should not pay that each time. ``HashCache`` keeps, in one small JSON file
at the top of the models folder, each file's sha256 with the size and
modification time (``st_mtime_ns``) it had when it was hashed, and trusts
the sha256 only while both are unchanged.

What it cannot see, as no cache keyed this way can: bytes changed in place
with the modification time put back (``touch -r``, a copy that keeps the
time of other bytes of the same size), and bit rot. Arbor never writes a
model file in place: a download goes to ``<file>.part`` and replaces the
file only once verified.

The file is rewritten whole (a new file, then a rename), so a reader never
sees half of it. Two processes that remember at once may lose one entry;
that file is hashed again next time, nothing worse.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

CACHE_FILENAME = ".arbor-sha256.json"

_log = logging.getLogger(__name__)


class HashCache:
    """The remembered sha256 of the files under ``folder``.

    Parameters
    ----------
    folder
        The models folder; the cache file lives at its top, and entries are
        kept by the file's path relative to it.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / CACHE_FILENAME

    def known(self, file: Path) -> str | None:
        """The sha256 remembered for ``file``, if its size and mtime are
        still those it had when it was hashed; else None."""
        entry = self._read().get(self._key(file))
        stamp = stamp_of(file)
        if not isinstance(entry, dict) or stamp is None:
            return None
        if [entry.get("size"), entry.get("mtime_ns")] != list(stamp):
            return None
        digest = entry.get("sha256")
        return digest if isinstance(digest, str) else None

    def remember(self, file: Path, digest: str, stamp: tuple[int, int]) -> None:
        """Remember that ``file`` had ``digest`` when its (size, mtime_ns)
        was ``stamp`` (taken before it was read). Files gone are forgotten.

        A cache that cannot be written costs a hash next time, not the pull:
        the failure is logged.
        """
        if stamp_of(file) != stamp:
            return  # changed while it was read: the digest may not be its own
        entries = {
            key: entry
            for key, entry in self._read().items()
            if (self.folder / key).is_file()
        }
        size, mtime_ns = stamp
        entries[self._key(file)] = {
            "size": size,
            "mtime_ns": mtime_ns,
            "sha256": digest,
        }
        try:
            self._write(entries)
        except OSError as exc:
            _log.info("the sha256 of %s is not remembered: %s", file, exc)

    def _key(self, file: Path) -> str:
        return file.relative_to(self.folder).as_posix()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}  # none yet, or unreadable: everything is hashed again
        return data if isinstance(data, dict) else {}

    def _write(self, entries: dict[str, Any]) -> None:
        handle, name = tempfile.mkstemp(prefix=".arbor-sha256-", dir=self.folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(entries, out, indent=1, sort_keys=True)
            os.replace(name, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(name)
            raise


def stamp_of(file: Path) -> tuple[int, int] | None:
    """``file``'s (size, st_mtime_ns), or None if it cannot be read."""
    try:
        info = file.stat()
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns
