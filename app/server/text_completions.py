"""OpenAI's legacy ``/v1/completions``: a raw prompt continued, for
prompt-only clients (autocomplete, scripts written before chat).

The prompt is no conversation, so nothing is stored and no tree is
matched (``ConversationService.complete_prompt``); the request is checked
here, answered through the engine's thread like a chat, and written in
OpenAI's ``text_completion`` shape, whole or as server-sent events.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from app.backend.values import SamplingParams
from app.conversation.prompt_completion import PromptCompletion
from app.conversation.results import StopReason
from app.server.requests import BadRequest, envelope_of, sampling_of

# OpenAI's default for this endpoint: a completion is a few words, not a reply.
DEFAULT_COMPLETION_TOKENS = 16


@dataclass(frozen=True)
class TextRequest:
    """What a completions request asks."""

    model: str
    prompt: str
    sampling: SamplingParams
    stream: bool
    include_usage: bool


def parse_text_request(body: Any) -> TextRequest:
    """Check a decoded JSON body; raise ``BadRequest`` for what is wrong."""
    envelope = envelope_of(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]  # one prompt in a list, as some clients send it
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("'prompt' must be one non-empty string.", "prompt")
    if "\x00" in prompt:
        raise BadRequest("The prompt holds a NUL character.", "prompt")
    for name, neutral in (("suffix", None), ("echo", False), ("n", 1), ("best_of", 1)):
        if body.get(name, neutral) not in (neutral, None):
            raise BadRequest(f"'{name}' is not supported here.", name)
    if body.get("logprobs") not in (None, 0):
        raise BadRequest(
            "logprobs on /v1/completions are not supported: /v1/chat/completions "
            "has them.",
            "logprobs",
        )
    sampling = sampling_of(body)
    if body.get("max_tokens") is None:
        sampling = replace(sampling, max_tokens=DEFAULT_COMPLETION_TOKENS)
    return TextRequest(
        model=envelope.model,
        prompt=prompt,
        sampling=sampling,
        stream=envelope.stream,
        include_usage=envelope.include_usage,
    )


def finish_reason(done: PromptCompletion) -> str:
    """OpenAI's name for why the completion ended."""
    return "length" if done.stop_reason == StopReason.MAX_TOKENS else "stop"


def choice(text: str, finish: str | None) -> dict[str, Any]:
    """One ``choices`` entry of a completion (or of a streamed piece)."""
    return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish}


def usage(done: PromptCompletion) -> dict[str, Any]:
    """The completion's ``usage``: nothing of a raw prompt is cached."""
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": done.generated_tokens,
        "total_tokens": done.prompt_tokens + done.generated_tokens,
    }
