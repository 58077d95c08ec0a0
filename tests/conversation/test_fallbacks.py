"""A missing, corrupt or foreign checkpoint is detected, and the result is unchanged."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from storage import checkpoint_rows
from storage.db import open_database
from tests.conftest import run_cli
from tests.helpers.tiny_model import write_tiny_model

FLAGS = ("--temperature", "0", "--max-tokens", "16")


def _conversation(arbor, extra: tuple[str, ...] = ()) -> tuple[int, dict]:
    root = arbor("new", "--system", "Be exact.")["node"]
    first = arbor("send", root, "First question", *FLAGS, extra=extra)
    second = arbor(
        "send", first["assistant_node"], "Second question", *FLAGS, extra=extra
    )
    return first["assistant_node"], second


def _db(data_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(data_dir / "arbor.sqlite3")


def _reference(arbor, node: int) -> dict:
    return arbor("send", node, "Third question", *FLAGS)


@pytest.mark.parametrize("damage", ["deleted", "corrupted"])
def test_damaged_checkpoint_falls_back_to_identical_reprocessing(
    arbor, data_dir, damage
):
    _first, second = _conversation(arbor)
    node = second["assistant_node"]
    expected = _reference(arbor, node)
    assert expected["stats"]["reprocessed_tokens"] == 0

    with _db(data_dir) as con:
        (checkpoint_id,) = con.execute(
            "SELECT id FROM checkpoint WHERE node_id = ?", (second["user_node"],)
        ).fetchone()
        if damage == "deleted":
            con.execute("DELETE FROM checkpoint WHERE id = ?", (checkpoint_id,))
        else:
            (blob,) = con.execute(
                "SELECT data FROM checkpoint_blob WHERE checkpoint_id = ?",
                (checkpoint_id,),
            ).fetchone()
            flipped = bytearray(blob)
            for i in range(len(flipped) // 2, len(flipped) // 2 + 8):
                flipped[i] ^= 0xFF
            con.execute(
                "UPDATE checkpoint_blob SET data = ? WHERE checkpoint_id = ?",
                (bytes(flipped), checkpoint_id),
            )

    again = _reference(arbor, node)
    assert again["text"] == expected["text"]
    assert again["stats"]["logits_digest"] == expected["stats"]["logits_digest"]
    # Everything from the damaged node down is decoded again, and it says why.
    assert again["stats"]["reprocessed_tokens"] > 0
    reason = "missing" if damage == "deleted" else "corrupt"
    assert any(reason in f for f in again["stats"]["fallbacks"])
    # ...and the checkpoints are repaired for the next visit.
    third = _reference(arbor, node)
    assert third["stats"]["reprocessed_tokens"] == 0
    assert third["stats"]["logits_digest"] == expected["stats"]["logits_digest"]


def test_checkpoints_of_another_model_are_not_used(arbor, data_dir, other_tiny_model):
    """A different model (same vocab) never restores another's state."""
    _first, second = _conversation(arbor)
    node = second["assistant_node"]

    other = arbor("send", node, "Third question", *FLAGS, model=other_tiny_model)
    assert other["stats"]["restored_tokens"] == 0
    assert other["stats"]["reprocessed_tokens"] > 0


def test_checkpoints_restore_exactly_into_a_larger_context(
    arbor, data_dir, tmp_path, tiny_model
):
    """n_ctx is not part of the profile: deltas captured at 1024 restore bit-exactly
    at 2048 (the same logits as the same conversation made at 2048)."""
    _first, second = _conversation(arbor, extra=("--n-ctx", "1024"))
    node = second["assistant_node"]

    restored = arbor("send", node, "Third question", *FLAGS, extra=("--n-ctx", "2048"))
    assert restored["stats"]["reprocessed_tokens"] == 0
    assert restored["stats"]["fallbacks"] == []

    # The reference: the same conversation made from scratch at 2048, in a
    # data folder of its own.
    other = tmp_path / "other-data"
    other.mkdir()

    def at_2048(*args):
        base = ("--data-dir", other, "--model", tiny_model, "--n-ctx", "2048")
        return run_cli(*base, *map(str, args)).json

    root = at_2048("new", "--system", "Be exact.")["node"]
    first = at_2048("send", root, "First question", *FLAGS)
    made = at_2048("send", first["assistant_node"], "Second question", *FLAGS)
    assert made["text"] == second["text"]
    fresh = at_2048("send", made["assistant_node"], "Third question", *FLAGS)
    assert fresh["stats"]["logits_digest"] == restored["stats"]["logits_digest"]


def test_foreign_checkpoint_with_valid_checksum_is_rejected(tmp_path, tiny_model):
    """A blob from another architecture under this profile: llama.cpp refuses it."""
    three_layers = write_tiny_model(tmp_path / "three.gguf", n_layer=3)
    with LlamaEngine(three_layers, BackendSettings()) as foreign:
        tokens = foreign.tokenize("<|im_start|>user\nforeign<|im_end|>\n")
        foreign.decode(tokens)
        foreign_blob = foreign.capture(0, len(tokens))

    db = open_database(tmp_path / "db.sqlite3")
    with LlamaEngine(tiny_model, BackendSettings()) as engine:
        service = ConversationService(db, engine)
        _conv, root = service.new_conversation("x")
        service.restore(root)
        root_node = service.path(root)[0]
        checkpoint_rows.save_checkpoint(
            db,
            root,
            service.profile_id,
            "delta",
            root_node.start_pos,
            root_node.end_pos,
            foreign_blob,
        )
        # A new service holds nothing in memory, so it must restore from SQLite.
        stats = ConversationService(db, engine).restore(root)
    assert stats.restored_tokens == 0
    assert stats.reprocessed_tokens == len(root_node.tokens)
    assert stats.fallbacks == [f"node {root}: checkpoint rejected by llama.cpp"]
