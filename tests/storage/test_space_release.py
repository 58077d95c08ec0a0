"""Freeing space keeps the -wal file small and shrinks the file as it goes (issue 23).

Evicting or clearing checkpoints used to write everything it freed to the
-wal first (SQLite zeroed the deleted pages, then moved every page kept
into the holes in one transaction): a -wal as large as what was freed, kept
until the process exited, and on a nearly full disk an eviction that could
not even start. Here real blobs of a few hundred megabytes go through the
storage functions, and the -wal is watched from the progress callback
and from a thread that looks at it all the time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import checkpoint_rows, conversation_rows, node_rows
from storage.db import Database, open_database
from tests.conftest import ROOT
from tools.scale_space import settled_size, wal_size

BLOB = 2 << 20
# The -wal may hold one step of release_space and what a deletion writes.
WAL_BOUND = (16 << 20) + (4 << 20)


def _fill(db: Database, count: int, size: int = BLOB) -> tuple[list[int], int]:
    """``count`` nodes with a checkpoint of ``size`` random bytes each, the
    first saved least recently used; their ids and the profile."""
    profile = checkpoint_rows.ensure_profile(db, "fp", {})
    _conversation, root = conversation_rows.create_conversation(db, "big", None)
    base = os.urandom(size)
    ids = []
    for n in range(count):
        node = node_rows.add_node(db, root.id, "user", f"m{n}", tokens=[1, 2, 3])
        data = n.to_bytes(8, "little") + base[8:]
        checkpoint_rows.save_checkpoint(db, node.id, profile, "delta", 0, 3, data)
        ids.append(node.id)
    return ids, profile


@contextlib.contextmanager
def _watched_wal(path: Path) -> Iterator[list[int]]:
    """Yield a list whose one item becomes the largest size the -wal had."""
    peak = [wal_size(path)]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.0005):
            peak[0] = max(peak[0], wal_size(path))

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield peak
    finally:
        stop.set()
        watcher.join()
        peak[0] = max(peak[0], wal_size(path))


def _consistent(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        # Every checkpoint has its blob and every blob its checkpoint.
        assert con.execute(
            "SELECT count(*) FROM checkpoint c LEFT JOIN checkpoint_blob b "
            "ON b.checkpoint_id = c.id WHERE b.checkpoint_id IS NULL"
        ).fetchone() == (0,)
        assert con.execute(
            "SELECT count(*) FROM checkpoint_blob b LEFT JOIN checkpoint c "
            "ON c.id = b.checkpoint_id WHERE c.id IS NULL"
        ).fetchone() == (0,)


def test_evicting_most_checkpoints_keeps_the_wal_small_and_shrinks_the_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "arbor.sqlite3"
    db = open_database(path)
    try:
        ids, profile = _fill(db, 96)  # 192 MiB
        full = settled_size(path)
        calls: list[tuple[int, int]] = []

        with _watched_wal(path) as peak:

            def progress(done: int, total: int) -> None:
                calls.append((done, total))
                peak[0] = max(peak[0], wal_size(path))

            # Keeps the 16 used last; the kept pages, at the end of the
            # file, all move into the holes the evicted ones leave.
            freed = checkpoint_rows.evict_checkpoints(db, 16 * BLOB, progress)

        assert freed == 80 * BLOB
        assert peak[0] <= WAL_BOUND, f"-wal reached {peak[0] / 2**20:.1f} MiB"
        assert peak[0] <= freed // 8
        assert wal_size(path) == 0  # and it does not stay
        kept = path.stat().st_size
        assert kept < 17 * BLOB < full // 5
        assert settled_size(path) == kept  # given back already, not at a checkpoint
        # Progress: several steps, never backwards, ending at what was freed.
        assert len(calls) >= 10
        assert [done for done, _total in calls] == sorted(d for d, _t in calls)
        assert calls[-1] == (freed, freed)
        assert set(checkpoint_rows.checkpointed_nodes(db, ids, profile)) == set(
            ids[80:]
        )
        for node in ids[80:]:
            stored = checkpoint_rows.load_checkpoints(db, [node], profile)[node]
            assert stored.is_intact()
        assert len(node_rows.get_path(db, ids[0])) == 2  # messages stay
        assert checkpoint_rows.evict_checkpoints(db, 16 * BLOB, progress) == 0
    finally:
        db.close()
    _consistent(path)


def test_clearing_a_conversation_keeps_the_wal_small(tmp_path: Path) -> None:
    path = tmp_path / "arbor.sqlite3"
    db = open_database(path)
    try:
        ids, _profile = _fill(db, 48)  # 96 MiB
        full = settled_size(path)
        conversation = node_rows.get_node(db, ids[0]).conversation_id
        with _watched_wal(path) as peak:
            cleared = checkpoint_rows.delete_checkpoints(
                db, conversation_id=conversation
            )
        assert cleared == 48 * BLOB
        assert peak[0] <= WAL_BOUND, f"-wal reached {peak[0] / 2**20:.1f} MiB"
        assert path.stat().st_size < full // 20
    finally:
        db.close()
    _consistent(path)


# The child evicts everything, telling each step on its output, and at the
# step it is told waits to be killed: after that step has committed, with
# the -wal still holding it.
_EVICT = """
import sys
from pathlib import Path
from storage import checkpoint_rows, conversation_rows, node_rows
from storage.db import open_database

