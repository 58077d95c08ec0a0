"""The vocabulary identity: hashed once per model, remembered in the database.

Every node stores the ``vocab_id`` its tokens were made under; a later start
with the same model file must give the same identity without hashing the
vocabulary again, and another model must not inherit it.
"""

from __future__ import annotations

from pathlib import Path

import llama_cpp
import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from storage.db import open_database

SETTINGS = BackendSettings(n_ctx=256)


@pytest.fixture
def counted_vocab_reads(monkeypatch):
    calls = {"n": 0}
    original = llama_cpp.llama_vocab_get_text

    def counting(*args):
        calls["n"] += 1
        return original(*args)

    monkeypatch.setattr(llama_cpp, "llama_vocab_get_text", counting)
    return calls


def test_a_second_start_adopts_the_remembered_identity(
    tmp_path: Path, tiny_model: Path, counted_vocab_reads
):
    db = open_database(tmp_path / "arbor.sqlite3")
    first = LlamaEngine(tiny_model, SETTINGS)
    try:
        ConversationService(db, first)
        hashed = first.vocab_id
        assert counted_vocab_reads["n"] == first.n_vocab  # hashed once, here
    finally:
        first.close()

    counted_vocab_reads["n"] = 0
    second = LlamaEngine(tiny_model, SETTINGS)
    try:
        ConversationService(db, second)
        assert second.vocab_id == hashed
        assert counted_vocab_reads["n"] == 0
        # And it is what hashing would give.
        del second.__dict__["vocab_id"]
        assert second.vocab_id == hashed
    finally:
        second.close()
        db.close()


def test_another_model_file_gets_its_own_key(tiny_model: Path, other_tiny_model: Path):
    engines = [LlamaEngine(path, SETTINGS) for path in (tiny_model, other_tiny_model)]
    try:
        # Same vocabulary and template, other weights: the key differs (it
        # names the file's bytes), so nothing is adopted across models.
        assert engines[0].vocab_key != engines[1].vocab_key
        assert engines[0].vocab_id == engines[1].vocab_id
    finally:
        for engine in engines:
            engine.close()
