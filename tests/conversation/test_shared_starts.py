"""A new conversation whose system prompt was decoded before, in any
conversation, starts from that start's cells (kept in the context) or its
checkpoint, shared rather than copied, instead of decoding the prompt again
(the real tiny model, a real SQLite file, a restart between)."""

from __future__ import annotations

from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.batches import Batches
from app.conversation.checkpoint_writer import CheckpointWriter
from app.conversation.service import ConversationService
from storage import checkpoint_rows, node_rows
from storage.db import open_database

GREEDY = SamplingParams(temperature=0, max_tokens=8)
SYSTEM = "You answer in one short sentence, and you never use lists."


def _service(path: Path, model: Path) -> ConversationService:
    db = open_database(path)
    engine = LlamaEngine(model, BackendSettings(n_ctx=1024, n_threads=1))
    return ConversationService(db, engine, CheckpointWriter(db))


def _close(service: ConversationService) -> None:
    service.close()
    assert service.engine is not None
    service.engine.close()
    service.db.close()


def test_a_known_system_prompt_is_restored_not_decoded(
    tmp_path: Path, tiny_model: Path
) -> None:
    path = tmp_path / "arbor.sqlite3"
    service = _service(path, tiny_model)
    _first, root = service.new_conversation(SYSTEM)
    root_tokens = len(node_rows.get_node(service.db, root).tokens)
    decoded = service.send(root, "Hello", GREEDY)
    assert decoded.stats.reprocessed_tokens == root_tokens  # decoded once

    _second, twin = service.new_conversation(SYSTEM)
    again = service.send(twin, "Hello", GREEDY)
    assert again.stats.reprocessed_tokens == 0
    # The context held the same start's cells: kept, not even restored, and
    # the role header of the message after it (app/conversation/batches.py).
    assert again.user_node is not None
    header = Batches.of(node_rows.get_node(service.db, again.user_node).chunks)
    assert again.stats.kept_tokens == root_tokens + header.sizes[0]
    # The same context as decoding it: the same logits after the same message.
    assert again.stats.logits_digest == decoded.stats.logits_digest
    _close(service)

    # Another process, another conversation: still restored.
    service = _service(path, tiny_model)
    _third, other = service.new_conversation(SYSTEM)
    later = service.send(other, "Hello", GREEDY)
    assert later.stats.reprocessed_tokens == 0
    assert later.stats.restored_tokens == root_tokens
    assert later.stats.logits_digest == decoded.stats.logits_digest
    # A different prompt has no twin: decoded.
    _fourth, different = service.new_conversation(SYSTEM + " Be kind.")
    assert service.send(different, "Hello", GREEDY).stats.reprocessed_tokens > 0
    service.flush_checkpoints()
    # One checkpoint serves the three starts of SYSTEM: none was copied.
    checkpointed = checkpoint_rows.checkpointed_nodes(
        service.db, [root, twin, other], service.profile_id
    )
    assert set(checkpointed) == {root}
    _close(service)


def test_a_start_whose_twin_is_gone_is_decoded_and_kept(
    tmp_path: Path, tiny_model: Path
) -> None:
    path = tmp_path / "arbor.sqlite3"
    service = _service(path, tiny_model)
    first, root = service.new_conversation(SYSTEM)
    service.send(root, "Hello", GREEDY)
    _second, twin = service.new_conversation(SYSTEM)
    reply = service.send(twin, "Hello", GREEDY)
    service.delete_conversation(first)
    _close(service)

    service = _service(path, tiny_model)
    root_tokens = len(node_rows.get_node(service.db, twin).tokens)
    again = service.restore(reply.assistant_node)
    assert again.reprocessed_tokens >= root_tokens  # the start is decoded...
    service.flush_checkpoints()
    assert twin in checkpoint_rows.checkpointed_nodes(
        service.db, [twin], service.profile_id
    )
    _close(service)


def test_a_damaged_twin_is_not_copied(tmp_path: Path, tiny_model: Path) -> None:
    path = tmp_path / "arbor.sqlite3"
    service = _service(path, tiny_model)
    _first, root = service.new_conversation(SYSTEM)
    service.send(root, "Hello", GREEDY)
    service.flush_checkpoints()
    with service.db.write() as session:  # flip the blob's first byte
        session.connection().exec_driver_sql(
            "UPDATE checkpoint_blob SET data = CAST(X'00' || substr(data, 2) AS BLOB) "
            "WHERE checkpoint_id = (SELECT id FROM checkpoint WHERE node_id = ?)",
            (root,),
        )
    _close(service)
    service = _service(path, tiny_model)  # nothing in the context to keep
    _second, twin = service.new_conversation(SYSTEM)
    reply = service.send(twin, "Hello", GREEDY)
    root_tokens = len(node_rows.get_node(service.db, twin).tokens)
    assert reply.stats.reprocessed_tokens == root_tokens
    _close(service)
