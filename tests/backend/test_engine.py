"""The llama.cpp engine on the tiny model: loading errors, deltas, position checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine, gpu_offload_supported
from app.backend.errors import ContextFullError, InvalidSetting, ModelFileError
from app.backend.settings import BackendSettings


@pytest.fixture
def engine(tiny_model: Path):
    with LlamaEngine(tiny_model, BackendSettings(n_ctx=512, n_batch=64)) as loaded:
        yield loaded


def test_model_facts(engine):
    info = engine.info
    assert info.name == "arbor-tiny-test"
    assert info.state_kind == "delta"
    assert info.chat_format == "gguf"
    # 2 layers x (K + V) x 2 KV heads x 16 dims x 2 bytes (f16)
    assert info.kv_bytes_per_token == 256
    assert info.gpu_offload_supported == gpu_offload_supported()


def test_delta_holds_only_its_span_and_restores_exactly(engine):
    prefix = engine.tokenize(
        "<|im_start|>system\nshared prefix<|im_end|>\n", add_bos=True
    )
    suffix = engine.tokenize("<|im_start|>user\nthe node's own words<|im_end|>\n")
    engine.decode(prefix)
    engine.decode(suffix)
    delta = engine.capture(len(prefix), len(prefix) + len(suffix))
    engine.decode(engine.tokenize("<|im_start|>assistant\n"))
    expected = engine.logits()
    # Per-token size, whatever the depth of the node.
    assert len(delta) < len(suffix) * engine.info.kv_bytes_per_token * 1.1 + 256

    engine.truncate(len(prefix))
    assert engine.restore(delta, len(prefix), len(prefix) + len(suffix))
    engine.decode(engine.tokenize("<|im_start|>assistant\n"))
    assert (engine.logits() == expected).all()


def test_restore_at_the_wrong_position_is_refused(engine):
    tokens = engine.tokenize("<|im_start|>user\nhello<|im_end|>\n", add_bos=True)
    engine.decode(tokens)
    delta = engine.capture(0, len(tokens))
    # Claiming other positions than the captured ones fails and changes nothing.
    assert not engine.restore(delta, len(tokens), 2 * len(tokens))
    assert engine.n_past == len(tokens)
    engine.truncate(0)
    assert not engine.restore(delta, 0, len(tokens) + 1)
    assert engine.n_past == 0
    assert not engine.restore(b"garbage" * 10, 0, len(tokens))
    assert engine.restore(delta, 0, len(tokens))


def test_context_overflow_is_a_clear_error(engine):
    with pytest.raises(ContextFullError, match="context holds 512"):
        engine.decode([5] * 600)
    assert engine.n_past == 0


def test_bad_files_are_rejected_before_llama_cpp(tmp_path: Path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        LlamaEngine(empty, BackendSettings())
    with pytest.raises(ModelFileError, match="does not exist"):
        LlamaEngine(tmp_path / "nope.gguf", BackendSettings())
    with pytest.raises(ModelFileError, match="not a file"):
        LlamaEngine(tmp_path, BackendSettings())


def test_settings_are_validated():
    with pytest.raises(InvalidSetting, match="KV cache type"):
        BackendSettings(kv_cache_type="f8")
    with pytest.raises(InvalidSetting, match="n_ctx"):
        BackendSettings(n_ctx=0)


def test_text_stream_waits_for_split_characters():
    from app.backend.text_stream import Utf8Stream

    stream = Utf8Stream()
    data = "é🌳".encode()
    pieces = [stream.push(data[i : i + 1]) for i in range(3)] + [stream.push(data[3:])]
    assert pieces == ["", "é", "", "🌳"]
    assert stream.push(b"\xff") == "\ufffd"
    stream.push(b"\xe2\x82")
    assert stream.flush() == "\ufffd"
