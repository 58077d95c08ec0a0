"""Generate tiny random-weight GGUF models for tests (they load in milliseconds).

Two layers, 64-dim, grouped-query attention, a byte-level SentencePiece vocab
plus ChatML markers, and a ChatML chat template (with a default system prompt,
like SmolLM2's) in the metadata. Fixed seeds: the files are the same every time.

``write_tiny_model`` makes a plain llama (optionally with more tokens, e.g.
another family's markers as control tokens); ``write_tiny_swa_model`` a
Gemma-2 style model with sliding-window attention (and, like Gemma, a head
size apart from n_embd / n_head); ``write_tiny_recurrent_model`` a Mamba,
whose state is not made of per-token cells at all.
"""

from __future__ import annotations

from collections.abc import Mapping
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
# Every token that is markup, not text: control tokens and the think markers.
MARKUP_TOKENS = [0, 1, 2, 3, 4, 5 + 256, 6 + 256]


# Reasoning markers, as user-defined tokens like Qwen3's (shown as text when
# decoded, parsed as one token when tokenized).
THINK_TOKENS = ["<think>", "</think>"]


# More tokens for a model: text -> type, appended after the base vocabulary so
# that every base id (MARKUP_TOKENS) stays what it is.
ExtraTokens = Mapping[str, gguf.TokenType]


# A vocabulary without ChatML's markers keeps their ids under other names.
PLAIN_MARKERS = ["<unused0>", "<unused1>"]


def _vocab(
    extra: ExtraTokens | None = None, chatml: bool = True
) -> tuple[list[str], list[int]]:
    markers = ["<|im_start|>", "<|im_end|>"] if chatml else PLAIN_MARKERS
    tokens = ["<unk>", "<s>", "</s>", *markers]
    types = [gguf.TokenType.UNKNOWN] + [gguf.TokenType.CONTROL] * 4
    for byte in range(256):
        tokens.append(f"<0x{byte:02X}>")
        types.append(gguf.TokenType.BYTE)
    tokens.extend(THINK_TOKENS)
    types.extend([gguf.TokenType.USER_DEFINED] * len(THINK_TOKENS))
    # SentencePiece writes spaces as "▁"; with it in the vocab, text
    # round-trips through tokens (a byte-fallback "▁" would decode as itself).
    tokens.append("\u2581")
    types.append(gguf.TokenType.NORMAL)
    for text, kind in (extra or {}).items():
        tokens.append(text)
        types.append(kind)
    return tokens, [int(t) for t in types]


class _Weights:
    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def random(self, *shape: int, scale: float = 0.3) -> np.ndarray:
        return (self._rng.standard_normal(shape) * scale).astype(np.float32)

    @staticmethod
    def ones() -> np.ndarray:
        return np.ones(N_EMBD, dtype=np.float32)


