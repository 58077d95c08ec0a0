"""The CLI loads a conversation's model with the context size raised for it
in the window, unless ``--n-ctx`` says otherwise."""

from __future__ import annotations

from pathlib import Path

from app.backend.settings import BackendSettings
from app.platform import paths
from storage import conversation_rows, node_rows
from storage.db import open_database


def _raise_for(data_dir: Path, node: int, size: int) -> None:
    db = open_database(paths.database_path(data_dir))
    try:
        conversation = node_rows.get_node(db, node).conversation_id
        conversation_rows.set_context_size(db, conversation, size)
    finally:
        db.close()


def test_a_conversation_s_own_context_size_applies(arbor, data_dir: Path) -> None:
    root = arbor("new")["node"]
    other = arbor("new")["node"]
    _raise_for(data_dir, root, 1536)

    first = arbor("send", root, "Hi", "--temperature", "0", "--max-tokens", "2")
    assert first["stats"]["n_ctx"] == 1536
    elsewhere = arbor("send", other, "Hi", "--temperature", "0", "--max-tokens", "2")
    assert elsewhere["stats"]["n_ctx"] == BackendSettings.n_ctx  # unchanged
    asked = arbor(
        "send",
        first["assistant_node"],
        "And?",
        "--temperature",
        "0",
        "--max-tokens",
        "2",
        extra=("--n-ctx", "2048"),
    )
    assert asked["stats"]["n_ctx"] == 2048
