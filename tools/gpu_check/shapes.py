"""Random-weight GGUF models of real models' shapes, written in seconds.

The tiny models of ``tests/helpers/tiny_model.py`` load in milliseconds but run
kernels no real model runs (64-wide rows, heads of 16). These have the
dimensions of real models (Llama 3.2 1B, Llama 3.1 8B, Gemma 2 2B) and the
tiny models' vocabulary, template and markup ids, padded with filler tokens
to the real vocabulary's size, so that the output layer and the logits are
as large as a user's. The weights are Q4_0 blocks of random bytes with a
fixed scale (no quantization step in Python): an 8B model is 4.3 GiB
written at disk speed, and its activations stay finite through every layer
(each scale makes a row's output about unit-sized).

The filler tokens' output rows are zero, as the tiny models zero their
markup: greedy replies are then plain byte-level text, like the tiny
models' own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from tests.helpers.tiny_model import CHATML_TEMPLATE, MARKUP_TOKENS, _vocab

# Q4_0: a float16 scale and 32 four-bit values (16 bytes) per block.
_BLOCK = 32
_BLOCK_BYTES = 18
# A uniform 4-bit value minus 8 has a standard deviation of about 4.6.
_Q4_STD = 4.6


@dataclass(frozen=True)
class Shape:
    """The dimensions of a model; ``window`` > 0 makes it a Gemma 2 (sliding
    window), 0 a Llama."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    window: int = 0
    context_length: int = 131072

    @property
    def arch(self) -> str:
        """The GGUF architecture these dimensions are written as."""
        return "gemma2" if self.window else "llama"

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of f16 K and V cells one token takes (all layers)."""
        return self.n_layer * self.n_head_kv * self.head_dim * 2 * 2


# Real models' dimensions (from their config.json files).
LLAMA_1B = Shape("llama-3.2-1b-shape", 16, 2048, 32, 8, 64, 8192, 128256)
LLAMA_8B = Shape("llama-3.1-8b-shape", 32, 4096, 32, 8, 128, 14336, 128256)
# Gemma 2 2B's dimensions with Gemma 3's 512-token window (Gemma 2's is
# 4,096): a conversation of a few thousand tokens then crosses many windows.
GEMMA2_2B = Shape("gemma-2-2b-shape", 26, 2304, 8, 4, 256, 9216, 256000, window=512)
# Small ones for the CPU and lavapipe runs of this check (same code, seconds).
SMALL_LLAMA = Shape("small-llama", 4, 256, 8, 2, 32, 512, 4096)
SMALL_GEMMA2 = Shape("small-gemma2", 4, 256, 4, 2, 64, 512, 4096, window=64)

SHAPES = {s.name: s for s in (LLAMA_1B, LLAMA_8B, GEMMA2_2B, SMALL_LLAMA, SMALL_GEMMA2)}


def _tokens(n_vocab: int) -> tuple[list[str], list[int], int]:
    """The tiny models' vocabulary padded to ``n_vocab``; the count of real ones."""
    tokens, types = _vocab()
    base = len(tokens)
    if n_vocab < base:
        raise ValueError(f"a vocabulary of {n_vocab} is smaller than the base {base}")
    # Unused entries, as real vocabularies reserve them: never produced by
    # tokenizing text, and given zero logits below.
    tokens += [f"<|filler_{i}|>" for i in range(n_vocab - base)]
    types += [int(gguf.TokenType.UNUSED)] * (n_vocab - base)
    return tokens, types, base


