"""A changed system prompt is a new branch from a new start, through the real
stack: the tiny model, the service and a real SQLite file.

The new root's branch is answered with the new prompt in the context (its
reply equals one in a conversation started with that prompt), the branch of
the old prompt stays and restores with nothing reprocessed, also after a
restart; a conversation keeps the sampling (and preset) it was given.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.errors import ServiceError
from app.conversation.presets import conversation_sampling
from app.conversation.service import ConversationService
from app.platform.paths import database_path
from storage import conversation_rows, node_rows
from storage.db import open_database

GREEDY = SamplingParams(temperature=0, max_tokens=10)
SETTINGS = BackendSettings(n_ctx=2048, n_threads=1)


def _service(path: Path, model: Path) -> ConversationService:
    return ConversationService(open_database(path), LlamaEngine(model, SETTINGS))


def _close(service: ConversationService) -> None:
    service.close()
    assert service.engine is not None
    service.engine.close()
    service.db.close()


def test_a_new_system_prompt_branches_from_a_new_start(tmp_path, tiny_model):
    db_path = tmp_path / "arbor.sqlite3"
    service = _service(db_path, tiny_model)
    try:
        conv, first_root = service.new_conversation("Be brief.")
        old = service.send(first_root, "Tell me about rivers.", GREEDY)
        before = {n.id: n for n in service.tree(conv)}

        second_root = service.new_system_prompt(conv, "  Answer like a pirate.  ")
        service.restore(second_root)
        new = service.send(second_root, "Tell me about rivers.", GREEDY)

        tree = {n.id: n for n in service.tree(conv)}
        # Nothing erased: every earlier node is there as it was.
        assert all(tree[i].text == n.text for i, n in before.items())
        assert [i for i, n in tree.items() if n.parent_id is None] == [
            first_root,
            second_root,
        ]
        assert tree[second_root].text == "Answer like a pirate."
        assert tree[new.user_node].parent_id == second_root
        record = conversation_rows.get_conversation(service.db, conv)
        assert record.system_prompt == "Answer like a pirate."

        # The new prompt is what the reply was written after: the same reply
        # as in a conversation started with it (greedy, same model).
        _c, fresh_root = service.new_conversation("Answer like a pirate.")
        fresh = service.send(fresh_root, "Tell me about rivers.", GREEDY)
        assert new.text == fresh.text
        path = node_rows.get_path(service.db, new.assistant_node)
        assert "Answer like a pirate." in (path[0].span_text or "")

        # The old prompt's branch restores from its checkpoints.
        assert service.restore(old.assistant_node).reprocessed_tokens == 0
    finally:
        _close(service)

    service = _service(db_path, tiny_model)
    try:  # after a restart, both starts resume without reprocessing
        assert service.restore(new.assistant_node).reprocessed_tokens == 0
        assert service.restore(old.assistant_node).reprocessed_tokens == 0
        later = service.send(new.assistant_node, "And lakes?", GREEDY)
        assert node_rows.get_path(service.db, later.assistant_node)[0].id == (
            second_root
        )
    finally:
        _close(service)


def test_a_conversation_keeps_the_sampling_and_preset_it_was_given(
    tmp_path, tiny_model
):
    service = _service(tmp_path / "arbor.sqlite3", tiny_model)
    defaults = SamplingParams()
    try:
        picked = SamplingParams(temperature=0.2, top_p=0.9, max_tokens=7)
        conv, root = service.new_conversation("Be exact.", None, picked, "Precise")
        stored = conversation_rows.get_conversation(service.db, conv).sampling
        assert conversation_sampling(stored, defaults) == (picked, "Precise")
        # The listing reads the same, through its own SQL.
        listed = next(c for c in conversation_rows.list_conversations(service.db))
        assert listed.sampling == stored

        own = SamplingParams(temperature=1.3, max_tokens=5)
        service.set_sampling(conv, own)
        stored = conversation_rows.get_conversation(service.db, conv).sampling
        assert conversation_sampling(stored, defaults) == (own, None)
        reply = service.send(root, "Hi", conversation_sampling(stored, defaults)[0])
        assert reply.stats.generated_tokens <= 5

        service.set_sampling(conv, None)
        assert conversation_rows.get_conversation(service.db, conv).sampling is None
    finally:
        _close(service)


def test_a_start_of_several_can_be_deleted_and_the_only_one_cannot(
    tmp_path, tiny_model
):
    service = _service(tmp_path / "arbor.sqlite3", tiny_model)
    try:
        conv, first_root = service.new_conversation("Be brief.")
        kept = service.send(first_root, "Hello", GREEDY)
        second_root = service.new_system_prompt(conv, "Be verbose.")
        gone = service.send(second_root, "Hello", GREEDY)

        assert service.delete_branch(second_root).parent_id == first_root
        ids = {n.id for n in service.tree(conv)}
        assert second_root not in ids and gone.assistant_node not in ids
        assert kept.assistant_node in ids
        record = conversation_rows.get_conversation(service.db, conv)
        # Where the user was is gone: they are at the start that is left, whose
        # prompt is the conversation's again.
        assert record.active_node_id == first_root
        assert record.system_prompt == "Be brief."
        assert service.restore(kept.assistant_node).reprocessed_tokens == 0

        with pytest.raises(ServiceError, match="cannot be deleted"):
            service.delete_branch(first_root)
    finally:
        _close(service)


def test_the_cli_starts_a_new_system_prompt(arbor):
    root = arbor("new", "--system", "Be brief.")["node"]
    first = arbor("send", root, "Hello", "--max-tokens", "4")
    second = arbor("system", 1, "Be verbose.")
    assert second["conversation"] == 1 and second["node"] != root
    reply = arbor("send", second["node"], "Hello", "--max-tokens", "4")
    tree = {n["id"]: n for n in arbor("tree", 1)["nodes"]}
    starts = [n for n in tree.values() if n["parent"] is None]
    assert [n["text"] for n in starts] == ["Be brief.", "Be verbose."]
    assert tree[reply["user_node"]]["parent"] == second["node"]
    assert first["assistant_node"] in tree


def test_the_cli_replies_with_the_conversations_sampling_unless_told(arbor, data_dir):
    root = arbor("new")["node"]
    db = open_database(database_path(data_dir))
    try:
        conversation_rows.set_conversation_sampling(
            db,
            1,
            {**SamplingParams(temperature=0, max_tokens=3).as_dict(), "preset": "x"},
        )
    finally:
        db.close()
    plain = arbor("send", root, "Hello")
    told = arbor("send", root, "Hello", "--max-tokens", "5", "--seed", "9")
    db = open_database(database_path(data_dir))
    try:
        first = node_rows.get_node(db, plain["assistant_node"]).generation
        second = node_rows.get_node(db, told["assistant_node"]).generation
    finally:
        db.close()
    assert first is not None and second is not None
    assert (first["params"]["max_tokens"], first["params"]["temperature"]) == (3, 0)
    # A flag wins over the conversation's field; the rest stays the conversation's.
    assert second["params"]["max_tokens"] == 5 and second["params"]["seed"] == 9
    assert second["params"]["temperature"] == 0
