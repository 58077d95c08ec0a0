"""Tiny random-weight models that tokenize exactly like real ones.

llama.cpp's sdist carries the vocabularies of real model families as
vocab-only GGUFs (``vendor/llama.cpp/models/ggml-vocab-NAME.gguf``: Phi-3,
Llama 2's SentencePiece, Llama 3's BPE, Command-R, Qwen2, Gemma 4, ...), each
with llama.cpp's own tokenizer test cases beside it (``.gguf.inp``: texts,
``.gguf.out``: the ids they must become). A vocab-only file has no tensors,
so llama.cpp cannot run it; ``write_real_vocab_model`` copies its tokenizer
metadata (tokens, scores, types, merges, pre-tokenizer, special token ids,
BOS/EOS rules: every ``tokenizer.*`` key but the chat templates) into a tiny
random-weight llama model with a chosen chat template, which llama.cpp runs
and tokenizes as it would the real model. Any GGUF can be the source, the
253 MB Gemma 3 270M included: only its metadata is read.

Sizes: the vocabulary-sized embedding matrix is the file. It is 32 wide,
stored in f16, and doubles as the output matrix (llama.cpp ties them when
``output.weight`` is absent): Gemma 4's 262,144 tokens and 514,906 merges
make a 33 MB file, Phi-3's 32,064 tokens a 3 MB one; each loads in about a
second or less.

The metadata is read by ``read_tokenizer``, a small reader of the GGUF
header: gguf's ``GGUFReader`` makes a numpy view per string, which takes
about ten seconds for a 256k-token vocabulary with its merges.
"""

from __future__ import annotations

import hashlib
import struct
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import gguf
import llama_cpp
import numpy as np

from tests.helpers import template_corpus
from tests.helpers.cache_files import write_atomically

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine

_VOCAB_DIR = "vendor/llama.cpp/models/"
_TEST_SEPARATOR = "\n__ggml_vocab_test__\n"

N_EMBD = 32
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 64
N_LAYER = 2
CONTEXT_LENGTH = 8192
# Part of a cached model's name: changing what write_real_vocab_model writes
# changes it, so no stale file is reused.
_LAYOUT = f"llama-{N_EMBD}-{N_HEAD}-{N_HEAD_KV}-{N_FF}-{N_LAYER}-f16-tied-named"

# Keys not copied: the source's own chat templates (the model gets the chosen
# one instead).
_SKIPPED = ("tokenizer.chat_template",)
# Keys outside tokenizer.* that llama.cpp's tokenizer reads (see read_tokenizer).
_COPIED = ("general.name",)

Value = tuple[gguf.GGUFValueType, gguf.GGUFValueType | None, Any]


@dataclass(frozen=True)
class TokenizerCase:
    """One of llama.cpp's tokenizer tests: ``text`` must become ``tokens``.

    llama.cpp tokenizes it without BOS/EOS and with special tokens as plain
    text (``test-tokenizer-0.cpp``: ``add_special`` and ``parse_special``
    false).
    """

    text: str
    tokens: list[int]


# --- reading the sdist ---------------------------------------------------------


def extract_vocabs(folder: Path) -> Path:
    """Extract every ``ggml-vocab-*`` file of the sdist into ``folder``; return it.

    Files already there are kept (each lands by an atomic rename, so one that
    exists is whole): the tarball is read once per folder.
    """
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / ".extracted"
    if stamp.is_file():
        return folder
    with tarfile.open(template_corpus.sdist_path()) as tar:
        for member in tar:
            # Members sit under a versioned top folder; match on what follows it.
            inner = member.name.split("/", 1)[-1]
            name = inner.removeprefix(_VOCAB_DIR)
            if member.isfile() and name.startswith("ggml-vocab-") and "/" not in name:
                handle = tar.extractfile(member)
                assert handle is not None
                _write_bytes(folder / name, handle.read())
    stamp.write_text("")
    return folder


def _write_bytes(target: Path, data: bytes) -> None:
    write_atomically(target, lambda partial: partial.write_bytes(data))


