"""Freeing space and restoring at scale (issue 23), printed as a table.

- **evict**: a file of ``--gb`` GB of checkpoints (random bytes, 0.25 to 4
  MiB each, saved through ``checkpoint_rows.save_checkpoint``), then
  ``evict_checkpoints`` down to half. The checkpoints used least recently
  are the oldest, at the start of the file: every page kept has to move
  into the holes they leave, the worst case for giving space back. Wall and
  CPU seconds, and the -wal file's peak (watched from the progress callback
  and from a thread that looks every half millisecond). Targets: 15 s, 64
  MB.
- **clear**: the same for ``delete_checkpoints`` of one conversation of
  ``--clear-mb`` MB in the middle of the file.
- **soak**: 10,000 alternating switches between two branches of 16
  checkpointed nodes, read as a restore reads them, in a fresh process
  (``tests/helpers/restore_soak.py``); with ``--model``, also 10,000 real restores
  on that model. Target: the resident set grows at most 5 MiB.
- **read**: one blob of ``--blob-mb`` MB read as a restore reads it
  (``CheckpointReader``, blobopen into a buffer kept), against a plain
  SELECT of the blob and of slices of it (``substr``); and what replacing a
  connection costs (``BLOBS_PER_CONNECTION``).

    .venv/bin/python tools/scale_space.py [--dir DIR] [--gb 2] [--model GGUF]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage import checkpoint_rows, conversation_rows, node_rows, records, tree_reads
from storage import db as storage_db
from storage.checkpoint_reader import CheckpointReader
from storage.db import Database, open_database
from storage.tables import checkpoint_checksum

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
TARGET_S = 15.0
TARGET_WAL = 64 * 10**6
TARGET_GROWTH = 5 * MIB


@dataclass(frozen=True)
class Freeing:
    """One run of freeing space: how much, and what it cost."""

    case: str
    file_before: int
    freed: int
    file_after: int
    wal_peak: int
    cpu_s: float
    wall_s: float


def settled_size(path: Path) -> int:
    """The file's size once the -wal is copied into it."""
    with contextlib.closing(sqlite3.connect(path)) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def wal_size(path: Path) -> int:
    """The size of the -wal file beside ``path`` (0: none)."""
    try:
        return os.stat(f"{path}-wal").st_size
    except FileNotFoundError:
        return 0


