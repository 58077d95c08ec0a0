"""Restoring from checkpoints is exact: same logits, same tokens, no reprocessing.

One arm runs in this process (the context is never restored); the other runs
each step as a separate ``arbor`` process, so every step starts cold from SQLite.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage.db import open_database

GREEDY = SamplingParams(temperature=0, max_tokens=24)
SEEDED = SamplingParams(temperature=0.9, seed=7, max_tokens=24)


def _flags(params: SamplingParams) -> list[str]:
    flags = [
        "--temperature",
        str(params.temperature),
        "--max-tokens",
        str(params.max_tokens),
    ]
    return flags + (["--seed", str(params.seed)] if params.seed is not None else [])


@pytest.fixture
def in_process(tmp_path: Path, tiny_model: Path):
    db = open_database(tmp_path / "one-process.sqlite3")
    engine = LlamaEngine(tiny_model, BackendSettings())
    yield ConversationService(db, engine)
    engine.close()
    db.close()


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_resume_in_new_process_matches_one_process(in_process, arbor, params):
    _conv, root = in_process.new_conversation("Answer briefly.")
    first = in_process.send(root, "Tell me about trees.", params)
    second = in_process.send(first.assistant_node, "And about branches?", params)

    cold_root = arbor("new", "--system", "Answer briefly.")["node"]
    cold_first = arbor("send", cold_root, "Tell me about trees.", *_flags(params))
    cold_second = arbor(
        "send", cold_first["assistant_node"], "And about branches?", *_flags(params)
    )

    assert cold_first["text"] == first.text
    assert cold_second["stats"]["logits_digest"] == second.stats.logits_digest
    assert cold_second["text"] == second.text
    assert cold_second["stats"]["reprocessed_tokens"] == 0
    assert cold_second["stats"]["restored_tokens"] == first.stats.context_tokens
    assert cold_second["stats"]["fallbacks"] == []


def test_switching_siblings_back_and_forth_is_exact(in_process, arbor):
    _conv, root = in_process.new_conversation(None)
    first = in_process.send(root, "Pick a colour.", GREEDY)
    sibling = in_process.regenerate(first.assistant_node, SEEDED)
    assert sibling.text != first.text

    # In one process: alternate between the two branches several times.
    digests: dict[int, set[str]] = {
        first.assistant_node: set(),
        sibling.assistant_node: set(),
    }
    for _ in range(2):
        for node in (first.assistant_node, sibling.assistant_node):
            reply = in_process.send(node, "Why?", GREEDY)
            digests[node].add(reply.stats.logits_digest)
            # Only the divergent reply is applied; the shared prefix stays.
            assert reply.stats.reprocessed_tokens == 0
            assert reply.stats.kept_tokens > 0
    assert all(len(d) == 1 for d in digests.values())

    # Cold processes restoring each branch from SQLite give the same logits.
    cold_root = arbor("new")["node"]
    cold_first = arbor("send", cold_root, "Pick a colour.", *_flags(GREEDY))
    cold_sibling = arbor("regenerate", cold_first["assistant_node"], *_flags(SEEDED))
    assert cold_sibling["text"] == sibling.text
    for cold_node, node in (
        (cold_first["assistant_node"], first.assistant_node),
        (cold_sibling["assistant_node"], sibling.assistant_node),
    ):
        cold = arbor("send", cold_node, "Why?", *_flags(GREEDY))
        assert {cold["stats"]["logits_digest"]} == digests[node]
        assert cold["stats"]["reprocessed_tokens"] == 0


def test_switch_cost_is_the_divergent_suffix(in_process):
    _conv, root = in_process.new_conversation(None)
    first = in_process.send(root, "A long shared question " * 20, GREEDY)
    sibling = in_process.regenerate(first.assistant_node, SEEDED)
    user_end = in_process.path(first.user_node)[-1].end_pos

    stats = in_process.restore(first.assistant_node)
    assert stats.kept_tokens == user_end
    assert stats.reprocessed_tokens == 0
    assert stats.restored_tokens == len(
        in_process.path(first.assistant_node)[-1].tokens
    )
    stats = in_process.restore(sibling.assistant_node)
    assert stats.kept_tokens == user_end
    assert stats.restored_tokens == len(
        in_process.path(sibling.assistant_node)[-1].tokens
    )
