"""A text completion of a raw prompt, outside any conversation: what
OpenAI's ``/v1/completions`` asks (autocomplete, prompt-only clients).

The prompt is no chat: no template, no turns, nothing a tree could match.
So it is decoded as it is, the model's continuation sampled after it, and
nothing is stored; the context held no conversation afterwards, and the
next conversation request restores its own from checkpoints. The
continuation ends at an end-of-generation token, a stop string or
``max_tokens``, and is cut at a stop string as a reply is (``ReplyText``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.backend.errors import ContextFullError
from app.backend.reasoning import NO_REASONING, ReasoningSplitter
from app.backend.values import SamplingParams
from app.conversation.results import StopReason
from app.conversation.streams import Streams
from app.conversation.turn_markers import ReplyText

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine


@dataclass(frozen=True)
class PromptCompletion:
    """A prompt's continuation, and what it cost."""

    text: str
    prompt_tokens: int
    generated_tokens: int
    stop_reason: StopReason
    prompt_ms: float
    generate_ms: float


def complete_prompt(
    engine: LlamaEngine, prompt: str, params: SamplingParams, streams: Streams
) -> PromptCompletion:
    """Decode ``prompt`` from an empty context and sample its continuation
    under ``params`` (its stop strings and ``max_tokens``), streaming it to
    ``streams``; raises ``ContextFullError`` when they cannot fit."""
    tokens = engine.tokenize(prompt)
    if engine.adds_bos and engine.bos_token >= 0 and tokens[:1] != [engine.bos_token]:
        tokens.insert(0, engine.bos_token)
    if len(tokens) + params.max_tokens > engine.n_ctx:
        raise ContextFullError(
            f"The prompt takes {len(tokens):,} tokens and max_tokens asks "
            f"{params.max_tokens:,} more, over the context's {engine.n_ctx:,}."
        )
    started = time.perf_counter()
    engine.truncate(0)
    engine.decode(tokens)
    prompt_ms = (time.perf_counter() - started) * 1000
    text = ReplyText((), params.stop, ReasoningSplitter(NO_REASONING), streams.emit)
    reason, generated = StopReason.MAX_TOKENS, 0
    started = time.perf_counter()
    with engine.sampler(params.with_seed(), tokens) as sampler:
        while generated < params.max_tokens:
            if streams.should_stop is not None and streams.should_stop():
                reason = StopReason.STOPPED
                break
            token = engine.sample(sampler)
            if engine.is_end_of_generation(token):
                reason = StopReason.END_OF_TURN
                break
            generated += 1
            if text.push(engine.token_bytes(token), False) is not None:
                reason = StopReason.STOP_STRING
                break
            engine.decode([token], [1])
    text.finish()
    return PromptCompletion(
        text=text.splitter.answer,
        prompt_tokens=len(tokens),
        generated_tokens=generated,
        stop_reason=reason,
        prompt_ms=prompt_ms,
        generate_ms=(time.perf_counter() - started) * 1000,
    )
