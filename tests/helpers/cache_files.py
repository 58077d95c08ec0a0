"""Files the tests cache between runs are written whole or not at all."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomically(target: Path, write: Callable[[Path], object]) -> None:
    """Have ``write`` fill a temporary file beside ``target``, then rename it:
    an interrupted run never leaves a truncated file under the real name."""
    handle, name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".partial"
    )
    os.close(handle)
    partial = Path(name)
    try:
        write(partial)
        # mkstemp makes the file private (0600); a cache file need not be.
        partial.chmod(0o644)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