def vocab_file(folder: Path, name: str) -> Path:
    """The vocab-only GGUF ``ggml-vocab-NAME.gguf`` in ``extract_vocabs``'s folder."""
    path = folder / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        raise FileNotFoundError(f"no vocabulary {name!r} in the sdist ({path})")
    return path


def tokenizer_cases(folder: Path, name: str) -> list[TokenizerCase]:
    """llama.cpp's tokenizer test cases for vocabulary ``name``, in file order.

    Parsed as ``test-tokenizer-0.cpp`` does: texts split on the separator
    line, one line of space-separated ids per text.
    """
    base = vocab_file(folder, name)
    raw = base.with_name(base.name + ".inp").read_text(encoding="utf-8")
    texts = raw.split(_TEST_SEPARATOR)
    if texts and texts[-1] == "":
        texts.pop()  # the file ends with a separator, which starts no text
    lines = base.with_name(base.name + ".out").read_text(encoding="utf-8")
    outputs = lines.split("\n")
    if outputs and outputs[-1] == "":
        outputs.pop()  # the file's final newline
    if len(texts) != len(outputs):
        raise AssertionError(f"{name}: {len(texts)} inputs, {len(outputs)} outputs")
    return [
        TokenizerCase(text, [int(t) for t in line.split()])
        for text, line in zip(texts, outputs, strict=True)
    ]


# --- reading a GGUF's tokenizer metadata ------------------------------------------

_SCALARS = {
    gguf.GGUFValueType.UINT8: "<B",
    gguf.GGUFValueType.INT8: "<b",
    gguf.GGUFValueType.UINT16: "<H",
    gguf.GGUFValueType.INT16: "<h",
    gguf.GGUFValueType.UINT32: "<I",
    gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.FLOAT32: "<f",
    gguf.GGUFValueType.BOOL: "<?",
    gguf.GGUFValueType.UINT64: "<Q",
    gguf.GGUFValueType.INT64: "<q",
    gguf.GGUFValueType.FLOAT64: "<d",
}