def fill(
    db: Database, total: int, seed: int = 23, per_conversation: int = 50
) -> list[int]:
    """Conversations of ``per_conversation`` nodes with checkpoints until
    ``total`` bytes are stored; returns the conversations' ids, oldest first."""
    rng = random.Random(seed)
    profile = checkpoint_rows.ensure_profile(db, "scale-space", {"tool": "scale-space"})
    pool = rng.randbytes(4 * MIB + 4096)
    stored = 0
    conversations = []
    while stored < total:
        conversation, root = conversation_rows.create_conversation(db, "scale", None)
        conversations.append(conversation.id)
        parent = root.id
        for n in range(per_conversation):
            size = min(rng.randrange(MIB // 4, 4 * MIB), total - stored)
            if size <= 0:
                break
            node = node_rows.add_node(db, parent, "user", f"m{n}", tokens=[1, 2])
            at = rng.randrange(4096)
            checkpoint_rows.save_checkpoint(
                db, node.id, profile, "delta", 0, 2, pool[at : at + size]
            )
            parent = node.id
            stored += size
    return conversations


def _freeing(
    case: str, path: Path, run: Callable[[Callable[[int, int], None]], int]
) -> Freeing:
    before = settled_size(path)
    peak = [wal_size(path)]
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.0005):
            peak[0] = max(peak[0], wal_size(path))

    def progress(_done: int, _total: int) -> None:
        peak[0] = max(peak[0], wal_size(path))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        freed = run(progress)
    finally:
        wall = time.perf_counter() - wall
        cpu = time.process_time() - cpu
        stop.set()
        watcher.join()
    peak[0] = max(peak[0], wal_size(path))
    return Freeing(case, before, freed, path.stat().st_size, peak[0], cpu, wall)


def measure_freeing(folder: Path, gb: float, clear_mb: float) -> list[Freeing]:
    """Evict half of a ``gb`` GB file; clear a ``clear_mb`` MB conversation."""
    path = folder / "space.sqlite3"
    for leftover in folder.glob("space.sqlite3*"):
        leftover.unlink()
    db = open_database(path)
    try:
        total = int(gb * 1e9)
        print(f"filling {total / 1e9:.1f} GB ...", file=sys.stderr, flush=True)
        fill(db, total)
        runs = [
            _freeing(
                "evict half",
                path,
                lambda progress: checkpoint_rows.evict_checkpoints(
                    db, total // 2, progress
                ),
            )
        ]
        # A conversation of clear_mb in the middle of what is left.
        (middle,) = fill(db, int(clear_mb * 1e6), seed=24, per_conversation=10**6)
        fill(db, int(clear_mb * 1e6), seed=25)
        runs.append(
            _freeing(
                f"clear a {clear_mb:.0f} MB conversation",
                path,
                lambda _progress: checkpoint_rows.delete_checkpoints(
                    db, conversation_id=middle
                ),
            )
        )
        return runs
    finally:
        db.close()
        for leftover in folder.glob("space.sqlite3*"):
            leftover.unlink()


def soak(folder: Path, kind: str, *extra: str) -> dict[str, float]:
    """Run a ``tests/helpers/restore_soak.py`` soak in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.helpers.restore_soak", kind, str(folder), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def measure_reads(folder: Path, blob_mb: float, repeats: int = 51) -> dict[str, float]:
    """Median milliseconds to read and verify one blob of ``blob_mb`` MiB
    three ways, and to replace a pooled connection."""
    path = folder / "read.sqlite3"
    for leftover in folder.glob("read.sqlite3*"):
        leftover.unlink()
    db = open_database(path)
    try:
        profile = checkpoint_rows.ensure_profile(db, "read", {})
        _conversation, root = conversation_rows.create_conversation(db, "read", None)
        node = node_rows.add_node(db, root.id, "user", "m", tokens=[1, 2])
        size = int(blob_mb * MIB)
        checkpoint_rows.save_checkpoint(
            db, node.id, profile, "delta", 0, 2, os.urandom(size)
        )
        index = tree_reads.tree_index(db, node.id, profile)
        ref = index.checkpoints[node.id]
        tokens = records.pack_tokens(node.tokens)
        reader = CheckpointReader()
        reader.reserve(size)

        def blobopen() -> None:
            with reader.reading(db) as reads:
                if isinstance(reads.verified(ref, index.profile, tokens), str):
                    raise AssertionError("the blob did not verify")

        def verify(data: bytes | memoryview) -> None:
            # As reads.verified does: the comparison is of reading, not of it.
            if ref.checksum != checkpoint_checksum(
                ref.node_id,
                index.profile,
                ref.kind,
                ref.start_pos,
                ref.end_pos,
                tokens,
                data,
            ):
                raise AssertionError("the blob did not verify")

        def select_whole() -> None:
            with db.read_raw() as raw:
                (data,) = raw.execute(
                    "SELECT data FROM checkpoint_blob WHERE checkpoint_id = ?",
                    (ref.checkpoint_id,),
                ).fetchone()
            verify(data)

        slice_bytes = 256 * 1024
        buffer = memoryview(bytearray(size))

        def select_slices() -> None:
            with db.read_raw() as raw:
                for at in range(0, size, slice_bytes):
                    (piece,) = raw.execute(
                        "SELECT substr(data, ?, ?) FROM checkpoint_blob "
                        "WHERE checkpoint_id = ?",
                        (at + 1, slice_bytes, ref.checkpoint_id),
                    ).fetchone()
                    buffer[at : at + len(piece)] = piece
            verify(buffer)

        def reconnect() -> None:
            with db.read_raw() as raw:
                raw.blobs_opened = storage_db.BLOBS_PER_CONNECTION  # type: ignore[attr-defined]

        def median_ms(call: Callable[[], None]) -> float:
            call()
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                call()
                times.append((time.perf_counter() - started) * 1000)
            return statistics.median(times)

        return {
            "blobopen into the kept buffer (what a restore does)": median_ms(blobopen),
            "SELECT data (a new bytes each time)": median_ms(select_whole),
            "SELECT substr() in 256 KiB slices into a kept buffer": median_ms(
                select_slices
            ),
            "replacing a pooled connection (once per "
            f"{storage_db.BLOBS_PER_CONNECTION} blobs)": median_ms(reconnect),
        }
    finally:
        db.close()


def main(argv: list[str] | None = None) -> None:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="where the files go (a temp dir)")
    parser.add_argument("--gb", type=float, default=2.0, help="file to evict from")
    parser.add_argument("--clear-mb", type=float, default=180.0)
    parser.add_argument("--blob-mb", type=float, default=4.0)
    parser.add_argument("--model", type=Path, help="a GGUF for real restores")
    parser.add_argument("--switches", type=int, default=10_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        freeing = measure_freeing(folder, args.gb, args.clear_mb)
        soaks = {"reads": soak(folder, "reads", "--switches", str(args.switches))}
        if args.model is not None:
            soaks["restores"] = soak(
                folder,
                "restores",
                "--model",
                str(args.model),
                "--switches",
                str(args.switches),
            )
        reads = measure_reads(folder, args.blob_mb)

    print(
        "| freeing space | file before | freed | file after | -wal peak | CPU s "
        "| wall s | target |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for f in freeing:
        ok = f.wal_peak <= TARGET_WAL and f.wall_s <= TARGET_S
        print(
            f"| {f.case} | {f.file_before / 1e6:,.0f} MB | {f.freed / 1e6:,.0f} MB "
            f"| {f.file_after / 1e6:,.0f} MB | {f.wal_peak / 1e6:,.1f} MB "
            f"| {f.cpu_s:.2f} | {f.wall_s:.2f} "
            f"| {'ok' if ok else 'MISSED'} (≤ {TARGET_S:.0f} s, "
            f"≤ {TARGET_WAL / 1e6:.0f} MB) |"
        )
    print()
    print("| restore soak | switches | RSS growth | seconds | target |")
    print("|---|---:|---:|---:|---|")
    for kind, s in soaks.items():
        ok = s["grown_bytes"] <= TARGET_GROWTH
        print(
            f"| {kind} | {s['switches']:,.0f} | {s['grown_bytes'] / 2**10:,.0f} KiB "
            f"| {s['seconds']:.1f} | {'ok' if ok else 'MISSED'} (≤ 5 MiB) |"
        )
    print()
    print(f"| reading one {args.blob_mb:g} MiB blob | median ms |")
    print("|---|---:|")
    for way, ms in reads.items():
        print(f"| {way} | {ms:.2f} |")


if __name__ == "__main__":
    main()
