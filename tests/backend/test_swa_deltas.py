"""Sliding-window models keep per-node deltas, and restore and cut them exactly.

The tiny Gemma-2 model looks back 32 tokens; messages and replies here are
longer than that, so every checkpoint spans more than one window and every
branch switch restores cells the window layers had long moved past.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from app.platform.paths import database_path
from storage import checkpoint_rows
from storage.db import open_database
from tests.helpers.tiny_model import N_HEAD_KV, N_LAYER, SWA_HEAD_DIM

WINDOW = 32
GREEDY = SamplingParams(temperature=0, max_tokens=50)
SEEDED = SamplingParams(temperature=0.9, seed=5, max_tokens=50)
LONG = (
    "This message runs well past the model's window of thirty-two tokens, "
    "so its checkpoint holds more than one window of cells."
)
# Batches of 64 would make a window-sized cache hold 256 cells (2 sequences x
# 32 + 64, rounded up), fewer than the path below: cutting it far back then
# needs cells such a cache has reused. One thread: these models gain nothing
# from more, and on a busy machine threads waiting for each other cost far
# more than they save.
SETTINGS = BackendSettings(n_ctx=512, n_batch=64, n_threads=1)
# Spans of a path (in tokens, one batch each): most longer than the window.
SPANS = (40, 5, 60, 3, 50, 12, 64, 33, 45)
# Cuts inside spans, most of them more than a window into a long one. Each
# keeps at least two tokens of its span: a one-token batch takes another
# matmul path whose rounding differs, checkpoints or not.
CUTS = (20, 43, 90, 140, 200, 230, 260, 300)


def _digest(engine: LlamaEngine) -> str:
    return hashlib.sha256(engine.logits().tobytes()).hexdigest()


def _spans() -> tuple[list[list[int]], list[int]]:
    rng = np.random.default_rng(7)
    # Byte tokens only (ids 5..260): no control markers in the middle.
    spans = [rng.integers(5, 261, n).tolist() for n in SPANS]
    return spans, rng.integers(5, 261, 6).tolist()


def _decode_until(engine: LlamaEngine, spans: list[list[int]], cut: int) -> None:
    # One batch per span, as they were first decoded, the last one clipped.
    for span in spans:
        part = span[: cut - engine.n_past]
        if not part:
            break
        engine.decode(part, [len(part)])


@pytest.fixture
def engine(tiny_swa_model: Path):
    with LlamaEngine(tiny_swa_model, SETTINGS) as loaded:
        yield loaded


def test_sliding_window_model_keeps_deltas(engine):
    info = engine.info
    assert engine.n_swa == WINDOW
    assert info.state_kind == "delta"
    assert "sliding-window" in info.state_note and "deltas" in info.state_note
    # Gemma's head size comes from key_length/value_length (32 here), not from
    # n_embd / n_head (16): layers x KV heads x (K + V) x 2 bytes (f16).
    assert info.kv_bytes_per_token == N_LAYER * N_HEAD_KV * 2 * SWA_HEAD_DIM * 2


def test_cutting_inside_a_path_is_exact(engine, tiny_swa_model):
    spans, tail = _spans()
    deltas = []
    for span in spans:
        start = engine.n_past
        engine.decode(span, [len(span)])
        deltas.append((start, engine.n_past, engine.capture(start, engine.n_past)))
    end = engine.n_past

    def new_engine() -> LlamaEngine:
        return LlamaEngine(tiny_swa_model, SETTINGS)

    for cut in CUTS:
        with new_engine() as fresh:
            _decode_until(fresh, spans, cut)
            fresh.decode(tail, [len(tail)])
            expected = _digest(fresh)
        # A context that decoded the whole path, cut back.
        engine.truncate(cut)
        assert engine.n_past == cut
        engine.decode(tail, [len(tail)])
        assert _digest(engine) == expected
        # A cold context that restored every delta, cut back.
        with new_engine() as cold:
            for start, stop, data in deltas:
                assert cold.restore(data, start, stop)
            cold.truncate(cut)
            assert cold.n_past == cut
            cold.decode(tail, [len(tail)])
            assert _digest(cold) == expected
        # Back to the end of the path: cut at a span start, re-apply deltas.
        first = next(i for i, (start, stop, _) in enumerate(deltas) if stop > cut)
        engine.truncate(deltas[first][0])
        for start, stop, data in deltas[first:]:
            assert engine.restore(data, start, stop)
        assert engine.n_past == end


def test_a_cut_the_window_cannot_serve_starts_over(engine):
    spans, _tail = _spans()
    _decode_until(engine, spans, 100)
    # Make the cache lose positions 0-39, as a window-sized cache reuses its
    # oldest cells: a cut whose window reaches back there must not pretend.
    llama_cpp.llama_memory_seq_rm(engine._mem, 0, 0, 40)
    engine.truncate(80)  # sees positions 48-79: all there
    assert engine.n_past == 80
    engine.truncate(60)  # would see positions 28-59
    assert engine.n_past == 0


@pytest.fixture
def db(data_dir: Path):
    # The database a CLI run on ``data_dir`` opens: a cold process picks up
    # the checkpoints this one stored.
    opened = open_database(database_path(data_dir))
    yield opened
    opened.close()


def test_branches_restore_exactly_in_process_and_cold(db, arbor, tiny_swa_model):
    with LlamaEngine(tiny_swa_model, SETTINGS) as engine:
        service = ConversationService(db, engine)
        conv, root = service.new_conversation("Be brief.")
        # Each reply's "Next" is first sent straight after it (nothing is
        # restored): those digests are what every later visit must reproduce.
        first = service.send(root, LONG, GREEDY)
        expected = {
            first.assistant_node: service.send(first.assistant_node, "Next", GREEDY)
        }
        sibling = service.regenerate(first.assistant_node, SEEDED)
        expected[sibling.assistant_node] = service.send(
            sibling.assistant_node, "Next", GREEDY
        )
        edited = service.edit(first.user_node, LONG + " Edited.", GREEDY)
        expected[edited.assistant_node] = service.send(
            edited.assistant_node, "Next", GREEDY
        )
        assert sibling.text != first.text
        assert all(r.stats.restored_tokens == 0 for r in expected.values())
        assert len({r.stats.logits_digest for r in expected.values()}) == 3

        for node, continuous in [*expected.items(), *expected.items()]:
            again = service.send(node, "Next", GREEDY)
            assert again.stats.logits_digest == continuous.stats.logits_digest
            assert again.text == continuous.text
            assert again.stats.reprocessed_tokens == 0
        # Clicking a node restores its path; siblings keep their shared prefix
        # and restore only what differs.
        moved = service.restore(first.assistant_node)
        assert moved.restored_tokens > len(LONG) and moved.reprocessed_tokens == 0
        moved = service.restore(sibling.assistant_node)
        assert moved.kept_tokens > len(LONG) and moved.restored_tokens > 0
        assert moved.reprocessed_tokens == 0
        stored = [
            checkpoint_rows.load_checkpoint(db, n.id, service.profile_id)
            for n in service.tree(conv)
        ]
        assert {c.kind if c else None for c in stored} == {"delta"}
        kv_per_token = engine.info.kv_bytes_per_token

    flags = (
        *("--n-ctx", str(SETTINGS.n_ctx), "--batch-size", str(SETTINGS.n_batch)),
        *("--threads", str(SETTINGS.n_threads)),
    )

    def cli(*args: object) -> Any:
        return arbor(*args, model=tiny_swa_model, extra=flags)

    # A cold process restores what this one stored.
    for node, continuous in expected.items():
        cold = cli("send", node, "Next", "--temperature", "0", "--max-tokens", "50")
        assert cold["stats"]["logits_digest"] == continuous.stats.logits_digest
        assert cold["stats"]["reprocessed_tokens"] == 0
        assert cold["stats"]["fallbacks"] == []

    # Storage grows with the tokens of the tree: each token's K and V once,
    # plus a few bytes of cell metadata, not a whole context per node.
    nodes = cli("tree", conv)["nodes"]
    stored = sum(n["checkpoint_bytes"] for n in nodes)
    tokens = sum(n["tokens"] for n in nodes)
    assert kv_per_token <= stored / tokens <= kv_per_token * 1.10
