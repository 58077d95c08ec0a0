"""Would compressing checkpoint blobs pay? Codecs tried on a real database's blobs.

Research, not part of ``arbor bench``: its conclusion is in
docs/benchmarks.md (f16 KV values are close to incompressible: zstd saves
about 7% and would add about 40% to a cold restore). Run it again when the
KV cache type or the codecs change::

    .venv/bin/python tools/compression_trial.py DATABASE NODE [--repeats N]

``NODE`` is the leaf of the path whose checkpoints are compressed, e.g. the
last reply of a long conversation in your own database (opened read-only).
Only stdlib zlib is always there; zstd is tried when the ``zstandard``
package happens to be installed (it is not a dependency).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

Codec = tuple[str, Callable[[bytes], bytes], Callable[[bytes], bytes]]

_MIB = 1024 * 1024


def _byte_planes(data: bytes) -> bytes:
    # f16 values: the high bytes (sign, exponent) repeat far more than the low
    # ones; grouping them lets an entropy coder see that.
    even = len(data) - len(data) % 2
    pairs = np.frombuffer(data, dtype=np.uint8, count=even).reshape(-1, 2)
    return pairs.T.tobytes() + data[even:]


def _from_byte_planes(data: bytes) -> bytes:
    even = len(data) - len(data) % 2
    planes = np.frombuffer(data, dtype=np.uint8, count=even).reshape(2, -1)
    return planes.T.tobytes() + data[even:]


def available_codecs() -> list[Codec]:
    """The codecs this installation can try."""
    codecs: list[Codec] = [
        ("zlib level 1", lambda d: zlib.compress(d, 1), zlib.decompress),
    ]
    try:
        import zstandard
    except ImportError:
        return codecs
    fast, better = zstandard.ZstdCompressor(level=1), zstandard.ZstdCompressor(level=3)
    plain = zstandard.ZstdDecompressor()
    codecs += [
        ("zstd level 1", fast.compress, plain.decompress),
        ("zstd level 3", better.compress, plain.decompress),
        (
            "zstd level 1, f16 byte planes",
            lambda d: fast.compress(_byte_planes(d)),
            lambda d: _from_byte_planes(plain.decompress(d)),
        ),
    ]
    return codecs


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def path_blobs(database: Path, leaf: int) -> list[bytes]:
    """The checkpoint blobs of the path from the root to ``leaf`` (read-only)."""
    with sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True) as con:
        rows = con.execute(
            "WITH RECURSIVE path(id, parent_id) AS ("
            " SELECT id, parent_id FROM node WHERE id = ?"
            " UNION ALL SELECT n.id, n.parent_id FROM node n"
            " JOIN path ON n.id = path.parent_id)"
            " SELECT b.data FROM path JOIN checkpoint c ON c.node_id = path.id"
            " JOIN checkpoint_blob b ON b.checkpoint_id = c.id",
            (leaf,),
        ).fetchall()
    return [bytes(row[0]) for row in rows]


def main(argv: list[str] | None = None) -> int:
    """Print one Markdown row per codec: disk saved, ms per MiB each way."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("database", type=Path)
    parser.add_argument("node", type=int)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    blobs = path_blobs(args.database, args.node)
    if not blobs:
        print("no checkpoints on that path", file=sys.stderr)
        return 1
    original = sum(len(b) for b in blobs)
    mib = original / _MIB
    print(f"{len(blobs)} checkpoints, {mib:.2f} MiB\n")
    print("| codec | disk saved | compress ms/MiB | decompress ms/MiB |")
    print("|---|---|---|---|")
    for name, compress, decompress in available_codecs():
        sizes, packing, unpacking = [], [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            packed = [compress(b) for b in blobs]
            packing.append(_ms(started))
            started = time.perf_counter()
            unpacked = [decompress(p) for p in packed]
            unpacking.append(_ms(started))
            if unpacked != blobs:
                raise SystemExit(f"{name} did not round-trip")
            sizes.append(sum(len(p) for p in packed))
        saved = (1 - statistics.median(sizes) / original) * 100
        print(
            f"| {name} | {saved:.1f}% | {statistics.median(packing) / mib:.2f} "
            f"| {statistics.median(unpacking) / mib:.2f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
