"""Rendering nodes into token spans with the loaded model's tokenizer and template.

Tokens are the truth: a node's span is rendered once and stored. A span is
rendered again only when it was made for another tokenizer (a different
model) or never rendered (a conversation created before any model loaded).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.backend.chat_format import Message
from app.backend.engine import LlamaEngine
from storage import repository
from storage.db import Database
from storage.repository import NodeRecord

# Statuses of a reply whose turn was never closed (its process was killed).
UNCLOSED = ("interrupted", "generating")


def turns_of(path: Sequence[NodeRecord]) -> list[Message]:
    """The chat messages of a path, without the root."""
    return [Message(node.role, node.text) for node in path if node.role != "root"]


def system_of(path: Sequence[NodeRecord]) -> str | None:
    """The conversation's system prompt (the root's text), or None."""
    return path[0].text or None


def root_tokens(engine: LlamaEngine, system_prompt: str | None) -> list[int]:
    """Tokens of the conversation start, BOS included when the model wants one."""
    text = engine.chat_format.root_text(system_prompt)
    tokens = engine.tokenize(text)
    bos = engine.bos_token
    if engine.adds_bos and bos >= 0 and tokens[:1] != [bos]:
        tokens.insert(0, bos)
    return tokens


def message_tokens(
    engine: LlamaEngine, path: Sequence[NodeRecord], role: str, text: str
) -> list[int]:
    """Tokens that a message of ``role`` appends after ``path`` (a closed turn)."""
    return engine.tokenize(
        engine.chat_format.message_text(
            system_of(path), turns_of(path), Message(role, text)
        )
    )


def assistant_header_tokens(
    engine: LlamaEngine, path: Sequence[NodeRecord]
) -> list[int]:
    """Tokens that open the assistant's turn after ``path``."""
    return engine.tokenize(
        engine.chat_format.assistant_header(system_of(path), turns_of(path))
    )


def ensure_spans(
    db: Database, engine: LlamaEngine, path: list[NodeRecord]
) -> list[NodeRecord]:
    """Return ``path`` with every span valid for ``engine``, fixing what is not.

    A span never rendered or made by another tokenizer is rendered again from
    its text; a reply cut off by a killed process is closed. A node whose span
    is fine but no longer starts where its parent ends (a node above it
    changed length) keeps its tokens and only moves. Either way its stale
    checkpoints are dropped.
    """
    result: list[NodeRecord] = []
    for node in path:
        start = result[-1].end_pos if result else 0
        if node.vocab_id != engine.vocab_id or node.status in UNCLOSED:
            node = _rerender(db, engine, result, node, start)
        elif node.start_pos != start:
            repository.delete_checkpoints(db, node_ids=[node.id])
            node = repository.update_node(db, node.id, start_pos=start)
        result.append(node)
    return result


def _rerender(
    db: Database,
    engine: LlamaEngine,
    above: list[NodeRecord],
    node: NodeRecord,
    start: int,
) -> NodeRecord:
    changes: dict[str, object] = {"chunks": []}
    if node.role == "root":
        tokens = root_tokens(engine, node.text or None)
    elif node.status in UNCLOSED and node.vocab_id == engine.vocab_id:
        # A reply cut off by a killed process: keep its sampled ids and close the
        # turn, as a stopped reply would have been closed.
        footer = engine.tokenize(engine.chat_format.footer)
        tokens = [*node.tokens, *footer]
        changes["status"] = "stopped"
        changes["chunks"] = [*node.chunks, len(footer)] if footer else list(node.chunks)
    else:
        tokens = message_tokens(engine, above, node.role, node.text)
    repository.delete_checkpoints(db, node_ids=[node.id])
    return repository.update_node(
        db, node.id, tokens=tokens, start_pos=start, vocab_id=engine.vocab_id, **changes
    )
