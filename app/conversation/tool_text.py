"""How a node's part in tool use reads in the window: a reply's calls and a
tool's result, as Markdown beside the text (the transcript renders it, the
tree and the graph take their first words)."""

from __future__ import annotations

import json
from dataclasses import replace

from storage import tool_use
from storage.records import NodeSummary
from storage.values import Role

# A result longer than this is shown cut, with its length said (the whole
# text stays stored, exported and in the model's context).
SHOWN_RESULT_CHARS = 4000


def shown(node: NodeSummary) -> NodeSummary:
    """``node`` with its text as the window shows it."""
    text = shown_text(node.role, node.text, node.tool_use)
    return node if text == node.text else replace(node, text=text)


def shown_text(role: str, text: str, use: dict[str, object] | None) -> str:
    """A message's text with its calls, or a tool result as a result."""
    if role == Role.TOOL:
        _call_id, name = tool_use.answered_call(use)
        body = text
        if len(body) > SHOWN_RESULT_CHARS:
            body = f"{body[:SHOWN_RESULT_CHARS]}\n… ({len(text):,} characters in all)"
        return f"Result of `{name or 'a tool'}`:\n\n```\n{body}\n```"
    calls = tool_use.calls_of(use)
    if not calls:
        return text
    shown_calls = [
        f"Calls `{call['name']}`:\n\n```json\n{_pretty(call['arguments'])}\n```"
        for call in calls
    ]
    return "\n\n".join([text.strip(), *shown_calls] if text.strip() else shown_calls)


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, indent=2)
    except ValueError:
        return arguments
