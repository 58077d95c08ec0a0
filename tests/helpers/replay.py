"""The reference for exactness: a reply's logits computed afresh from what is
stored (every span above it decoded in its recorded batch sizes, then the
reply's opening in one batch, as the service generates)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation import folding
from app.conversation.batches import Batches
from storage.records import NodeRecord


def replayed_digest(
    model: Path, path: list[NodeRecord], settings: BackendSettings | None = None
) -> str:
    """The ``logits_digest`` the reply at the end of ``path`` should have."""
    settings = settings or BackendSettings(n_ctx=1024, n_threads=1)
    reply = path[-1]
    first = Batches.of(reply.chunks)
    opening = replace(
        reply,
        tokens=reply.tokens[: first.first_own],
        chunks=tuple(first.recorded()[: 2 if first.lead else 1]),
    )
    with LlamaEngine(model, settings) as fresh:
        decode_recorded(fresh, [*folding.effective(path[:-1]), opening])
        return hashlib.sha256(fresh.logits().tobytes()).hexdigest()


def decode_recorded(engine: LlamaEngine, nodes: list[NodeRecord]) -> None:
    """Decode the spans of ``nodes`` into an empty context in the batches
    they record (``n_batch`` at a time where none is recorded). A batch that
    two spans shared (``app/conversation/batches.py``) is decoded once,
    whole; where the span it went on into is not the next one given, filler
    makes it whole and is cut off after."""
    held: tuple[list[int], int] | None = None  # a shared batch's first part

    def finish_alone() -> None:
        nonlocal held
        if held is not None:
            part, tail = held
            engine.decode([*part, *part[-1:] * tail], [len(part) + tail])
            engine.truncate(engine.n_past - tail)
            held = None

    previous = nodes[0]
    for node in nodes:
        tokens = list(node.tokens)
        n = len(tokens)
        if not node.chunks:
            finish_alone()
            engine.decode(tokens)
            previous = node
            continue
        batches = Batches.of(node.chunks)
        sizes = list(batches.sizes)
        if batches.lead:
            own = sizes[0] - batches.lead
            if held is not None:
                part, tail = held
                assert tail == own, "the shared batch differs"
                held = None
            else:  # the span before was decoded again alone since
                part = list(previous.tokens[-batches.lead :])
                engine.truncate(engine.n_past - batches.lead)
            engine.decode([*part, *tokens[:own]], [sizes.pop(0)])
            tokens = tokens[own:]
        finish_alone()
        assert sum(sizes) - batches.tail == len(tokens), (node.chunks, n)
        if batches.tail:
            last = sizes.pop() - batches.tail
            held = (tokens[len(tokens) - last :], batches.tail)
            tokens = tokens[: len(tokens) - last]
        engine.decode(tokens, sizes)
        previous = node
    finish_alone()
