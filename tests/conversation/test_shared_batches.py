"""Spans that share a batch, and a role header kept from another conversation
(``app/conversation/batches.py``), on the real backend.

- A new message and its reply's opening are decoded in one batch, which both
  nodes record; a message under a start decodes its role header apart.
- A new conversation with a known system prompt keeps the header's cells of
  the last one: only the message's words and the opening are decoded, and
  the reply's logits are those of a fresh decode of what the nodes record.
- A span whose batch it shared is decoded again exactly: its new checkpoint
  is byte for byte the one it had, for the message (its batch made whole
  with filler) and for the reply (its batch begun with the message's end).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.batches import Batches
from app.conversation.service import ConversationService
from storage import node_rows
from tests.helpers.batch_replay import replay_check
from tests.helpers.real_service import opened_service
from tests.helpers.replay import replayed_digest

GREEDY = SamplingParams(temperature=0, max_tokens=6)
SYSTEM = "You answer in one short sentence, about trees and nothing else."
SETTINGS = BackendSettings(n_ctx=1024, n_threads=1)


@pytest.fixture(params=["tiny", "tiny-swa"])
def model(request, tiny_model: Path, tiny_swa_model: Path) -> Path:
    """A model with a plain cache and one with sliding-window layers."""
    return tiny_model if request.param == "tiny" else tiny_swa_model


@pytest.fixture
def service(tmp_path: Path, model: Path) -> Iterator[ConversationService]:
    """A service on a fresh database with the model loaded."""
    with opened_service(tmp_path / "a.sqlite3", model, SETTINGS) as opened:
        yield opened


def test_a_message_and_its_opening_share_a_batch(service, model):
    _conv, root = service.new_conversation(SYSTEM)
    first = service.send(root, "Which tree is the tallest?", GREEDY)
    second = service.send(first.assistant_node, "And the oldest?", GREEDY)
    for reply in (first, second):
        assert reply.user_node is not None
        user = node_rows.get_node(service.db, reply.user_node)
        answer = node_rows.get_node(service.db, reply.assistant_node)
        mine, theirs = Batches.of(user.chunks), Batches.of(answer.chunks)
        # The batch they shared, counted whole in both records.
        assert mine.tail > 0 and theirs.lead > 0
        assert mine.sizes[-1] == theirs.sizes[0] == theirs.lead + mine.tail
        assert mine.describe(len(user.tokens))
        assert theirs.describe(len(answer.tokens))
        assert answer.start_pos == user.end_pos
        path = service.path(reply.assistant_node)
        assert reply.stats.logits_digest == replayed_digest(model, path, SETTINGS)
    # Under the start, the role header is a batch of its own; under a reply not.
    under_start = Batches.of(node_rows.get_node(service.db, first.user_node).chunks)
    under_reply = Batches.of(node_rows.get_node(service.db, second.user_node).chunks)
    assert len(under_start.sizes) == 2 and len(under_reply.sizes) == 1


def test_a_new_conversation_keeps_the_header_of_the_last(service, model):
    _conv, root = service.new_conversation(SYSTEM)
    first = service.send(root, "Which tree is the tallest?", GREEDY)
    _other, other_root = service.new_conversation(SYSTEM)
    again = service.send(other_root, "Name a tree with red leaves.", GREEDY)
    assert again.user_node is not None
    user = node_rows.get_node(service.db, again.user_node)
    header = Batches.of(user.chunks).sizes[0]
    first_user = node_rows.get_node(service.db, first.user_node)
    assert list(user.tokens[:header]) == list(first_user.tokens[:header])
    # The start and the header kept; the words and the opening decoded.
    stats = again.stats
    assert stats.kept_tokens == user.start_pos + header
    assert stats.reprocessed_tokens == 0 and stats.restored_tokens == 0
    opening = Batches.of(
        node_rows.get_node(service.db, again.assistant_node).chunks
    ).first_own
    assert stats.prompt_tokens == len(user.tokens) - header + opening
    # Exact: what a fresh engine computes from the records.
    path = service.path(again.assistant_node)
    assert stats.logits_digest == replayed_digest(model, path, SETTINGS)
    # Another system prompt keeps nothing of it.
    _third, third_root = service.new_conversation("Answer about rivers instead.")
    third = service.send(third_root, "Which river is the longest?", GREEDY)
    assert third.stats.kept_tokens == 0


@pytest.mark.parametrize("lost", ["message", "reply"])
def test_a_span_that_shared_its_batch_is_decoded_again_exactly(tmp_path, model, lost):
    # Its checkpoint lost, and other checkpoints made on its cells: in a fresh
    # engine, it and the spans under it on the path are decoded again, in
    # their recorded batches, and their checkpoints made anew byte for byte.
    result = replay_check(model, tmp_path / "a.sqlite3", lost, SETTINGS)
    assert result["shared"]
    assert len(result["fallbacks"]) == 1 and "missing" in result["fallbacks"][0]
    assert result["reprocessed"] == result["below_tokens"]
    assert result["same_checkpoints"]
    assert result["record_kept"]  # replayed, not changed
