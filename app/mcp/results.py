"""What a tool call comes back as in the context: text, capped.

A result is data for the model to read, never an instruction to Arbor:
whatever a server returns (text, images, resources, garbage) or however it
fails (a crash, a hang past the timeout, a refusal), the outcome is one
``ToolOutcome`` whose ``text`` the model reads as the tool's answer.
Failures say what happened in a sentence, so the model can tell the user
or try otherwise, and nothing raises out of a call.

Results are capped before they enter the context: a page of a megabyte
would fill any context and cost minutes to decode. The cap is in the
model's tokens where the model is known (``cap``), in characters
otherwise, and a capped result says so at its end, with the sizes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

# Characters per token assumed where no tokenizer counts: English text runs
# at about four; the cap errs on the side of less.
_CHARS_PER_TOKEN = 4
# A first cut, before counting: no model's tokens run this long on average,
# so counting a megabyte is never needed to cap it.
_MAX_CHARS_PER_TOKEN = 16


class Outcome(StrEnum):
    """How a call ended."""

    OK = "ok"  # the tool answered
    TOOL_ERROR = "tool_error"  # the tool answered with an error (isError)
    FAILED = "failed"  # the server refused the call or sent garbage
    TIMEOUT = "timeout"  # no answer within the timeout (the server is restarted)
    CRASHED = "crashed"  # the server went away during the call
    UNAVAILABLE = "unavailable"  # the server could not be started or reached
    STOPPED = "stopped"  # the user stopped it


@dataclass(frozen=True)
class ToolOutcome:
    """A call's outcome: ``text`` is what the model reads.

    ``chars`` is the size of the whole result, before any cap; ``capped``
    whether the text was cut (it then says so itself).
    """

    outcome: Outcome
    text: str
    chars: int = 0
    capped: bool = False

    @property
    def is_error(self) -> bool:
        """Whether the call did not give the tool's answer."""
        return self.outcome != Outcome.OK


def failure(outcome: Outcome, sentence: str) -> ToolOutcome:
    """A call that gave no answer, said in ``sentence`` for the model."""
    text = f"Error: {sentence}"
    return ToolOutcome(outcome, text, len(text))


def from_result(result: Any) -> ToolOutcome:
    """A ``CallToolResult`` of the SDK as text: each content block in turn
    (text as is, other blocks named with their size), else the structured
    content as JSON; an ``isError`` result is marked as the tool's error."""
    parts = [_block_text(block) for block in getattr(result, "content", None) or []]
    structured = getattr(result, "structured_content", None)
    if not any(parts) and structured is not None:
        parts = [json.dumps(structured, ensure_ascii=False)]
    text = "\n".join(part for part in parts if part)
    if getattr(result, "is_error", False):
        text = f"Error: {text or 'the tool failed without saying why.'}"
        return ToolOutcome(Outcome.TOOL_ERROR, text, len(text))
    return ToolOutcome(Outcome.OK, text, len(text))


def _block_text(block: Any) -> str:
    """One content block as text the model reads."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        data = getattr(block, "data", "") or ""
        mime = getattr(block, "mime_type", "") or kind
        # Base64: three bytes in four characters.
        return f"[{kind} {mime}, {len(data) * 3 // 4:,} bytes, not shown]"
    if kind == "resource":
        resource = getattr(block, "resource", None)
        uri = getattr(resource, "uri", "")
        text = getattr(resource, "text", None)
        return str(text) if text is not None else f"[resource {uri}, not shown]"
    if kind == "resource_link":
        return f"[resource {getattr(block, 'uri', '')}]"
    return f"[{kind or 'unknown'} content, not shown]"


def cap(
    outcome: ToolOutcome,
    max_tokens: int,
    count_tokens: Callable[[str], int] | None = None,
) -> ToolOutcome:
    """``outcome`` with its text cut to ``max_tokens`` tokens of the model
    (``count_tokens`` counts them), or to ``max_tokens`` x 4 characters when
    no model counts. A cut text ends with a note that says the cap and the
    whole result's size."""
    text = outcome.text
    if count_tokens is None:
        limit = max_tokens * _CHARS_PER_TOKEN
        if len(text) <= limit:
            return outcome
        kept = text[:limit]
        unit = f"{limit:,} characters"
    else:
        kept = text[: max_tokens * _MAX_CHARS_PER_TOKEN]
        counted = count_tokens(kept)
        # Shrink in proportion until it fits: two or three counts at most.
        while counted > max_tokens:
            kept = kept[: max(0, int(len(kept) * max_tokens / counted * 0.97))]
            counted = count_tokens(kept)
        if kept == text:
            return outcome
        unit = f"{max_tokens:,} tokens"
    note = (
        f"\n\n[Arbor cut this result to its first {unit} ({len(kept):,} of "
        f"{len(text):,} characters): the rest was not shown to the model.]"
    )
    return replace(outcome, text=kept + note, capped=True)
