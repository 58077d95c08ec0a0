"""Recurrent models, whose state cannot be split per token, get whole snapshots.

The tiny Mamba's state is a fixed-size summary that every token rewrites, so a
node's checkpoint is the whole state at its end; restoring one must still be
exact. (Sliding-window models keep per-node deltas: ``test_swa_deltas.py``.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from app.platform.paths import database_path
from storage import checkpoint_rows, conversation_rows, node_rows
from storage.db import open_database

GREEDY = SamplingParams(temperature=0, max_tokens=40)
SEEDED = SamplingParams(temperature=0.9, seed=1, max_tokens=40)
# One thread: the model gains nothing from more, and on a busy machine threads
# waiting for each other cost far more than they save.
SETTINGS = BackendSettings(n_ctx=512, n_threads=1)


@pytest.fixture
def db(data_dir: Path):
    # The database a CLI run on ``data_dir`` opens: a cold process picks up
    # the snapshots this one stored.
    opened = open_database(database_path(data_dir))
    yield opened
    opened.close()


@pytest.fixture
def recurrent_service(db, tiny_recurrent_model: Path):
    with LlamaEngine(tiny_recurrent_model, SETTINGS) as engine:
        yield ConversationService(db, engine)


def test_recurrent_model_is_detected(recurrent_service):
    info = recurrent_service.engine.info
    assert info.state_kind == "full"
    assert "recurrent" in info.state_note
    assert info.kv_bytes_per_token == 0  # a fixed-size state, no per-token cells


def test_recurrent_resume_and_switch_are_exact(
    recurrent_service, arbor, tiny_recurrent_model
):
    service = recurrent_service
    conv, root = service.new_conversation(None)
    first = service.send(root, "First message, a few dozen tokens long.", GREEDY)
    # Sent straight after its reply, nothing restored: what later visits,
    # here and in a cold process, must reproduce.
    expected = {
        first.assistant_node: service.send(first.assistant_node, "Next", GREEDY)
    }
    sibling = service.regenerate(first.assistant_node, SEEDED)
    assert sibling.text != first.text
    expected[sibling.assistant_node] = service.send(
        sibling.assistant_node, "Next", GREEDY
    )

    for node, continuous in [*expected.items(), *expected.items()]:
        again = service.send(node, "Next", GREEDY)
        assert again.stats.logits_digest == continuous.stats.logits_digest
        assert again.text == continuous.text
        # A snapshot cannot be cut back to the fork: the sibling's whole
        # state is restored instead, and nothing is decoded again.
        assert again.stats.reprocessed_tokens == 0
        assert again.stats.restored_tokens > 0
        assert again.stats.kept_tokens == 0

    flags = ("--n-ctx", str(SETTINGS.n_ctx), "--threads", str(SETTINGS.n_threads))

    def cli(*args: object) -> Any:
        return arbor(*args, model=tiny_recurrent_model, extra=flags)

    for node, continuous in expected.items():
        cold = cli("send", node, "Next", "--temperature", "0", "--max-tokens", "40")
        assert cold["stats"]["logits_digest"] == continuous.stats.logits_digest
        assert cold["stats"]["reprocessed_tokens"] == 0
        assert cold["stats"]["fallbacks"] == []

    stored = [
        checkpoint_rows.load_checkpoint(service.db, n.id, service.profile_id)
        for n in service.tree(conv)
    ]
    assert {c.kind if c else None for c in stored} == {"full"}
    # Each holds the whole state, whose size does not grow with the context.
    assert len({len(c.data) for c in stored if c}) == 1


def test_recurrent_alternatives_come_one_after_another_and_the_first_stays(
    recurrent_service,
):
    service = recurrent_service
    conv, root = service.new_conversation(None)
    first = service.send(root, "A question for several answers.", GREEDY)

    replies = service.regenerate_parallel(first.assistant_node, SEEDED, 2)

    ids = [r.assistant_node for r in replies]
    user = node_rows.get_node(service.db, first.assistant_node).parent_id
    assert user is not None
    children = node_rows.get_children(service.db, user)
    assert [c.id for c in children] == [first.assistant_node, *ids]
    # The first is where the conversation continues, though the last was
    # added (and made active) last.
    service.db.flush_deferred()
    assert conversation_rows.get_conversation(service.db, conv).active_node_id == ids[0]
