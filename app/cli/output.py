"""What the command line prints: JSON on stdout, one shape per value."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.conversation.results import Reply


def reply_json(reply: Reply, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A reply as the commands that generate print it, with ``extra`` fields
    (the budget's evictions, for one) beside it."""
    data = {
        "user_node": reply.user_node,
        "assistant_node": reply.assistant_node,
        "text": reply.text,
        **({"thinking": reply.thinking} if reply.thinking else {}),
        **({"tool_calls": list(reply.tool_calls)} if reply.tool_calls else {}),
        "stats": reply.stats.as_dict(),
    }
    data.update(extra or {})
    return data


def emit(data: Any) -> int:
    """Print ``data`` as indented JSON (non-ASCII kept as is); exit status 0."""
    json.dump(data, sys.stdout, ensure_ascii=False, indent=2, default=str)
    sys.stdout.write("\n")
    return 0
