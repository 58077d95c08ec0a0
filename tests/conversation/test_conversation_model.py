"""Each conversation records the model it was made with.

Through the real backend, the real service and real SQLite files: a reply
records the loaded model (file and content identity) on its conversation;
another model loaded tells it (``other_model``, ``previous_model`` in the
CLI); two models of one vocabulary keep their checkpoints side by side, so
returning to the first restores with 0 reprocessed; a version-4 database
gains the columns, unknown (NULL) for its conversations.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage import conversation_rows
from storage.db import open_database
from storage.migrations import SCHEMA_VERSION

PARAMS = SamplingParams(temperature=0, max_tokens=6)
SETTINGS = BackendSettings(n_ctx=1024, n_threads=1)


def _service(db_path: Path, model: Path) -> ConversationService:
    return ConversationService(open_database(db_path), LlamaEngine(model, SETTINGS))


def _close(service: ConversationService) -> None:
    service.close()
    assert service.engine is not None
    service.engine.close()
    service.db.close()


def test_a_reply_records_the_model_and_another_model_is_told(
    tmp_path, tiny_model, other_tiny_model
):
    db = tmp_path / "arbor.sqlite3"
    first = _service(db, tiny_model)
    conversation, root = first.new_conversation()
    assert first.conversation_model(conversation) is None  # no reply yet
    reply = first.send(root, "Hello", PARAMS)
    path, identity = first.conversation_model(conversation) or ("", "")
    assert path == str(tiny_model)
    assert identity == first.engine.profile_details["model_identity"]
    assert first.other_model(conversation) is None
    _close(first)

    # The same file elsewhere is the same model: identity, not path.
    moved = tmp_path / "moved" / tiny_model.name
    moved.parent.mkdir()
    shutil.copy(tiny_model, moved)
    same = _service(db, moved)
    assert same.other_model(conversation) is None
    _close(same)

    second = _service(db, other_tiny_model)
    assert second.other_model(conversation) == str(tiny_model)
    second.send(reply.assistant_node, "And you?", PARAMS)
    assert second.other_model(conversation) is None
    assert second.conversation_model(conversation)[0] == str(other_tiny_model)
    _close(second)


def test_checkpoints_of_two_models_coexist(tmp_path, tiny_model, other_tiny_model):
    # Same vocabulary, other weights: the tokens stay, each model keeps its
    # own checkpoints of them, and going back costs no reprocessing.
    db = tmp_path / "arbor.sqlite3"
    first = _service(db, tiny_model)
    _conv, root = first.new_conversation("Be brief.")
    reply = first.send(root, "Hello", PARAMS)
    _close(first)

    other = _service(db, other_tiny_model)
    on_other = other.restore(reply.assistant_node)
    assert on_other.reprocessed_tokens > 0  # its first visit builds its own
    _close(other)

    back = _service(db, tiny_model)
    stats = back.restore(reply.assistant_node)
    assert stats.reprocessed_tokens == 0
    assert stats.restored_tokens == len(
        [t for n in back.path(reply.assistant_node) for t in n.tokens]
    )
    _close(back)


def test_the_cli_lists_the_model_and_says_when_it_changed(
    arbor, tiny_model, other_tiny_model
):
    root = arbor("new")["node"]
    reply = arbor("send", root, "Hello", "--max-tokens", "4")
    assert "previous_model" not in reply
    listed = arbor("list")["conversations"][0]
    assert listed["model"] == str(tiny_model)
    again = arbor(
        "send", reply["assistant_node"], "More", "--max-tokens", "4",
        model=other_tiny_model,
    )  # fmt: skip
    assert again["previous_model"] == str(tiny_model)
    assert arbor("list")["conversations"][0]["model"] == str(other_tiny_model)


def test_a_version_4_database_gains_the_model_columns(tmp_path):
    path = tmp_path / "old.sqlite3"
    db = open_database(path)
    conversation, _root = conversation_rows.create_conversation(db, "old", None)
    db.close()
    with sqlite3.connect(path) as con:
        con.execute("ALTER TABLE conversation DROP COLUMN model_path")
        con.execute("ALTER TABLE conversation DROP COLUMN model_identity")
        con.execute("PRAGMA user_version = 4")
    con.close()

    db = open_database(path)
    try:
        record = conversation_rows.get_conversation(db, conversation.id)
        assert (record.model_path, record.model_identity) == (None, None)
        conversation_rows.set_conversation_model(db, conversation.id, "/m.gguf", "abc")
        record = conversation_rows.get_conversation(db, conversation.id)
        assert (record.model_path, record.model_identity) == ("/m.gguf", "abc")
    finally:
        db.close()
    with sqlite3.connect(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()
