"""Continuing a full branch in a new conversation from the model's summary."""

from __future__ import annotations

import pytest

from app.backend.engine import LlamaEngine
from app.backend.errors import ContextFullError
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation import summary
from app.conversation.service import ConversationService
from storage import conversation_rows
from storage.db import open_database
from tests.helpers.replay import replayed_digest

GREEDY = SamplingParams(temperature=0, max_tokens=24)


@pytest.fixture
def service(tmp_path, tiny_model):
    db = open_database(tmp_path / "db.sqlite3")
    engine = LlamaEngine(tiny_model, BackendSettings(n_ctx=512, n_threads=1))
    yield ConversationService(db, engine)
    engine.close()
    db.close()


def test_a_new_conversation_starts_from_the_summary(service, tiny_model):
    _conv, root = service.new_conversation("Be kind.", "Trip")
    first = service.send(root, "Where should we go?", GREEDY)
    second = service.send(first.assistant_node, "And when?", GREEDY)

    conversation, new_root = service.continue_in_new_conversation(
        second.assistant_node, GREEDY
    )
    record = conversation_rows.get_conversation(service.db, conversation)
    assert record.title == "Trip (continued)"
    head, summary = record.system_prompt.split(
        "\n\nSummary of an earlier conversation:\n"
    )
    assert head == "Be kind." and summary.strip()
    # The new conversation goes on like any other...
    reply = service.send(new_root, "Go on.", GREEDY)
    assert reply.text
    # ...and the summary's scratch run left the old branch exact: its next
    # reply comes from checkpoints, with the logits a fresh decode gives.
    again = service.send(second.assistant_node, "Anything else?", GREEDY)
    assert again.stats.reprocessed_tokens == 0 and again.stats.restored_tokens > 0
    assert again.stats.logits_digest == replayed_digest(
        tiny_model, service.path(again.assistant_node)
    )


def test_a_message_longer_than_the_context_is_summarized_from_its_end(service):
    long_text = "early words " * 200 + "THE END"
    kept = summary._tail_that_fits(service.engine, long_text, budget=200)
    assert kept.endswith("THE END") and len(kept) < len(long_text)
    with pytest.raises(ContextFullError, match="too small"):
        summary._tail_that_fits(service.engine, long_text, budget=5)