class _Q4Rows:
    """Random Q4_0 matrices whose rows have outputs of about ``gain`` when
    their inputs are about unit-sized."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def matrix(self, rows: int, cols: int, gain: float = 1.0) -> np.ndarray:
        """A (rows, cols) Q4_0 matrix as its bytes: (rows, cols / 32 * 18)."""
        blocks = cols // _BLOCK
        data = self._rng.integers(0, 256, (rows, blocks, _BLOCK_BYTES), np.uint8)
        scale = gain / (_Q4_STD * math.sqrt(cols))
        data[:, :, :2] = np.frombuffer(np.float16(scale).tobytes(), np.uint8)
        return data.reshape(rows, blocks * _BLOCK_BYTES)


def write_model(path: Path, shape: Shape, seed: int = 1) -> Path:
    """Write a random-weight model of ``shape`` to ``path`` and return it.

    Tensors are announced first and written one by one as they are made, so
    memory holds one tensor at a time, not the model.
    """
    if shape.n_embd % _BLOCK or shape.n_ff % _BLOCK or shape.head_dim % _BLOCK:
        raise ValueError(f"{shape.name}: Q4_0 rows must be multiples of {_BLOCK}")
    tokens, types, n_real = _tokens(shape.n_vocab)
    writer = _header(path, shape, tokens, types)
    plan = _tensors(shape)
    for name, rows, cols, _gain in plan:
        if not rows:  # a norm: float32 ones
            writer.add_tensor_info(name, (cols,), np.dtype(np.float32), 4 * cols)
            continue
        row_bytes = cols // _BLOCK * _BLOCK_BYTES
        writer.add_tensor_info(
            name,
            (rows, row_bytes),
            np.dtype(np.uint8),
            rows * row_bytes,
            raw_dtype=gguf.GGMLQuantizationType.Q4_0,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    weights = _Q4Rows(seed)
    # The matrix the logits come from: Gemma ties it to the token embeddings.
    logits_from = "token_embd.weight" if shape.window else "output.weight"
    for name, rows, cols, gain in plan:
        if not rows:
            writer.write_tensor_data(np.ones(cols, dtype=np.float32))
            continue
        data = weights.matrix(rows, cols, gain)
        if name == logits_from:
            _zero_markup_rows(data, n_real)
        writer.write_tensor_data(data)
    writer.close()
    return path


def _tensors(shape: Shape) -> list[tuple[str, int, int, float]]:
    """Every tensor in file order: name, rows (0 for a norm), columns and the
    size of its outputs (``_Q4Rows.matrix``'s gain)."""
    q_width = shape.head_dim * shape.n_head
    kv_width = shape.head_dim * shape.n_head_kv
    embd = shape.n_embd
    plan = [
        ("token_embd.weight", shape.n_vocab, embd, 1.0),
        ("output_norm.weight", 0, embd, 0.0),
    ]
    if not shape.window:
        plan.append(("output.weight", shape.n_vocab, embd, 2.0))
    for i in range(shape.n_layer):
        plan += [
            (f"blk.{i}.attn_norm.weight", 0, embd, 0.0),
            (f"blk.{i}.attn_q.weight", q_width, embd, 1.0),
            (f"blk.{i}.attn_k.weight", kv_width, embd, 1.0),
            (f"blk.{i}.attn_v.weight", kv_width, embd, 1.0),
            # Half-sized additions to the residual stream, which then grows
            # slowly over the layers instead of doubling.
            (f"blk.{i}.attn_output.weight", embd, q_width, 0.5),
            (f"blk.{i}.ffn_norm.weight", 0, embd, 0.0),
            (f"blk.{i}.ffn_gate.weight", shape.n_ff, embd, 1.0),
            (f"blk.{i}.ffn_up.weight", shape.n_ff, embd, 1.0),
            (f"blk.{i}.ffn_down.weight", embd, shape.n_ff, 0.5),
        ]
        if shape.window:
            plan += [
                (f"blk.{i}.post_attention_norm.weight", 0, embd, 0.0),
                (f"blk.{i}.post_ffw_norm.weight", 0, embd, 0.0),
            ]
    return plan


def _zero_markup_rows(data: np.ndarray, n_real: int) -> None:
    """Zero logits for markup and filler (their blocks' scales are 0), as the
    tiny models zero their markup: greedy replies are then text."""
    blocks = data.reshape(data.shape[0], -1, _BLOCK_BYTES)
    blocks[MARKUP_TOKENS, :, :2] = 0
    blocks[n_real:, :, :2] = 0


def _header(
    path: Path, shape: Shape, tokens: list[str], types: list[int]
) -> gguf.GGUFWriter:
    writer = gguf.GGUFWriter(str(path), shape.arch)
    writer.add_name(shape.name)
    writer.add_block_count(shape.n_layer)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    if shape.window:
        writer.add_key_length(shape.head_dim)
        writer.add_value_length(shape.head_dim)
        writer.add_layer_norm_rms_eps(1e-6)
        writer.add_sliding_window(shape.window)
    else:
        writer.add_rope_dimension_count(shape.head_dim)
        writer.add_rope_freq_base(500000.0)
        writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(tokens.index("</s>"))
    writer.add_eot_token_id(tokens.index("<|im_end|>"))
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(CHATML_TEMPLATE)
    return writer
