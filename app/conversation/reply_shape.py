"""What a reply must be besides its sampling: a grammar to sample under,
and the tool syntax its calls are read with.

A client that asks for a JSON object, or for a tool call, gets one even from
a weak model: the grammar leaves the sampler no other tokens. A reply that
may call tools is read for calls when it ends, and its calls are stored with
its node (``storage.tool_use``).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.backend.tool_calls import Constraint
from app.backend.tool_syntax import ToolSyntax


@dataclass(frozen=True)
class ReplyShape:
    """``constraint``: the grammar (None: free text); ``tools``: how the
    model writes calls, when the reply may make some (None: it may not);
    ``logprobs``: how many likeliest tokens to report beside each sampled
    token's log probability (None: none reported)."""

    constraint: Constraint | None = None
    tools: ToolSyntax | None = None
    logprobs: int | None = None


FREE = ReplyShape()
