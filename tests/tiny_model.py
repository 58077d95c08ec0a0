"""Generate tiny random-weight GGUF models for tests (they load in milliseconds).

Two layers, 64-dim, grouped-query attention, a byte-level SentencePiece vocab
plus ChatML markers, and a ChatML chat template (with a default system prompt,
like SmolLM2's) in the metadata. Fixed seeds: the files are the same every time.

``write_tiny_model`` makes a plain llama; ``write_tiny_swa_model`` a Gemma-2
style model with sliding-window attention, whose state cannot be split per
token.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}"
    "{{ '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD
N_FF = 128
N_LAYER = 2
CONTEXT_LENGTH = 32768
EOG_TOKENS = [2, 4]  # </s>, <|im_end|>


def _vocab() -> tuple[list[str], list[int]]:
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
    types = [gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * 4
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>")
        types.append(gguf.TokenType.BYTE)
    return tokens, [int(t) for t in types]


class _Weights:
    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def random(self, *shape: int, scale: float = 0.3) -> np.ndarray:
        return (self._rng.standard_normal(shape) * scale).astype(np.float32)

    @staticmethod
    def ones() -> np.ndarray:
        return np.ones(N_EMBD, dtype=np.float32)


def _start(path: Path, arch: str, name: str, n_layer: int) -> gguf.GGUFWriter:
    tokens, types = _vocab()
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_block_count(n_layer)
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_eot_token_id(4)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(CHATML_TEMPLATE)
    return writer


def _attention_and_ffn(writer: gguf.GGUFWriter, w: _Weights, i: int) -> None:
    n_embd_kv = HEAD_DIM * N_HEAD_KV
    writer.add_tensor(f"blk.{i}.attn_norm.weight", w.ones())
    writer.add_tensor(f"blk.{i}.attn_q.weight", w.random(N_EMBD, N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_k.weight", w.random(n_embd_kv, N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_v.weight", w.random(n_embd_kv, N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_output.weight", w.random(N_EMBD, N_EMBD))
    writer.add_tensor(f"blk.{i}.ffn_norm.weight", w.ones())
    writer.add_tensor(f"blk.{i}.ffn_gate.weight", w.random(N_FF, N_EMBD))
    writer.add_tensor(f"blk.{i}.ffn_up.weight", w.random(N_FF, N_EMBD))
    writer.add_tensor(f"blk.{i}.ffn_down.weight", w.random(N_EMBD, N_FF))


def _finish(writer: gguf.GGUFWriter, path: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_tiny_model(path: Path, seed: int = 1234, n_layer: int = N_LAYER) -> Path:
    """Write the tiny llama model to ``path`` and return it."""
    w = _Weights(seed)
    writer = _start(path, "llama", "arbor-tiny-test", n_layer)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tensor(
        "token_embd.weight", w.random(len(_vocab()[0]), N_EMBD, scale=1.0)
    )
    writer.add_tensor("output_norm.weight", w.ones())
    output = w.random(len(_vocab()[0]), N_EMBD)
    # Zero logits for </s> and <|im_end|>: random logits of the other tokens
    # always beat them under greedy decoding, so greedy replies run to
    # max_tokens (long generations on demand); sampling still ends turns.
    output[EOG_TOKENS] = 0.0
    writer.add_tensor("output.weight", output)
    for i in range(n_layer):
        _attention_and_ffn(writer, w, i)
    return _finish(writer, path)


def write_tiny_swa_model(path: Path, window: int = 32, seed: int = 4321) -> Path:
    """Write a tiny Gemma-2 model whose attention looks back ``window`` tokens."""
    w = _Weights(seed)
    writer = _start(path, "gemma2", "arbor-tiny-swa", N_LAYER)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_sliding_window(window)
    # Gemma ties the output to the token embeddings and scales inputs by
    # sqrt(n_embd); small embeddings keep random layers from merely echoing
    # the last token.
    writer.add_tensor(
        "token_embd.weight", w.random(len(_vocab()[0]), N_EMBD, scale=0.05)
    )
    writer.add_tensor("output_norm.weight", w.ones())
    for i in range(N_LAYER):
        _attention_and_ffn(writer, w, i)
        writer.add_tensor(f"blk.{i}.post_attention_norm.weight", w.ones())
        writer.add_tensor(f"blk.{i}.post_ffw_norm.weight", w.ones())
    return _finish(writer, path)
