"""The real engine with a scripted sampler, and what a reply's context held:
shared by the tests that drive chat formats through the real service."""

from __future__ import annotations

from app.backend.chat_format import Message
from app.backend.engine import LlamaEngine
from app.conversation import folding
from app.conversation.batches import Batches
from app.conversation.spans import span_tokens, turns_of
from storage.records import NodeRecord


class ScriptedEngine(LlamaEngine):
    """The real engine, whose sampler picks scripted tokens instead."""

    script: list[int]

    def sample(self, sampler, row=-1):
        return self.script.pop(0)


def held_context(path: list[NodeRecord]) -> list[int]:
    """The context when the reply at the end of ``path`` started: the
    effective spans above it and the reply's opening (its first chunk)."""
    reply = path[-1]
    above = [t for n in folding.effective(path[:-1]) for t in n.tokens]
    first = Batches.of(reply.chunks)
    return above + list(reply.tokens[: first.first_own])


def rendered_context(
    engine: LlamaEngine, system: str | None, path: list[NodeRecord]
) -> list[int]:
    """llama.cpp's tokens of the template's own render of the path above the
    reply at its end, with the generation prompt (special tokens parsed)."""
    head = [Message("system", system)] if system else []
    text = engine.chat_format.render([*head, *turns_of(path[:-1])], True)
    return span_tokens(engine, text, at_start=True)
