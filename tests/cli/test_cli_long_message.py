"""The CLI's words for a message longer than the context (issue 41): a larger
context named only where the model reads one that holds the message, with
the option that gives it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.backend.errors import context_size_for
from tests.conftest import run_cli
from tests.helpers.tiny_model import write_tiny_model

# About 2,000 tokens on the tiny model's byte-level vocabulary.
LONG_MESSAGE = "word " * 400


@pytest.fixture(scope="module")
def short_trained_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model, trained (its metadata says) for 1,024 tokens only."""
    return write_tiny_model(
        tmp_path_factory.mktemp("short") / "tiny-1k.gguf", context_length=1024
    )


def _needed(line: str) -> int:
    found = re.search(r"needs about ([\d,]+) tokens", line)
    assert found, line
    return int(found.group(1).replace(",", ""))


def test_the_cli_names_a_raise_only_where_the_model_reads_it(
    data_dir, tiny_model, short_trained_model
):
    def send(model: Path) -> str:
        root = run_cli("--data-dir", data_dir, "--model", model, "new").json["node"]
        result = run_cli(
            "--data-dir", data_dir, "--model", model, "--n-ctx", "256",
            "send", root, LONG_MESSAGE,
        )  # fmt: skip
        assert result.returncode == 1 and "Traceback" not in result.stderr
        return result.stderr.strip()

    fits = send(tiny_model)
    needed = _needed(fits)
    size = context_size_for(needed, 256, 32768)
    assert "context holds 256" in fits and "in the settings" not in fits
    assert f"raise the context size to {size:,} tokens" in fits
    assert f"--n-ctx {size}" in fits

    too_long = send(short_trained_model)
    assert "can read at most 1,024 tokens" in too_long
    assert "raise" not in too_long and "--n-ctx" not in too_long
