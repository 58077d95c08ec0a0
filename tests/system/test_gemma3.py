"""End to end on a second real model: Gemma 3 270M (sliding window, 262k vocabulary).

The starter model is a plain-attention llama; Gemma 3 is what the tiny
generated models only imitate: five sliding-window layers (512 positions) to
one global one, a head size apart from n_embd / n_head, a 262,144-token
SentencePiece vocabulary. The published file is the *base* model, without a
chat template, so the chat tests run on a copy that carries llama.cpp's
reference Gemma template (``tests/helpers/gemma.py``), and one test checks what the
base file itself gets.

One short conversation is built once for the module (a model load and four
greedy replies take a few seconds on a 2-core machine; each test redoing
them would add up); the tests read it back through fresh engines, a fresh
process and llama.cpp's own tokenizer, and only ever add nodes to it.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.backend.engine import LlamaEngine
from app.backend.sampling import Sampler
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation import folding
from app.conversation.results import Reply
from app.conversation.service import ConversationService
from app.conversation.streams import Streams
from app.platform.paths import database_path
from storage.db import Database, open_database
from storage.values import Role
from tests.conftest import run_cli
from tests.helpers import template_corpus
from tests.helpers.gemma import TEMPLATE_NAME, GemmaModels
from tests.helpers.replay import decode_recorded
from tests.helpers.scripted import held_context

pytestmark = pytest.mark.gemma3

# A small context keeps the KV cache (18 KiB a token) and the runs short.
SETTINGS = BackendSettings(n_ctx=1024)
GREEDY = SamplingParams(temperature=0, max_tokens=16)
GREEDY_FLAGS = ("--temperature", "0", "--max-tokens", str(GREEDY.max_tokens))
CLI_SETTINGS = ("--n-ctx", str(SETTINGS.n_ctx))
QUESTIONS = (
    "What is the capital of France?",
    "And the capital of Italy?",
    "Name a river that flows through it.",
)
NEXT = "Thank you. One more question?"
# A next user turn in Gemma's markup, decoded after a restore to compare
# logits (several tokens: a one-token batch takes another matmul path).
TAIL = "<start_of_turn>user\nWhy is that?<end_of_turn>\n<start_of_turn>model\n"
WINDOW = 512


class _ObservedEngine(LlamaEngine):
    """The real engine, which remembers the last token it sampled.

    Used to cut a reply right after a whitespace token. Gemma's template
    trims a reply's text when it renders the next turn, so such a reply's
    turn is rendered, and decoded, again after it
    (``app.conversation.folding``): the tree then holds a span that starts
    inside its parent's, which the tests restore through like any other. (The
    streamed text cannot tell: it holds trailing whitespace back.)
    """

    last_sampled = -1

    def sample(self, sampler: Sampler, row: int = -1) -> int:
        self.last_sampled = super().sample(sampler, row)
        return self.last_sampled

    def sampled_whitespace(self) -> bool:
        token = self.last_sampled
        return token >= 0 and self.token_bytes(token).isspace()


@dataclass
class Chat:
    """The module's conversation, built in one process with one engine.

    ``replies`` are the answers to ``QUESTIONS`` (the second one cut right
    after its first whitespace token); ``continued`` is the answer to
    ``NEXT`` sent straight after the last of them, in the same process: what
    a cold resume must reproduce.
    """

    data_dir: Path
    db: Database
    service: ConversationService
    engine: LlamaEngine
    conversation: int
    replies: list[Reply]
    continued: Reply


@pytest.fixture(scope="module")
def chat(
    tmp_path_factory: pytest.TempPathFactory, gemma3_models: GemmaModels
) -> Iterator[Chat]:
    data_dir = tmp_path_factory.mktemp("gemma3-data")
    # Where a CLI run on ``data_dir`` looks: the cold process finds this tree.
    db = open_database(database_path(data_dir))
    engine = _ObservedEngine(gemma3_models.chat, SETTINGS)
    try:
        with ConversationService(db, engine) as service:
            yield _converse(data_dir, db, service, engine)
    finally:
        engine.close()
        db.close()


def _converse(
    data_dir: Path, db: Database, service: ConversationService, engine: _ObservedEngine
) -> Chat:
    """Ask ``QUESTIONS`` then ``NEXT``, each after the previous reply."""
    conversation, node = service.new_conversation(None)
    replies: list[Reply] = []
    for index, question in enumerate([*QUESTIONS, NEXT]):
        engine.last_sampled = -1
        stop = engine.sampled_whitespace if index == 1 else None
        parent_end = service.path(node)[-1].end_pos
        reply = service.send(node, question, GREEDY, Streams(should_stop=stop))
        user = service.path(reply.user_node)[-1]
        print(
            f"\nin process: {question!r} -> {reply.text!r} {_figures(reply)} "
            f"re-decoded={parent_end - user.start_pos}"
        )
        replies.append(reply)
        node = reply.assistant_node
    *replies, continued = replies
    return Chat(data_dir, db, service, engine, conversation, replies, continued)


def _figures(reply: Reply) -> str:
    stats = reply.stats
    return (
        f"kept={stats.kept_tokens} restored={stats.restored_tokens} "
        f"reprocessed={stats.reprocessed_tokens} prompt={stats.prompt_tokens} "
        f"generated={stats.generated_tokens} stop={stats.stop_reason} "
        f"context={stats.context_tokens}"
    )


def _llama_tokenize(engine: LlamaEngine, text: str) -> list[int]:
    """llama.cpp's tokenization of ``text``, special markers parsed, nothing added.

    Called straight, not through the engine's wrappers, so that the test
    compares the context with llama.cpp itself.
    """
    data = text.encode("utf-8")
    vocab = llama_cpp.llama_model_get_vocab(engine._model)
    buf = (llama_cpp.llama_token * (len(data) + 8))()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, len(buf), False, True)
    assert n >= 0
    return list(buf[:n])


def _render(engine: LlamaEngine, template: str, messages: list[dict[str, str]]) -> str:
    """The template's own rendering of ``messages`` with the generation prompt.

    Plain Jinja, as Hugging Face's ``apply_chat_template`` sets it up, not
    Arbor's renderer: the test must not check Arbor against itself.
    """

    def raise_exception(message: str) -> None:
        raise AssertionError(f"the template refused the conversation: {message}")

    vocab = llama_cpp.llama_model_get_vocab(engine._model)
    bos = llama_cpp.llama_vocab_get_text(vocab, llama_cpp.llama_vocab_bos(vocab))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, bos_token=bos.decode(), add_generation_prompt=True
    )


def _meta_int(engine: LlamaEngine, key: str) -> int:
    # The file's metadata as llama.cpp read it (gguf's Python reader would
    # take seconds to parse the 262k-token vocabulary on the way).
    buf = ctypes.create_string_buffer(64)
    n = llama_cpp.llama_model_meta_val_str(engine._model, key.encode(), buf, len(buf))
    assert n > 0, key
    return int(buf.value)


def test_the_chat_copy_uses_gemmas_template(chat):
    info = chat.engine.info
    assert info.chat_format == "gguf", info.chat_format_note
    template = template_corpus.reference_templates()[TEMPLATE_NAME]
    assert chat.engine.chat_format.source == template
    assert chat.engine.n_swa == WINDOW
    assert info.n_vocab == 262_144
    assert info.state_kind == "delta" and "sliding-window" in info.state_note


def test_context_is_llama_cpps_tokenization_of_the_full_render(chat):
    template = template_corpus.reference_templates()[TEMPLATE_NAME]
    for reply in [*chat.replies, chat.continued]:
        path = chat.service.path(reply.assistant_node)
        assert path[0].role == Role.ROOT
        messages = [{"role": str(n.role), "content": n.text} for n in path[1:-1]]
        expected = _llama_tokenize(
            chat.engine, _render(chat.engine, template, messages)
        )
        held = held_context(chat.service.path(reply.assistant_node))
        assert held == expected, (
            chat.engine.detokenize(held),
            chat.engine.detokenize(expected),
        )
        assert held[0] == chat.engine.bos_token


# The first reply: two turns above the end of the tree. The last: its path
# holds the cut reply's turn as rendered again after it, in a span that starts
# inside its parent's (when the cut reply ends in whitespace, as it does with
# the build measured; the fixture prints "re-decoded=").
@pytest.mark.parametrize("index", [0, 2], ids=["first-reply", "last-reply"])
def test_restoring_an_earlier_node_in_a_fresh_engine_is_exact(
    chat, gemma3_models, index
):
    node = chat.replies[index].assistant_node
    path = folding.effective(chat.service.path(node))
    tail = _llama_tokenize(chat.engine, TAIL)
    with LlamaEngine(gemma3_models.chat, SETTINGS) as fresh:
        # The same tokens in the same batches as they were first decoded.
        decode_recorded(fresh, path)
        fresh.decode(tail, [len(tail)])
        expected = fresh.logits()

    with (
        LlamaEngine(gemma3_models.chat, SETTINGS) as engine,
        ConversationService(chat.db, engine) as service,
    ):
        stats = service.restore(node)
        assert stats.fallbacks == []
        assert stats.reprocessed_tokens == 0
        assert stats.kept_tokens == 0
        assert stats.restored_tokens == path[-1].end_pos == engine.n_past
        engine.decode(tail, [len(tail)])
        restored = engine.logits()
    print(
        f"\nrestore of node {node}: restored={stats.restored_tokens} "
        f"in {stats.restore_ms:.1f} ms ({stats.checkpoint_bytes_read} bytes)"
    )
    assert restored.tobytes() == expected.tobytes()


def test_checkpoints_hold_the_kv_bytes_of_their_tokens(chat, gemma3_models):
    # K + V per token = n_layer x (n_embd_k_gqa + n_embd_v_gqa) x 2 bytes
    # (f16), from the model's metadata rather than from the engine's sum.
    engine = chat.engine
    n_layer = _meta_int(engine, "gemma3.block_count")
    n_head_kv = _meta_int(engine, "gemma3.attention.head_count_kv")
    k_gqa = n_head_kv * _meta_int(engine, "gemma3.attention.key_length")
    v_gqa = n_head_kv * _meta_int(engine, "gemma3.attention.value_length")
    kv_per_token = n_layer * (k_gqa + v_gqa) * 2
    assert chat.engine.info.kv_bytes_per_token == kv_per_token

    nodes = chat.service.tree(chat.conversation)
    stored = sum(n.checkpoint_bytes for n in nodes)
    tokens = sum(n.n_tokens for n in nodes)
    assert all(n.checkpoint_bytes > 0 for n in nodes if n.n_tokens)
    per_token = stored / tokens
    print(
        f"\ncheckpoints: {stored} bytes for {tokens} tokens = {per_token:.0f} "
        f"bytes/token; KV {kv_per_token} bytes/token "
        f"({per_token / kv_per_token:.4f}x)"
    )
    assert kv_per_token <= per_token <= kv_per_token * 1.10


def test_a_cold_resume_reprocesses_nothing(chat, gemma3_models):
    # A new process over the same database, as after a restart: it sends the
    # message the first process sent after the last reply.
    started = time.perf_counter()
    cold = run_cli(
        "--data-dir",
        chat.data_dir,
        "--model",
        gemma3_models.chat,
        *CLI_SETTINGS,
        "send",
        chat.replies[-1].assistant_node,
        NEXT,
        *GREEDY_FLAGS,
    ).json
    stats = cold["stats"]
    print(
        f"\ncold resume ({time.perf_counter() - started:.1f} s with the process): "
        f"kept={stats['kept_tokens']} restored={stats['restored_tokens']} "
        f"reprocessed={stats['reprocessed_tokens']} "
        f"restore_ms={stats['restore_ms']} -> {cold['text']!r}"
    )
    assert stats["fallbacks"] == []
    assert stats["reprocessed_tokens"] == 0
    assert stats["kept_tokens"] == 0
    # All of what the first process held below the new message, restored.
    held = chat.continued.stats
    base_end = held.kept_tokens + held.restored_tokens + held.reprocessed_tokens
    assert stats["restored_tokens"] == base_end
    # And it is the same reply, from the same logits, as in the first process.
    assert stats["logits_digest"] == chat.continued.stats.logits_digest
    assert cold["text"] == chat.continued.text


def test_the_base_model_loads_and_says_it_has_no_template(gemma3_models, tmp_path):
    with LlamaEngine(gemma3_models.base, SETTINGS) as engine:
        info = engine.info
        # Which fallback a template-less model gets may change; that it is not
        # the model's own template, and that the note says why, may not.
        assert info.chat_format != "gguf"
        assert "no chat template" in info.chat_format_note
        # The fallback renders and the model answers through it.
        db = open_database(tmp_path / "base.sqlite3")
        try:
            with ConversationService(db, engine) as service:
                _conv, root = service.new_conversation(None)
                reply = service.send(
                    root, "Hello", SamplingParams(temperature=0, max_tokens=4)
                )
        finally:
            db.close()
    print(
        f"\nbase model: {info.chat_format} ({info.chat_format_note}) -> {reply.text!r}"
    )
    assert reply.stats.generated_tokens > 0 or reply.stats.stop_reason == "end_of_turn"
