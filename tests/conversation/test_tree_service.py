"""The conversation tree through the real stack: branching, storage growth, deletion."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.errors import ContextFullError
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.batches import Batches
from app.conversation.errors import ServiceError
from app.conversation.service import ConversationService
from app.conversation.streams import Streams
from storage import checkpoint_rows, node_rows
from storage.db import open_database

GREEDY = SamplingParams(temperature=0, max_tokens=12)


@pytest.fixture
def service(tmp_path: Path, tiny_model: Path):
    db = open_database(tmp_path / "arbor.sqlite3")
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=4096)) as engine:
        yield ConversationService(db, engine)
    db.close()


def _ids(service: ConversationService, conversation: int) -> dict[int, int | None]:
    return {n.id: n.parent_id for n in service.tree(conversation)}


def test_edit_and_regenerate_add_siblings_and_erase_nothing(service):
    conv, root = service.new_conversation("Be kind.")
    first = service.send(root, "Hello", GREEDY)
    before = service.tree(conv)

    regenerated = service.regenerate(
        first.assistant_node, SamplingParams(seed=3, max_tokens=12)
    )
    edited = service.edit(first.user_node, "Hello again", GREEDY)

    after = {n.id: n for n in service.tree(conv)}
    assert all(n.id in after and after[n.id].text == n.text for n in before)
    assert after[regenerated.assistant_node].parent_id == first.user_node
    assert regenerated.user_node is None
    assert after[edited.user_node].parent_id == root
    assert after[edited.user_node].text == "Hello again"
    assert after[edited.assistant_node].parent_id == edited.user_node
    # Two replies under the first question, two questions under the root.
    children = [n.parent_id for n in after.values()]
    assert children.count(first.user_node) == 2
    assert children.count(root) == 2


def test_linear_checkpoint_bytes_grow_with_tokens_not_depth(service):
    conv, root = service.new_conversation("Count.")
    node = root
    for turn in range(8):
        node = service.send(
            node, f"Turn {turn}: " + "more words " * 10, GREEDY
        ).assistant_node
    nodes = service.tree(conv)
    tokens = sum(n.n_tokens for n in nodes)
    stored = sum(n.checkpoint_bytes for n in nodes)
    per_token = service.engine.info.kv_bytes_per_token
    # Every token's K and V once, plus small per-checkpoint headers and per-cell
    # metadata; one full snapshot per node would cost about depth x this.
    assert tokens * per_token <= stored <= tokens * per_token * 1.10 + 256 * len(nodes)
    full_snapshots = sum(service.path(n.id)[-1].end_pos * per_token for n in nodes)
    assert stored * 4 < full_snapshots
    # The deepest node's checkpoint covers only its own span.
    last = next(n for n in nodes if n.id == node)
    assert last.checkpoint_bytes <= last.n_tokens * per_token * 1.10 + 256


def test_stopped_reply_keeps_its_text_and_continues(service):
    _conv, root = service.new_conversation(None)
    seen: list[str] = []
    calls = {"n": 0}

    def stop_after_five() -> bool:
        calls["n"] += 1
        return calls["n"] > 5

    reply = service.send(
        root,
        "Talk",
        SamplingParams(temperature=0, max_tokens=100),
        Streams(on_token=seen.append, should_stop=stop_after_five),
    )
    assert reply.stats.stop_reason == "stopped"
    # Five sampled; fewer kept when the last ones were half a character
    # (random weights write any bytes): a reply never ends inside one.
    assert 1 <= reply.stats.generated_tokens <= 5
    node = service.path(reply.assistant_node)[-1]
    assert node.status == "stopped"
    assert node.text == reply.text == "".join(seen)
    follow = service.send(reply.assistant_node, "Go on", GREEDY)
    assert follow.stats.reprocessed_tokens == 0


def test_delete_branch_removes_subtree_and_its_checkpoints(service):
    conv, root = service.new_conversation(None)
    first = service.send(root, "One", GREEDY)
    second = service.send(first.assistant_node, "Two", GREEDY)
    kept = service.edit(first.user_node, "Uno", GREEDY)
    before = checkpoint_rows.total_checkpoint_bytes(service.db)

    parent = service.delete_branch(first.user_node).parent_id

    assert parent == root
    remaining = _ids(service, conv)
    assert first.user_node not in remaining and second.assistant_node not in remaining
    assert kept.assistant_node in remaining
    assert checkpoint_rows.total_checkpoint_bytes(service.db) < before
    # The surviving branch still continues without reprocessing.
    assert (
        service.send(kept.assistant_node, "Dos", GREEDY).stats.reprocessed_tokens == 0
    )


def test_wrong_requests_are_refused_clearly(service):
    _conv, root = service.new_conversation(None)
    first = service.send(root, "Hi", GREEDY)
    with pytest.raises(ServiceError, match="user message"):
        service.send(first.user_node, "again", GREEDY)
    with pytest.raises(ServiceError, match="not an assistant"):
        service.regenerate(first.user_node, GREEDY)
    with pytest.raises(ServiceError, match="empty"):
        service.send(root, "   ", GREEDY)


def test_too_long_prompt_is_refused_before_anything_is_stored(tmp_path, tiny_model):
    db = open_database(tmp_path / "small.sqlite3")
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=256)) as engine:
        service = ConversationService(db, engine)
        conv, root = service.new_conversation(None)
        with pytest.raises(ContextFullError, match="context"):
            service.send(root, "word " * 400, GREEDY)
        assert [n.role for n in service.tree(conv)] == ["root"]
        # A reply that reaches the end of the context stops and is kept.
        reply = service.send(
            root, "short", SamplingParams(temperature=0, max_tokens=1000)
        )
        assert reply.stats.stop_reason == "context_full"
        assert reply.stats.context_tokens <= 256
    db.close()


def test_first_message_names_an_unnamed_conversation(service):
    conv, root = service.new_conversation(None)
    service.send(
        root,
        "How do apple trees get pollinated when bees are scarce in spring?",
        GREEDY,
    )
    named, other_root = service.new_conversation(None, "My title")
    service.send(other_root, "Something else", GREEDY)
    titles = {c.id: c.title for c in service.list_conversations()}
    assert titles == {
        conv: "How do apple trees get pollinated when bees are…",
        named: "My title",
    }


def test_deleting_the_loaded_branch_keeps_the_prefix_in_memory(service):
    _conv, root = service.new_conversation(None)
    first = service.send(root, "One", GREEDY)
    second = service.send(first.assistant_node, "Two", GREEDY)
    service.delete_branch(second.user_node)
    again = service.send(first.assistant_node, "Two, again", GREEDY)
    assert again.stats.kept_tokens == service.path(first.assistant_node)[-1].end_pos
    assert again.stats.restored_tokens == again.stats.reprocessed_tokens == 0


def test_a_reply_cut_at_the_length_limit_goes_on_as_a_new_branch(service):
    _conversation, root = service.new_conversation(None)
    short = SamplingParams(temperature=0, max_tokens=4)
    cut = service.send(root, "hi", short)  # greedy "hi" talks far longer
    assert cut.stats.stop_reason == "max_tokens"
    old = node_rows.get_node(service.db, cut.assistant_node)
    streamed: list[str] = []

    longer = service.continue_reply(
        cut.assistant_node, short, Streams(on_token=streamed.append)
    )
    new = node_rows.get_node(service.db, longer.assistant_node)
    # A sibling: the cut reply stays as it was.
    assert new.parent_id == old.parent_id == cut.user_node
    assert node_rows.get_node(service.db, old.id).text == old.text
    # It starts with the cut reply, text and tokens, and goes on.
    assert new.text.startswith(old.text) and len(new.text) > len(old.text)
    assert streamed[0] == old.text and "".join(streamed) == new.text
    # Its span: the same opening (the first batch), the 4 tokens sampled, then
    # 4 more (and the turn's closing).
    kept = old.tokens[: Batches.of(old.chunks).first_own + 4]
    assert new.tokens[: len(kept)] == kept and len(new.tokens) > len(old.tokens)
    assert new.generation["generated_tokens"] == 8
    # It can go on again, and the conversation continues from it.
    again = service.continue_reply(new.id, short)
    assert node_rows.get_node(service.db, again.assistant_node).text.startswith(
        new.text
    )
    follow = service.send(again.assistant_node, "thanks", GREEDY)
    assert follow.text is not None
    # A reply that ended by itself does not go on.
    with pytest.raises(ServiceError, match="length limit"):
        service.continue_reply(cut.user_node, short)