db = open_database(Path(sys.argv[1]))
calls = 0

def progress(done, total):
    global calls
    calls += 1
    print(done, total, flush=True)
    if calls == int(sys.argv[2]):
        sys.stdin.readline()

checkpoint_rows.evict_checkpoints(db, 0, progress)
print("finished", flush=True)
"""


def test_an_eviction_killed_midway_leaves_a_consistent_database(tmp_path: Path) -> None:
    path = tmp_path / "arbor.sqlite3"
    db = open_database(path)
    ids, profile = _fill(db, 40)  # 80 MiB: batches of 16 checkpoints
    db.close()
    with subprocess.Popen(
        # Killed at the first batch's second step: deleted, half given back.
        [sys.executable, "-c", _EVICT, str(path), "2"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            for _step in range(2):
                line = child.stdout.readline()
                assert line and line != "finished\n", line
            os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
    assert child.returncode == -signal.SIGKILL

    _consistent(path)
    db = open_database(path)
    try:
        remaining = checkpoint_rows.checkpointed_nodes(db, ids, profile)
        assert set(remaining) == set(ids[16:])  # the first batch, all of it
        for node in remaining:
            stored = checkpoint_rows.load_checkpoints(db, [node], profile)[node]
            assert stored.is_intact()
        assert len(node_rows.get_path(db, ids[-1])) == 2
        # What was left is evicted, and what the first run freed given back.
        assert checkpoint_rows.evict_checkpoints(db, 0) == sum(remaining.values())
        assert path.stat().st_size < BLOB
    finally:
        db.close()
    _consistent(path)


# --- a full disk -------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = os.geteuid() == 0 and (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)],
            capture_output=True,
            check=False,
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    # Lazily: a failed test's traceback may still hold a file open there.
    subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill_disk(folder: Path) -> None:
    for name, size in (("filler", 65536), ("filler-tail", 1)):
        fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * size)
        except OSError:
            pass
        finally:
            os.close(fd)
    assert shutil.disk_usage(folder).free == 0


def test_evicting_on_a_full_disk_needs_no_more_room_than_it_frees(
    small_disk: Path,
) -> None:
    # Deleting used to zero the pages first and move what it kept in one
    # transaction: 14 MiB of -wal on a disk with the reserve's 1 MiB free.
    path = small_disk / "arbor.sqlite3"
    db = open_database(path)
    try:
        ids, profile = _fill(db, 8)  # 16 MiB
        settled_size(path)
        _fill_disk(small_disk)
        assert checkpoint_rows.evict_checkpoints(db, BLOB) == 7 * BLOB
        assert set(checkpoint_rows.checkpointed_nodes(db, ids, profile)) == {ids[-1]}
        assert shutil.disk_usage(small_disk).free > 6 * BLOB
        assert path.stat().st_size < 2 * BLOB
    finally:
        db.close()
    _consistent(path)
