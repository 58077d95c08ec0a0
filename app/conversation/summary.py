"""A path summarized by the model, to carry a full conversation into a new one.

When a branch has filled the context, one way on is a fresh conversation that
starts from what mattered. The model writes that summary itself, from the
path's messages (the most recent that fit in half the context), in a scratch
run of the context that stores nothing: the caller forgets the context after.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from app.backend.chat_format import Message
from app.backend.errors import ContextFullError
from app.backend.reasoning import ReasoningSplitter, starts_in_thinking
from app.backend.text_stream import Utf8Stream
from app.backend.values import SamplingParams
from storage.records import NodeRecord
from storage.values import Role

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine

SUMMARY_TOKENS = 256
_INSTRUCTION = "Summarize this conversation briefly; keep names, facts and decisions:"
_SPEAKERS = {Role.USER: "User", Role.ASSISTANT: "Assistant"}


def summarize(
    engine: LlamaEngine,
    path: list[NodeRecord],
    params: SamplingParams,
    should_stop: Callable[[], bool] | None = None,
) -> str:
    """The model's summary of ``path``; the engine's context is left overwritten."""
    prompt = _prompt_tokens(engine, path)
    engine.truncate(0)
    engine.decode(prompt)
    sampler = engine.sampler(params.with_seed(), prompt[-64:])
    fmt = engine.reasoning_format
    splitter = ReasoningSplitter(fmt, starts_in_thinking(fmt, ""))
    text = Utf8Stream()
    budget = min(_summary_room(engine), engine.n_ctx - engine.n_past - 1)
    for _ in range(max(budget, 0)):
        if should_stop is not None and should_stop():
            break
        token = engine.sample(sampler)
        if engine.is_end_of_generation(token):
            break
        special = engine.is_special(token)
        splitter.push(text.push(engine.token_bytes(token, special=special)), special)
        engine.decode([token])
    splitter.push(text.flush())
    splitter.flush()
    return splitter.answer.strip()


def _prompt_tokens(engine: LlamaEngine, path: list[NodeRecord]) -> list[int]:
    # The newest messages count most: take them from the end while they fit,
    # leaving room for the summary itself (a quarter of a small context).
    budget = engine.n_ctx - _summary_room(engine) - 1
    lines: list[str] = []
    for node in reversed(path):
        if node.role not in _SPEAKERS or not node.text.strip():
            continue
        candidate = [f"{_SPEAKERS[node.role]}: {node.text.strip()}", *lines]
        if _length(engine, candidate) > budget:
            if not lines:  # the newest message alone is too long: its end
                lines = [_tail_that_fits(engine, candidate[0], budget)]
            break
        lines = candidate
    return engine.tokenize(_render(engine, lines))


def _summary_room(engine: LlamaEngine) -> int:
    return min(SUMMARY_TOKENS, engine.n_ctx // 4)


def _tail_that_fits(engine: LlamaEngine, line: str, budget: int) -> str:
    while _length(engine, [line]) > budget:
        if not line:
            raise ContextFullError(
                "The context is too small to hold even the request for a summary."
            )
        line = line[max(1, len(line) // 4) :]
    return line


def _length(engine: LlamaEngine, lines: list[str]) -> int:
    return len(engine.tokenize(_render(engine, lines)))


def _render(engine: LlamaEngine, lines: list[str]) -> str:
    request = Message("user", "\n\n".join([_INSTRUCTION, *lines]))
    return engine.chat_format.prompt(None, [request])[1]