def _start(
    path: Path,
    arch: str,
    name: str,
    n_layer: int,
    chat_template: str | None = CHATML_TEMPLATE,
    extra: ExtraTokens | None = None,
    eos_token: str = "</s>",
    eot_token: str = "<|im_end|>",
    chatml: bool = True,
    context_length: int = CONTEXT_LENGTH,
) -> gguf.GGUFWriter:
    tokens, types = _vocab(extra, chatml)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_block_count(n_layer)
    writer.add_context_length(context_length)
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
    writer.add_eos_token_id(tokens.index(eos_token))
    writer.add_eot_token_id(tokens.index(eot_token))
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_space_prefix(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    return writer


def _attention_and_ffn(
    writer: gguf.GGUFWriter, w: _Weights, i: int, head_dim: int = HEAD_DIM
) -> None:
    n_embd_kv = head_dim * N_HEAD_KV
    writer.add_tensor(f"blk.{i}.attn_norm.weight", w.ones())
    writer.add_tensor(f"blk.{i}.attn_q.weight", w.random(head_dim * N_HEAD, N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_k.weight", w.random(n_embd_kv, N_EMBD))
    writer.add_tensor(f"blk.{i}.attn_v.weight", w.random(n_embd_kv, N_EMBD))
    writer.add_tensor(
        f"blk.{i}.attn_output.weight", w.random(N_EMBD, head_dim * N_HEAD)
    )
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


def write_tiny_model(
    path: Path,
    seed: int = 1234,
    n_layer: int = N_LAYER,
    chat_template: str | None = CHATML_TEMPLATE,
    extra_tokens: ExtraTokens | None = None,
    eos_token: str = "</s>",
    eot_token: str = "<|im_end|>",
    chatml: bool = True,
    context_length: int = CONTEXT_LENGTH,
) -> Path:
    """Write the tiny llama model to ``path`` and return it.

    ``chat_template`` replaces the ChatML template in the metadata (None: the
    model has no template at all). ``extra_tokens`` (text -> type) are added
    after the base vocabulary, and ``eos_token`` / ``eot_token`` name the EOS
    and end-of-turn tokens by their text (e.g. Phi-3's ``<|endoftext|>`` and
    ``<|end|>``); by default the vocabulary is the base one, unchanged.
    ``chatml=False`` names ChatML's two markers otherwise (``PLAIN_MARKERS``),
    so that ``<|im_start|>`` is plain text to this model (give an
    ``eot_token`` then, e.g. ``"</s>"``). ``context_length`` is the trained
    context the metadata claims.
    """
    w = _Weights(seed)
    writer = _start(
        path,
        "llama",
        "arbor-tiny-test",
        n_layer,
        chat_template,
        extra_tokens,
        eos_token,
        eot_token,
        chatml,
        context_length,
    )
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-5)
    tokens, types = _vocab(extra_tokens, chatml)
    writer.add_tensor("token_embd.weight", w.random(len(tokens), N_EMBD, scale=1.0))
    writer.add_tensor("output_norm.weight", w.ones())
    output = w.random(len(tokens), N_EMBD)
    # Zero logits for markup (</s>, <|im_end|>, <think>, ...): random logits of
    # the text tokens always beat them under greedy decoding, so greedy replies
    # are plain text that runs to max_tokens (long generations on demand);
    # sampling still ends turns. Added control tokens are markup too.
    control = int(gguf.TokenType.CONTROL)
    added = [i for i in range(len(_vocab()[0]), len(tokens)) if types[i] == control]
    output[MARKUP_TOKENS + added] = 0.0
    writer.add_tensor("output.weight", output)
    for i in range(n_layer):
        _attention_and_ffn(writer, w, i)
    return _finish(writer, path)


# Gemma's heads are wider than n_embd / n_head (Gemma 2 2B: 256, not 288): a
# KV size computed from n_embd alone would be wrong for it, and for this model.
SWA_HEAD_DIM = 2 * HEAD_DIM


def write_tiny_swa_model(path: Path, window: int = 32, seed: int = 4321) -> Path:
    """Write a tiny Gemma-2 model whose attention looks back ``window`` tokens."""
    w = _Weights(seed)
    writer = _start(path, "gemma2", "arbor-tiny-swa", N_LAYER)
    writer.add_key_length(SWA_HEAD_DIM)
    writer.add_value_length(SWA_HEAD_DIM)
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
        _attention_and_ffn(writer, w, i, head_dim=SWA_HEAD_DIM)
        writer.add_tensor(f"blk.{i}.post_attention_norm.weight", w.ones())
        writer.add_tensor(f"blk.{i}.post_ffw_norm.weight", w.ones())
    return _finish(writer, path)


def write_tiny_recurrent_model(path: Path, seed: int = 2468) -> Path:
    """Write a tiny Mamba (selective state space) model to ``path``.

    Its state is a fixed-size summary per layer (a convolution window and an
    SSM state), rewritten by every token: it cannot be cut at a position, so
    Arbor keeps whole snapshots for it. The attention head counts written by
    ``_start`` are ignored by this architecture.
    """
    d_inner = 2 * N_EMBD  # llama.cpp supports Mamba's expansion factor 2 only
    d_state, d_conv, dt_rank = 16, 4, 4
    n_vocab = len(_vocab()[0])
    w = _Weights(seed)
    writer = _start(path, "mamba", "arbor-tiny-mamba", N_LAYER)
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tensor("token_embd.weight", w.random(n_vocab, N_EMBD, scale=1.0))
    writer.add_tensor("output_norm.weight", w.ones())
    output = w.random(n_vocab, N_EMBD)
    output[MARKUP_TOKENS] = 0.0  # as in write_tiny_model: greedy replies run long
    writer.add_tensor("output.weight", output)
    # A = -exp(A_log) with Mamba's initialisation A_log = log(1..d_state): a
    # decaying, stable state (random A could grow without bound).
    ssm_a = -np.tile(np.arange(1, d_state + 1, dtype=np.float32), (d_inner, 1))
    for i in range(N_LAYER):
        # Shapes are numpy's (rows, columns): GGUF stores them reversed.
        writer.add_tensor(f"blk.{i}.attn_norm.weight", w.ones())
        writer.add_tensor(f"blk.{i}.ssm_in.weight", w.random(2 * d_inner, N_EMBD))
        writer.add_tensor(f"blk.{i}.ssm_conv1d.weight", w.random(d_inner, d_conv))
        writer.add_tensor(f"blk.{i}.ssm_conv1d.bias", w.random(d_inner, scale=0.1))
        writer.add_tensor(
            f"blk.{i}.ssm_x.weight", w.random(dt_rank + 2 * d_state, d_inner)
        )
        writer.add_tensor(f"blk.{i}.ssm_dt.weight", w.random(d_inner, dt_rank))
        writer.add_tensor(f"blk.{i}.ssm_dt.bias", w.random(d_inner, scale=0.1))
        writer.add_tensor(f"blk.{i}.ssm_a", ssm_a)
        writer.add_tensor(f"blk.{i}.ssm_d", np.ones(d_inner, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ssm_out.weight", w.random(N_EMBD, d_inner))
    return _finish(writer, path)
