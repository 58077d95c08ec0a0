"""Check a GGUF file before llama.cpp sees it, and identify it by content."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

from app.backend.errors import ModelFileError

GGUF_MAGIC = b"GGUF"
_SAMPLE_SIZE = 1 << 20  # 1 MiB read at each sample point
_SAMPLE_POINTS = 16


def check_model_file(path: Path) -> None:
    """Raise ``ModelFileError`` (a readable message) if ``path`` is no usable GGUF."""
    if not path.exists():
        raise ModelFileError(f"The model file {path} does not exist.")
    if not path.is_file():
        raise ModelFileError(f"{path} is not a file.")
    try:
        with path.open("rb") as handle:
            header = handle.read(24)
    except OSError as exc:
        raise ModelFileError(f"Cannot read {path}: {exc.strerror}.") from exc
    if len(header) < 24 or header[:4] != GGUF_MAGIC:
        raise ModelFileError(f"{path.name} is not a GGUF model file.")
    version, n_tensors, _n_kv = struct.unpack("<IQQ", header[4:24])
    if version not in (2, 3):
        raise ModelFileError(
            f"{path.name} uses GGUF version {version}, which is not supported."
        )
    if n_tensors == 0:
        raise ModelFileError(f"{path.name} holds no tensors (a vocabulary-only file?).")


def content_identity(path: Path) -> str:
    """A hash that identifies the model by its bytes, not its path.

    Hashing a multi-gigabyte file in full would delay every start, so we hash
    the size and 1 MiB at each of 16 evenly spaced offsets, the first and last
    included. Any re-quantization or fine-tune of a model changes those bytes.
    """
    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as handle:
        if size <= _SAMPLE_SIZE * _SAMPLE_POINTS:
            digest.update(handle.read())
        else:
            step = (size - _SAMPLE_SIZE) // (_SAMPLE_POINTS - 1)
            for i in range(_SAMPLE_POINTS):
                handle.seek(i * step)
                digest.update(handle.read(_SAMPLE_SIZE))
    return digest.hexdigest()