class _Cursor:
    """Little-endian reads from a file, in order."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle

    def take(self, fmt: str) -> Any:
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self._handle.read(size))[0]

    def string(self) -> bytes:
        return self._handle.read(self.take("<Q"))

    def value(self, kind: gguf.GGUFValueType) -> tuple[gguf.GGUFValueType | None, Any]:
        """Read one value of ``kind``; return its array item type (or None) and it."""
        if kind in _SCALARS:
            return None, self.take(_SCALARS[kind])
        if kind == gguf.GGUFValueType.STRING:
            return None, self.string()
        if kind != gguf.GGUFValueType.ARRAY:
            raise ValueError(f"unknown GGUF value type {kind}")
        item = gguf.GGUFValueType(self.take("<I"))
        count = self.take("<Q")
        if item in _SCALARS:
            dtype = np.dtype(_SCALARS[item])
            data = np.frombuffer(self._handle.read(count * dtype.itemsize), dtype)
            return item, data.tolist()
        return item, [self.value(item)[1] for _ in range(count)]


def read_tokenizer(path: Path) -> dict[str, Value]:
    """The metadata of a GGUF file that decides its tokenization.

    That is every ``tokenizer.*`` key but the chat templates, and
    ``general.name``: llama.cpp gives special tokens attributes by the model's
    name (a Phi-3 model's markers swallow the whitespace after them, so
    ``<|end|>\\n<|user|>`` is two tokens), so a copy under another name would
    tokenize differently. Returns key -> (type, array item type or None,
    value), strings as bytes (the file's own, copied as they are), in the
    file's order. Only the header is read, however big the file.
    """
    found: dict[str, Value] = {}
    with path.open("rb") as handle:
        cursor = _Cursor(handle)
        if handle.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version = cursor.take("<I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is too old")
        cursor.take("<Q")  # tensor count
        for _ in range(cursor.take("<Q")):
            key = cursor.string().decode("utf-8")
            kind = gguf.GGUFValueType(cursor.take("<I"))
            item, value = cursor.value(kind)
            if key in _COPIED or (
                key.startswith("tokenizer.") and not key.startswith(_SKIPPED)
            ):
                found[key] = (kind, item, value)
    return found


# --- writing the model ---------------------------------------------------------


def write_real_vocab_model(
    path: Path,
    vocab: Path,
    chat_template: str | None,
    seed: int = 1234,
) -> Path:
    """Write a tiny random-weight llama at ``path`` with ``vocab``'s tokenizer.

    ``vocab`` is any GGUF (a vocab-only one from the sdist, or a real model);
    what decides its tokenization (``read_tokenizer``) is copied verbatim, and
    ``chat_template`` (None: none) takes the place of its chat templates.
    Fixed seed: the same inputs give the same file.
    """
    tokenizer = read_tokenizer(vocab)
    kind, _item, tokens = tokenizer["tokenizer.ggml.tokens"]
    assert kind == gguf.GGUFValueType.ARRAY
    n_vocab = len(tokens)
    head_dim = N_EMBD // N_HEAD
    rng = np.random.default_rng(seed)

    def weights(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float32)

    ones = np.ones(N_EMBD, dtype=np.float32)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(N_LAYER)
    writer.add_context_length(CONTEXT_LENGTH)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD_KV)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, (value_type, item, value) in tokenizer.items():
        writer.add_key_value(key, value, value_type, item)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    # f16 and tied to the output (no output.weight): the vocabulary-sized
    # matrix is the file, so it is stored once and at half size.
    embeddings = weights(n_vocab, N_EMBD, scale=1.0).astype(np.float16)
    writer.add_tensor("token_embd.weight", embeddings)
    writer.add_tensor("output_norm.weight", ones)
    n_kv = head_dim * N_HEAD_KV
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.attn_q.weight", weights(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weights(n_kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weights(n_kv, N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weights(N_EMBD, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weights(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weights(N_FF, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weights(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def real_vocab_model(folder: Path, vocab: Path, chat_template: str | None) -> Path:
    """``write_real_vocab_model`` into ``folder``, once per vocabulary and template.

    The file's name holds a hash of the source's name, size and modification
    time, of the template and of the layout, so a cached file is reused only
    for the same inputs; it lands by an atomic rename.
    """
    info = vocab.stat()
    key = hashlib.sha256(f"{vocab.name} {info.st_size} {info.st_mtime_ns}".encode())
    key.update((chat_template or "").encode("utf-8"))
    key.update(_LAYOUT.encode())
    target = folder / f"{vocab.stem}.{key.hexdigest()[:12]}.gguf"
    if not target.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        write_atomically(
            target, lambda p: write_real_vocab_model(p, vocab, chat_template)
        )
    return target


@contextmanager
def llama_tokenizer(model: Path) -> Iterator[Callable[[str, bool], list[int]]]:
    """llama.cpp's tokenizer of ``model``'s vocabulary alone, loaded once.

    It gives a text's tokens without BOS/EOS, special markers as plain text
    (as ``test-tokenizer-0`` does) or, with its second argument true, parsed
    as the app's backend parses them.
    """
    llm = llama_cpp.Llama(str(model), vocab_only=True, verbose=False)
    try:
        yield lambda text, special: llm.tokenize(
            text.encode("utf-8"), add_bos=False, special=special
        )
    finally:
        llm.close()


def llama_tokenize(
    model: Path, texts: list[str], special: bool = False
) -> list[list[int]]:
    """``llama_tokenizer``'s tokens of each of ``texts``."""
    with llama_tokenizer(model) as tokenize:
        return [tokenize(text, special) for text in texts]


def written_tokens(engine: LlamaEngine, prompt: str, text: str) -> list[int]:
    """The tokens a model of the family writes for the reply ``text``.

    Those llama.cpp makes of ``text`` where the template puts it, after
    ``prompt`` (the conversation rendered with the generation prompt): a
    model writes what it was trained on, so after Phi-3's ``<|assistant|>``,
    which swallows the whitespace after it, a reply's leading space is no
    token of its own, and a SentencePiece word starts with its space where
    the template writes one. For a scripted sampler: random weights never
    write a sensible reply.
    """
    before = engine.tokenize(prompt)
    joined = engine.tokenize(prompt + text)
    if joined[: len(before)] == before:
        return joined[len(before) :]
    return engine.tokenize(text)
