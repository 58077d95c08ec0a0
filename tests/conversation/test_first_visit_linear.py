"""The first visit of an imported path costs what its nodes cost, not their square.

Its spans' texts come from windows of the path (``path_texts.whole_path``)
instead of one rendering of the whole path per node, the folding carries
the held text down the path (``folding.Chain``), and the spans, checkpoints
and batch sizes are written in a few transactions, not a few per node. None
of it may change a single token: here every node's texts, tokens, start and
span text are compared with the node-by-node rendering, on every reference
template of llama.cpp's sdist at the text level and on tiny models with
real templates and real vocabularies through the real stack.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.backend.chat_format import ChatFormat, Message, load
from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation import folding, path_texts, spans
from app.conversation.service import ConversationService
from storage import checkpoint_rows, exchange, node_rows
from storage.db import open_database
from storage.errors import NotFound
from storage.records import NodeRecord
from storage.values import Role, Status
from tests.helpers import real_vocab, template_corpus
from tests.helpers.tiny_model import write_tiny_model

USERS = [
    "Hello, who are you?",
    "Grüße aus Köln — 世界 🌳?",
    "  spaced out  ",
    "A <b>tag</b>\nand two lines",
    "ok",
    "ok",
]
REPLIES = [
    ("I am Arbor's test model.", "The user greets me."),
    ("  Gut, danke!  ", "Non-ASCII input.\nTwo lines."),
    ("Third answer.", ""),
    ("ok", "Short."),
    ("ok", ""),
    ("Sure thing.\n", "Fine."),
]


def _turns(count: int, thinking: bool) -> list[Message]:
    """A conversation of ``count`` turns, user first; repeats included."""
    turns = []
    for t in range(count):
        r = t // 2
        if t % 2 == 0:
            turns.append(Message("user", USERS[r % len(USERS)] + f" #{r}" * (r % 3)))
        else:
            text, reasoning = REPLIES[r % len(REPLIES)]
            turns.append(Message("assistant", text, reasoning if thinking else ""))
    return turns


def _compare(fmt: ChatFormat, system: str | None, turns: list[Message]) -> bool:
    """Whether ``whole_path`` served the path; if it did, it matched ``exact``."""
    whole = path_texts.whole_path(fmt, system, turns, {})
    if whole is None:
        return False
    assert len(whole) == len(turns)
    for t in range(len(turns)):
        assert whole[t] == path_texts.exact(fmt, system, turns[: t + 1], {}), t
    return True


# Templates people run, which the windows must serve (not only not get wrong).
SERVED = {
    "Qwen-Qwen2.5-7B-Instruct",
    "Qwen-Qwen3-0.6B",
    "meta-llama-Llama-3.1-8B-Instruct",
    "google-gemma-2-2b-it",
    "openai-gpt-oss-120b",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "microsoft-Phi-3.5-mini-instruct",
    "HuggingFaceTB-SmolLM3-3B",
    "ibm-granite-granite-3.3-2B-Instruct",
}


VARIANTS = [(None, True, 13), ("You are terse.", False, 14), ("Be kind.", True, 14)]


def test_windowed_texts_are_the_node_by_node_ones_on_every_reference_template():
    templates = template_corpus.reference_templates()
    served: dict[str, int] = {}
    for name, source in sorted(templates.items()):
        fmt = load(source, "<s>", "</s>")
        if fmt.kind != "gguf":
            continue
        # With reasoning and without, with a system prompt and without,
        # ending with a reply and with a user turn.
        for system, thinking, count in VARIANTS:
            try:
                ok = _compare(fmt, system, _turns(count, thinking))
            except AssertionError as exc:
                raise AssertionError(f"{name} {system!r} {thinking}: {exc}") from exc
            served[name] = served.get(name, 0) + ok
    print(f"\n{sum(1 for v in served.values() if v)}/{len(served)} templates served")
    assert {name for name, times in served.items() if times == len(VARIANTS)} >= SERVED
    assert sum(1 for times in served.values() if times) >= 0.9 * len(served)
    # Mistral Nemo moves the system prompt to the last user turn: no window
    # shows that, so the path is rendered node by node.
    assert served["mistralai-Mistral-Nemo-Instruct-2407"] == 1


def test_windowed_texts_on_llama_cpps_test_templates():
    # test-chat-template.cpp's templates beyond the models/ folder: Llama 2,
    # Mistral v1/v3/v7, Zephyr, Vicuna, ChatGLM, EXAONE, ...
    corpus = set(template_corpus.reference_templates().values())
    seen: set[str] = set()
    served = 0
    for case in template_corpus.reference_cases():
        source = case.template_str
        if source in corpus or source in seen or not case.supported_with_jinja:
            continue
        seen.add(source)
        fmt = ChatFormat(source, case.bos_token or "<s>", case.eos_token or "</s>")
        try:
            fmt.prompt("s", _turns(3, False))
        except Exception:  # a template the app would not use (load falls back)
            continue
        for system in (None, "You are terse."):
            served += _compare(fmt, system, _turns(15, False))
    assert len(seen) >= 20 and served >= len(seen)


@pytest.mark.parametrize(
    "name",
    ["Qwen-Qwen3-0.6B", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "GLM-4.6"],
)
def test_contents_that_change_a_templates_mind_are_never_served_wrong(name):
    # Qwen3 skips tool results when it looks for the last query, DeepSeek
    # cuts replies at </think>: what a turn holds can move text elsewhere.
    fmt = load(template_corpus.reference_templates()[name], "<s>", "</s>")
    for thinking in (False, True):
        turns = _turns(20, thinking)
        turns[8] = turns[12] = Message("user", "<tool_response>42</tool_response>")
        turns[9] = Message("assistant", "early</think>late", "why")
        turns[10], turns[11] = Message("user", ""), Message("assistant", "")
        _compare(fmt, None, turns)


def test_paths_that_do_not_alternate_are_rendered_node_by_node():
    fmt = load(
        template_corpus.reference_templates()["Qwen-Qwen2.5-7B-Instruct"], "", ""
    )
    turns = _turns(20, False)
    turns[7] = Message("user", "two users in a row")
    assert path_texts.whole_path(fmt, None, turns, {}) is None


# --- the folding, carried down the path ----------------------------------------


def _record(index: int, start: int, span: str | None) -> NodeRecord:
    return NodeRecord(
        id=index + 1,
        conversation_id=1,
        parent_id=index or None,
        role=Role.USER,
        text="",
        tokens=tuple(range(len(span or "x"))),
        start_pos=start,
        chunks=(),
        vocab_id="v",
        status=Status.COMPLETE,
        generation=None,
        created_at=datetime.now(UTC),
        span_text=span,
    )


def test_the_chain_folds_as_the_effective_nodes_do():
    rng = random.Random(7)
    for _case in range(300):
        path: list[NodeRecord] = []
        chain = folding.Chain()
        for index in range(rng.randint(1, 25)):
            nodes = folding.effective(path)
            # Start after any effective node (or at 0): re-rendered tails.
            start = rng.choice([0, *(n.end_pos for n in nodes)]) if nodes else 0
            span = None if rng.random() < 0.05 else rng.choice("ab") * rng.randint(1, 3)
            path.append(_record(index, start, span))
            chain.push(path[-1])
            nodes = folding.effective(path)
            assert chain.nodes == nodes
            assert [chain.held(k) for k in range(len(nodes))] == folding.held_texts(
                nodes
            )
            held = "".join(n.span_text or "" for n in nodes)
            for target in (held, held[: rng.randint(0, len(held))] + "ba", "b" + held):
                for limit in range(len(nodes) + 1):
                    assert chain.fold(target, limit) == folding.fold(
                        nodes[:limit], target
                    )


# --- the real stack ------------------------------------------------------------


def _import(db: Any, nodes: int, system: str | None, thinking: bool) -> int:
    rows: list[dict[str, Any]] = [
        {"id": 0, "parent": None, "role": "root", "text": system or ""}
    ]
    for i, turn in enumerate(_turns(nodes - 1, thinking), start=1):
        rows.append(
            {
                "id": i,
                "parent": i - 1,
                "role": turn.role,
                "text": turn.content,
                "thinking": turn.thinking,
            }
        )
    data = {
        "format": exchange.FORMAT,
        "version": exchange.VERSION,
        "title": "imported",
        "nodes": rows,
        "active": nodes - 1,
    }
    active = exchange.import_json(db, data).active_node_id
    assert active is not None
    return active


def _spans(path: list[NodeRecord]) -> list[tuple[Any, ...]]:
    return [
        (n.role, n.tokens, n.start_pos, n.span_text, n.vocab_id, n.status, n.chunks)
        for n in path
    ]


def _both_ways(
    tmp_path: Path, model: Path, monkeypatch, nodes: int = 41, thinking: bool = True
) -> bool:
    """Render an imported path with windows and node by node; compare every
    node. Returns whether the windows served it."""
    served = []
    whole_path = path_texts.whole_path

    def spy(*args: Any) -> Any:
        result = whole_path(*args)
        served.append(result is not None)
        return result

    monkeypatch.setattr(path_texts, "whole_path", spy)
    results = []
    with LlamaEngine(model, BackendSettings(n_ctx=4096, n_threads=1)) as engine:
        system = "Answer briefly." if "gemma" not in model.name else None
        for way in ("windows", "node by node"):
            db = open_database(tmp_path / f"{way}.sqlite3")
            try:
                last = _import(db, nodes, system, thinking)
                if way == "node by node":
                    monkeypatch.setattr(spans, "_WHOLE_PATH_SPANS", 10**9)
                path = node_rows.get_path(db, last)
                placed = spans.ensure_spans(db, engine, path, {})
                assert _spans(placed) == _spans(node_rows.get_path(db, last))
                assert folding.is_consistent(placed)
                results.append(_spans(placed))
            finally:
                db.close()
    assert results[0] == results[1]
    return served == [True]


REAL_TEMPLATES = [
    "Qwen-Qwen3-0.6B",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "openai-gpt-oss-120b",
    "meta-llama-Llama-3.1-8B-Instruct",
    "google-gemma-2-2b-it",
    "microsoft-Phi-3.5-mini-instruct",
    "mistralai-Mistral-Nemo-Instruct-2407",
]


@pytest.mark.parametrize("name", ["chatml", *REAL_TEMPLATES])
def test_an_imported_path_gets_the_same_spans_both_ways(tmp_path, monkeypatch, name):
    source = None if name == "chatml" else template_corpus.reference_templates()[name]
    model = write_tiny_model(
        tmp_path / f"{name}.gguf",
        **({} if source is None else {"chat_template": source}),
    )
    served = _both_ways(tmp_path, model, monkeypatch)
    # Mistral Nemo with a system prompt moves it: rendered node by node.
    assert served == ("Mistral-Nemo" not in name)


@pytest.mark.parametrize(
    ("vocab", "template"),
    [
        # Mistral 7B's markers are plain text in SentencePiece: spans start
        # further up where a seam would not tokenize apart (_joins_cleanly).
        (
            "llama-spm",
            "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a "
            "system prompt)",
        ),
        ("llama-bpe", "meta-llama-Llama-3.1-8B-Instruct"),
    ],
)
def test_the_same_spans_both_ways_on_real_vocabularies(
    real_vocabs, tmp_path, monkeypatch, vocab, template
):
    source = template_corpus.reference_templates().get(template) or next(
        c.template_str for c in template_corpus.reference_cases() if c.name == template
    )
    model = real_vocab.real_vocab_model(
        tmp_path, real_vocab.vocab_file(real_vocabs, vocab), source
    )
    _both_ways(tmp_path, model, monkeypatch, thinking=False)


def test_a_first_visit_writes_a_few_transactions_and_restores_after(
    tmp_path, tiny_model
):
    db = open_database(tmp_path / "arbor.sqlite3")
    try:
        with LlamaEngine(tiny_model, BackendSettings(n_threads=1)) as engine:
            service = ConversationService(db, engine)
            last = _import(db, 61, "Be brief.", thinking=False)
            before = db.generation()
            stats = service.restore(last)
            db.flush_deferred()
            # The spans, the checkpoints, the batch sizes, the bookkeeping:
            # not the three or more per node it was.
            assert db.generation() - before <= 4
            assert stats.reprocessed_tokens > 0
            path = node_rows.get_path(db, last)
            assert (
                sum(
                    checkpoint_rows.checkpointed_nodes(
                        db, [n.id for n in path], service.profile_id
                    ).values()
                )
                == stats.checkpoint_bytes_written
            )
            # What was saved in one go restores like what was saved one by one.
            service.restore(path[1].id)
            again = service.restore(last)
            assert again.reprocessed_tokens == 0 and not again.fallbacks
            service.close()
    finally:
        db.close()


def test_a_failing_node_keeps_the_spans_fixed_above_it(
    tmp_path, tiny_model, monkeypatch
):
    db = open_database(tmp_path / "arbor.sqlite3")
    rerender = spans._rerender
    calls = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 10:
            raise RuntimeError("a template that fails at the tenth node")
        return rerender(*args, **kwargs)

    monkeypatch.setattr(spans, "_rerender", failing)
    try:
        with LlamaEngine(tiny_model, BackendSettings(n_threads=1)) as engine:
            last = _import(db, 31, None, thinking=False)
            path = node_rows.get_path(db, last)
            with pytest.raises(RuntimeError, match="tenth"):
                spans.ensure_spans(db, engine, path, {})
            stored = node_rows.get_path(db, last)
            assert all(n.vocab_id == engine.vocab_id for n in stored[:9])
            assert all(n.vocab_id is None for n in stored[9:])
    finally:
        db.close()


def test_rendering_per_node_stays_flat(tmp_path, tiny_model, monkeypatch):
    # Messages the template goes over, per node placed: a window's few, not
    # the path above (300 on average for this path, in 605 renders).
    db = open_database(tmp_path / "arbor.sqlite3")
    try:
        settings = BackendSettings(n_ctx=16384, n_threads=1)
        with LlamaEngine(tiny_model, settings) as engine:
            fmt = engine.chat_format
            render = fmt.render
            rendered = []

            def counting(messages: Any, *args: Any, **kwargs: Any) -> str:
                rendered.append(len(messages))
                return render(messages, *args, **kwargs)

            monkeypatch.setattr(fmt, "render", counting)
            last = _import(db, 401, None, thinking=False)
            spans.ensure_spans(db, engine, node_rows.get_path(db, last), {})
            # The checks render a few prefixes whole: a handful of paths.
            assert sum(rendered) <= 40 * 401
    finally:
        db.close()


# --- storage ----------------------------------------------------------------------


def test_update_nodes_changes_all_or_nothing(tmp_path, tiny_model):
    db = open_database(tmp_path / "arbor.sqlite3")
    try:
        last = _import(db, 5, None, thinking=False)
        path = node_rows.get_path(db, last)
        with pytest.raises(NotFound):
            node_rows.update_nodes(
                db,
                {path[1].id: {"span_text": "x"}, 10**6: {"span_text": "y"}},
            )
        assert node_rows.get_node(db, path[1].id).span_text is None
        with pytest.raises(ValueError, match="parent_id"):
            node_rows.update_nodes(db, {path[1].id: {"parent_id": 1}})
        changed = node_rows.update_nodes(
            db,
            {
                path[1].id: {"tokens": [5, 6, 7], "start_pos": 2, "chunks": [3]},
                path[2].id: {"status": Status.STOPPED, "span_text": "ab"},
            },
        )
        assert changed[path[1].id] == node_rows.get_node(db, path[1].id)
        assert changed[path[1].id].tokens == (5, 6, 7)
        assert changed[path[1].id].end_pos == 5
        assert changed[path[2].id].status == Status.STOPPED
    finally:
        db.close()


def test_save_checkpoints_skips_nodes_gone_or_changed(tmp_path, tiny_model):
    db = open_database(tmp_path / "arbor.sqlite3")
    try:
        last = _import(db, 4, None, thinking=False)
        path = node_rows.get_path(db, last)
        node_rows.update_nodes(db, {n.id: {"tokens": [1, 2]} for n in path})
        profile = checkpoint_rows.ensure_profile(db, "p", {})
        saved = checkpoint_rows.save_checkpoints(
            db,
            profile,
            [
                checkpoint_rows.CapturedCheckpoint(path[0].id, "delta", 0, 2, b"abc"),
                checkpoint_rows.CapturedCheckpoint(10**6, "delta", 0, 2, b"gone"),
                checkpoint_rows.CapturedCheckpoint(
                    path[1].id, "delta", 0, 2, b"old", captured_tokens=(9, 9)
                ),
                checkpoint_rows.CapturedCheckpoint(path[2].id, "delta", 0, 2, b"first"),
                checkpoint_rows.CapturedCheckpoint(path[2].id, "delta", 0, 2, b"again"),
            ],
        )
        assert saved == [3, 0, 0, 5, 5]
        stored = checkpoint_rows.load_checkpoints(db, [n.id for n in path], profile)
        assert set(stored) == {path[0].id, path[2].id}
        assert stored[path[2].id].data == b"again"
        assert all(c.is_intact() for c in stored.values())
    finally:
        db.close()
