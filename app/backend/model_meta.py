"""Facts of a loaded llama.cpp model read from its GGUF metadata.

The binding has functions for some shapes (layers, heads, embedding size)
but not for the head size of models that set it apart, nor for anything
else in the metadata; these read it by key.
"""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp

# Bytes per element of each KV cache type (quantized blocks hold 32 values).
_KV_ELEMENT_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}


def model_meta(model: Any, key: str) -> str | None:
    """The metadata value of ``key`` as text, or None where the model has none."""
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace") if n >= 0 else None


def model_meta_int(model: Any, key: str) -> int | None:
    """The metadata value of ``key`` as a whole number, or None."""
    value = model_meta(model, key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def kv_bytes_per_token(model: Any, kv_cache_type: str) -> int:
    """The KV cache bytes one token takes in a loaded llama.cpp ``model``."""
    # K + V per token = n_layer x n_head_kv x (key_length + value_length) x
    # bytes/element (a checkpoint adds a few bytes of cell metadata per token
    # on top). Gemma-style models set the head size apart from
    # n_embd / n_head (Gemma 2 2B: 256, not 288); the binding has no
    # function for it, so it comes from the GGUF metadata. Per-layer
    # differences (head counts, key_length_swa, MLA) are not counted.
    if llama_cpp.llama_model_is_recurrent(model):
        return 0  # a fixed-size state, nothing per token
    n_head = max(1, llama_cpp.llama_model_n_head(model))
    head_dim = llama_cpp.llama_model_n_embd(model) // n_head
    arch = model_meta(model, "general.architecture")
    key_length = model_meta_int(model, f"{arch}.attention.key_length") or head_dim
    value_length = model_meta_int(model, f"{arch}.attention.value_length") or key_length
    n_head_kv = llama_cpp.llama_model_n_head_kv(model)
    elements = (
        llama_cpp.llama_model_n_layer(model) * n_head_kv * (key_length + value_length)
    )
    return int(elements * _KV_ELEMENT_BYTES[kv_cache_type])
