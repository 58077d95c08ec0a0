"""Models whose state cannot be split per token get whole-state snapshots, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.sampling import SamplingParams
from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from storage.db import open_database
from tests.conftest import run_cli

GREEDY = SamplingParams(temperature=0, max_tokens=40)
FLAGS = ("--temperature", "0", "--max-tokens", "40")


@pytest.fixture
def swa_service(tmp_path: Path, tiny_swa_model: Path):
    db = open_database(tmp_path / "one.sqlite3")
    with LlamaEngine(tiny_swa_model, BackendSettings()) as engine:
        yield ConversationService(db, engine)
    db.close()


def test_sliding_window_model_is_detected(swa_service):
    assert swa_service.engine.info.state_kind == "full"
    assert "sliding-window" in swa_service.engine.info.state_note


def test_sliding_window_resume_and_switch_are_exact(
    swa_service, data_dir, tiny_swa_model
):
    # Long enough that the 32-token window has slid past the early messages.
    _conv, root = swa_service.new_conversation(None)
    first = swa_service.send(root, "First message, long enough to slide.", GREEDY)
    sibling = swa_service.regenerate(
        first.assistant_node, SamplingParams(seed=1, max_tokens=40)
    )
    after_first = swa_service.send(first.assistant_node, "Next", GREEDY)
    after_sibling = swa_service.send(sibling.assistant_node, "Next", GREEDY)
    assert after_first.stats.logits_digest != after_sibling.stats.logits_digest
    for reply in (after_first, after_sibling):
        assert reply.stats.reprocessed_tokens == 0

    def arbor(*args):
        return run_cli(
            "--data-dir", data_dir, "--model", tiny_swa_model, *map(str, args)
        ).json

    cold_root = arbor("new")["node"]
    cold_first = arbor(
        "send", cold_root, "First message, long enough to slide.", *FLAGS
    )
    cold_sibling = arbor(
        "regenerate", cold_first["assistant_node"], "--seed", "1", "--max-tokens", "40"
    )
    assert cold_sibling["text"] == sibling.text
    cold_next = arbor("send", cold_first["assistant_node"], "Next", *FLAGS)
    assert cold_next["stats"]["logits_digest"] == after_first.stats.logits_digest
    assert cold_next["stats"]["reprocessed_tokens"] == 0
    tree = arbor("tree", 1)["nodes"]
    # A snapshot holds the whole state, so a deep node's costs more than its span.
    deepest = max(tree, key=lambda n: n["id"])
    assert deepest["checkpoint_bytes"] > 0
