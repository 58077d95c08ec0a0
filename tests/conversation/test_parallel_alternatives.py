"""Alternatives generated together (``regenerate_parallel``), through the real stack.

N replies share one batched decode per step; each is then decoded again alone
for its checkpoint, so restoring it is exact and reprocesses nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import MAX_FORKS, SamplingParams
from app.conversation import folding
from app.conversation.errors import ServiceError
from app.conversation.service import ConversationService
from app.conversation.streams import AlternativeStreams
from storage import checkpoint_rows, conversation_rows, node_rows
from storage.db import open_database
from tests.helpers.replay import decode_recorded

SEEDED = SamplingParams(temperature=0.9, seed=11, max_tokens=16)
GREEDY = SamplingParams(temperature=0, max_tokens=16)
TAIL = "<|im_start|>user\nAnd then?<|im_end|>\n"


@pytest.fixture
def service(tmp_path: Path, tiny_model: Path):
    db = open_database(tmp_path / "alternatives.sqlite3")
    engine = LlamaEngine(tiny_model, BackendSettings(n_ctx=1024))
    yield ConversationService(db, engine)
    engine.close()
    db.close()


def _asked(service: ConversationService) -> tuple[int, int]:
    """A conversation with one exchange: (user node, assistant node)."""
    _conversation, root = service.new_conversation("Answer briefly.")
    first = service.send(root, "Tell me about trees.", GREEDY)
    assert first.user_node is not None
    return first.user_node, first.assistant_node


def _logits_after_reprocessing(tiny_model: Path, service, node_id: int, tail):
    """The next logits when ``node_id``'s path is decoded from scratch (its
    stored tokens, in its stored batch sizes) in a fresh engine."""
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=1024)) as fresh:
        decode_recorded(fresh, folding.effective(service.path(node_id)))
        fresh.decode(tail)
        return fresh.logits()


@pytest.mark.parametrize("params", [SEEDED, GREEDY], ids=["seeded", "greedy"])
def test_siblings_appear_each_checkpointed_and_different(service, params):
    user, assistant = _asked(service)
    streamed: dict[int, str] = {}

    def on_token(index: int, piece: str) -> None:
        streamed[index] = streamed.get(index, "") + piece

    replies = service.regenerate_parallel(
        assistant, params, 3, AlternativeStreams(on_token=on_token)
    )

    assert len(replies) == 3
    children = node_rows.get_children(service.db, user)
    ids = [r.assistant_node for r in replies]
    assert [c.id for c in children] == [assistant, *ids]
    assert len({r.text for r in replies}) == 3, "alternatives differ"
    assert {k: streamed[k] for k in range(3)} == {
        k: r.text for k, r in enumerate(replies)
    }
    stored = checkpoint_rows.checkpointed_nodes(service.db, ids, service.profile_id)
    assert set(stored) == set(ids)
    # The first, which the engine holds, is where the conversation continues.
    service.db.flush_deferred()
    conversation_id = node_rows.get_node(service.db, user).conversation_id
    conversation = conversation_rows.get_conversation(service.db, conversation_id)
    assert conversation.active_node_id == ids[0]
    for k, reply in enumerate(replies):
        node = node_rows.get_node(service.db, reply.assistant_node)
        assert node.status == "complete"
        assert node.generation is not None
        assert node.generation["alternative"] == {
            "index": k,
            "of": 3,
            **({"first_token_rank": k} if params.temperature == 0 and k else {}),
        }
        if params.seed is not None:
            assert node.generation["params"]["seed"] == params.seed + k
        # Its batch sizes are those of the re-decode its checkpoint came from.
        assert sum(node.chunks) == len(node.tokens)
        assert reply.stats.redecode_ms > 0


def test_each_alternative_restores_exactly_with_nothing_reprocessed(
    service, tiny_model
):
    _user, assistant = _asked(service)
    replies = service.regenerate_parallel(assistant, SEEDED, 3)
    tail = service.engine.tokenize(TAIL)
    # In reverse: the first is held after generating, the others are restored.
    for reply in reversed(replies):
        stats = service.restore(reply.assistant_node)
        assert stats.reprocessed_tokens == 0
        assert stats.fallbacks == []
        service.engine.decode(tail)
        restored = service.engine.logits()
        service.engine.truncate(service.engine.n_past - len(tail))
        expected = _logits_after_reprocessing(
            tiny_model, service, reply.assistant_node, tail
        )
        assert (restored == expected).all()


def test_a_reply_below_an_alternative_is_exact_in_a_new_process(service, arbor):
    # The same conversation through the CLI: --n 3, then a follow-up under the
    # second alternative, once restored in a cold process.
    root = arbor("new", "--system", "Answer briefly.")["node"]
    first = arbor(
        "send", root, "Tell me about trees.", "--temperature", "0", "--max-tokens", "16"
    )
    out = arbor(
        "regenerate",
        first["assistant_node"],
        "--n",
        "3",
        "--temperature",
        "0.9",
        "--seed",
        "11",
        "--max-tokens",
        "16",
    )
    assert len(out["replies"]) == 3
    assert len({r["text"] for r in out["replies"]}) == 3
    second = out["replies"][1]["assistant_node"]
    follow = arbor("send", second, "Why?", "--temperature", "0", "--max-tokens", "4")
    assert follow["stats"]["reprocessed_tokens"] == 0
    assert follow["stats"]["fallbacks"] == []

    # In this process the same steps give the same texts and logits.
    _user, assistant = _asked(service)
    replies = service.regenerate_parallel(assistant, SEEDED, 3)
    assert [r.text for r in replies] == [r["text"] for r in out["replies"]]
    again = service.send(
        replies[1].assistant_node, "Why?", SamplingParams(temperature=0, max_tokens=4)
    )
    assert again.stats.logits_digest == follow["stats"]["logits_digest"]
    assert again.text == follow["text"]


def test_single_regenerate_output_is_unchanged(arbor):
    root = arbor("new")["node"]
    first = arbor("send", root, "Hi", "--temperature", "0", "--max-tokens", "4")
    out = arbor("regenerate", first["assistant_node"], "--n", "1", "--max-tokens", "4")
    assert set(out) == {"user_node", "assistant_node", "text", "stats"}


def test_stop_ends_every_alternative_at_once(service, tiny_model):
    # After Stop nothing more is decoded: the first reply stays in the
    # context, the others are stored without a checkpoint and decoded, exactly,
    # when first visited.
    _user, assistant = _asked(service)
    calls = 0

    def should_stop() -> bool:
        nonlocal calls
        calls += 1
        return calls > 3

    replies = service.regenerate_parallel(
        assistant, SEEDED, 3, AlternativeStreams(should_stop=should_stop)
    )
    for reply in replies:
        assert reply.stats.stop_reason == "stopped"
        assert 1 <= reply.stats.generated_tokens <= 3
    assert [r.stats.redecode_ms > 0 for r in replies] == [True, False, False]
    tail = service.engine.tokenize(TAIL)
    for reply in reversed(replies):
        node = reply.assistant_node
        first_visit = service.restore(node)
        assert (first_visit.reprocessed_tokens > 0) == (reply is not replies[0])
        service.engine.decode(tail)
        restored = service.engine.logits()
        service.engine.truncate(service.engine.n_past - len(tail))
        expected = _logits_after_reprocessing(tiny_model, service, node, tail)
        assert (restored == expected).all()
    for reply in replies:  # checkpointed on the first visit
        assert service.restore(reply.assistant_node).reprocessed_tokens == 0


def test_alternatives_share_a_small_context(tmp_path, tiny_model):
    # Each alternative gets an equal share of the context left, and stops
    # there as "truncated", closed and checkpointed like any reply.
    db = open_database(tmp_path / "small.sqlite3")
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=256)) as engine:
        service = ConversationService(db, engine)
        _conversation, root = service.new_conversation(None)
        first = service.send(root, "Hi", SamplingParams(temperature=0, max_tokens=4))
        long = SamplingParams(temperature=0.9, seed=3, max_tokens=400)
        replies = service.regenerate_parallel(first.assistant_node, long, 4)
        ends = [node_rows.get_node(db, r.assistant_node).end_pos for r in replies]
        assert all(r.stats.stop_reason == "context_full" for r in replies)
        assert max(ends) <= engine.n_ctx
        for reply in replies:
            stats = service.restore(reply.assistant_node)
            assert stats.reprocessed_tokens == 0
    db.close()


def test_refuses_a_bad_count_or_node(service):
    _user, assistant = _asked(service)
    with pytest.raises(ServiceError):
        service.regenerate_parallel(assistant, SEEDED, MAX_FORKS + 1)
    root = service.path(assistant)[0].id
    with pytest.raises(ServiceError):
        service.regenerate_parallel(root, SEEDED, 2)
