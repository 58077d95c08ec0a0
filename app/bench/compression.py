"""Would compressing checkpoint blobs pay? Codecs tried on real blobs.

Measured on the reference path's blobs (the cold-resume path of about 2k
tokens): how much disk each codec saves, and how much decompressing would add
to restoring that path. Only stdlib zlib is always there; zstd is tried when
the ``zstandard`` package happens to be installed (it is not a dependency).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

from app.bench.errors import BenchError
from app.bench.measure import Stopwatch, median, ratio
from app.bench.results import CompressionRow

Codec = tuple[str, Callable[[bytes], bytes], Callable[[bytes], bytes]]

# A codec is worth keeping if it saves at least a fifth of the disk and adds at
# most a quarter to the restore time (restoring stays orders of magnitude
# ahead of reprocessing, and the 100x target keeps its margin).
KEEP_MIN_SAVING_PCT = 20.0
KEEP_MAX_ADDED_RESTORE = 0.25

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
    """List the codecs this installation can try."""
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


def run_compression(
    blobs: list[bytes], reference_restore_ms: float, repeats: int
) -> list[CompressionRow]:
    """Compress and decompress ``blobs`` with each codec; verify the round trip."""
    original = sum(len(b) for b in blobs)
    mib = original / _MIB
    rows = []
    for name, compress, decompress in available_codecs():
        packed_sizes, compress_ms, decompress_ms = [], [], []
        for _ in range(repeats):
            with Stopwatch() as packing:
                packed = [compress(b) for b in blobs]
            with Stopwatch() as unpacking:
                unpacked = [decompress(p) for p in packed]
            if unpacked != blobs:
                raise BenchError(f"{name} did not round-trip")
            packed_sizes.append(sum(len(p) for p in packed))
            compress_ms.append(packing.ms)
            decompress_ms.append(unpacking.ms)
        saving = (1 - ratio(median(packed_sizes), original)) * 100
        added = median(decompress_ms)
        rows.append(
            CompressionRow(
                codec=name,
                saving_pct=saving,
                compress_ms_per_mib=ratio(median(compress_ms), mib),
                decompress_ms_per_mib=ratio(added, mib),
                reference_restore_ms=reference_restore_ms,
                added_restore_ms=added,
                keep=saving >= KEEP_MIN_SAVING_PCT
                and added <= KEEP_MAX_ADDED_RESTORE * reference_restore_ms,
            )
        )
    return rows
