"""Reading checkpoint blobs for a restore: one buffer, reused, and verified in place.

A restore reads tens of megabytes of blobs. Selecting them as column values
makes SQLite assemble each blob from its overflow pages into a fresh buffer,
then Python copy it into a fresh ``bytes``: two new buffers of the blob's
size, whose first touch costs more than the copying (page faults). Here each
blob is opened with ``Connection.blobopen`` and read in slices into one
buffer that is kept from read to read; with the database's memory map
(``storage/db.py``) SQLite copies straight from the page cache. The checksum
(``checkpoint_checksum``: XXH3-128 over the bytes and what they belong to)
is computed over that buffer, no copy made.

Every ``blobopen`` leaves a weak reference behind in its connection until
the connection is closed (CPython's sqlite3, python/cpython#144424), so
``Database.read_raw`` replaces a connection after ``BLOBS_PER_CONNECTION``
blobs: restoring again and again does not grow the process
(``tests/system/test_restore_memory.py``). A plain ``SELECT data`` reads a warm 4
MiB blob about as fast (``tools/scale_space.py``), but makes a new buffer
per blob, whose first touch in a cold process is what this avoids;
``substr()`` slices are eight times slower (SQLite loads the whole value
for each).
"""

from __future__ import annotations

import contextlib
import mmap
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass

from storage.db import Database
from storage.tables import checkpoint_checksum
from storage.tree_reads import CheckpointRef

_TYPE_OF = "SELECT typeof(data) FROM checkpoint_blob WHERE checkpoint_id = ?"
# Slices small enough to stay in the CPU cache between SQLite's copy into
# them and ours out of them.
_SLICE = 256 * 1024
# The buffer grows in steps of this much, so that a slightly longer blob than
# the longest so far does not allocate (and touch) a new buffer every time.
_GROWTH = 1 << 20


@dataclass
class ReadTimes:
    """Milliseconds spent reading blobs and verifying them, since the last reset."""

    read_ms: float = 0.0
    verify_ms: float = 0.0


class CheckpointReader:
    """Reads one checkpoint's bytes at a time into a buffer it keeps.

    The view a read returns is valid until the next read.
    """

    def __init__(self) -> None:
        self._buffer: bytearray | mmap.mmap = bytearray()
        self.times = ReadTimes()

    def reserve(self, size: int) -> None:
        """Make the buffer hold ``size`` bytes, before a run of reads.

        Sized once for the largest blob to come, the buffer is not replaced
        (and its fresh pages touched again) each time a larger one turns up.
        It is anonymous memory, not a ``bytearray``: that zero-fills every
        page at once with the GIL held (20 ms for the benchmark's 2k path in
        a new process, a stall of the window's GUI thread), where these pages
        are touched by the reads that fill them, a slice at a time.
        """
        if len(self._buffer) < size:
            started = time.perf_counter()
            self._buffer = mmap.mmap(-1, -(-size // _GROWTH) * _GROWTH)
            self.times.read_ms += (time.perf_counter() - started) * 1000

    @contextlib.contextmanager
    def reading(self, db: Database) -> Iterator[_Reads]:
        """Read checkpoints within one read transaction (one snapshot)."""
        with db.read_raw() as raw:
            yield _Reads(self, raw)

    def _blob(self, raw: sqlite3.Connection, ref: CheckpointRef) -> memoryview | str:
        """The blob's bytes, or why there are none."""
        started = time.perf_counter()
        # typeof() reads the row's header only, not the blob. A value of
        # another type is damage even where its bytes are the same: blobopen
        # would read TEXT as well.
        row = raw.execute(_TYPE_OF, (ref.checkpoint_id,)).fetchone()
        if row is None:
            return "gone"  # deleted since the index was read
        if row[0] != "blob":
            return f"corrupt (stored as {row[0]}, not a blob)"
        with raw.blobopen(
            "checkpoint_blob", "data", ref.checkpoint_id, readonly=True
        ) as blob:
            size = len(blob)
            self.reserve(size)
            view = memoryview(self._buffer)
            at = 0
            while at < size:
                piece = blob.read(_SLICE)
                view[at : at + len(piece)] = piece
                at += len(piece)
        self.times.read_ms += (time.perf_counter() - started) * 1000
        return view[:size]


class _Reads:
    """The reads of one transaction (see ``CheckpointReader.reading``)."""

    def __init__(self, reader: CheckpointReader, raw: sqlite3.Connection) -> None:
        self._reader = reader
        self._raw = raw

    def verified(
        self, ref: CheckpointRef, profile: str, node_tokens: bytes
    ) -> memoryview | str:
        """The checkpoint's bytes if they match its checksum, else why not.

        ``node_tokens`` are the node's stored token ids, as packed in the
        database; ``profile`` its backend profile's fingerprint. The reason
        is "gone" for a blob deleted since ``ref`` was read, "corrupt (...)"
        for one that is damaged.
        """
        data = self._reader._blob(self._raw, ref)
        if isinstance(data, str):
            return data
        started = time.perf_counter()
        intact = ref.checksum == checkpoint_checksum(
            ref.node_id,
            profile,
            ref.kind,
            ref.start_pos,
            ref.end_pos,
            node_tokens,
            data,
        )
        self._reader.times.verify_ms += (time.perf_counter() - started) * 1000
        return data if intact else "corrupt (checksum mismatch)"
