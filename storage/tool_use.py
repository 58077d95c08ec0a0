"""A node's part in tool use, as stored in ``node.tool_use`` (JSON).

Three shapes, one per role that has a part:

- a start (root): ``{"tools": [...], "servers": {...}}``, the tools offered
  to the model, in OpenAI's shape (``{"type": "function", "function":
  {"name", "description", "parameters"}}``), and, where known, the MCP
  server each comes from (offered name -> server name: what the window
  names a call by; not part of the offer); a start with other tools is
  another start, as one with another system prompt is, because templates
  render the tools there;
- a reply (assistant): ``{"calls": [{"id", "name", "arguments"}]}``, the calls
  it made, ``arguments`` as the JSON text of an object;
- a tool result (tool): ``{"call_id", "name"}``, the call it answers.

Plain dicts in and out, so that storage needs nothing from the app.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def offering(
    tools: list[dict[str, Any]], servers: Mapping[str, str] | None = None
) -> dict[str, Any] | None:
    """The ``tool_use`` of a start that offers ``tools`` (None: none), each
    from the server ``servers`` names for it (offered name -> server name)."""
    if not tools:
        return None
    use: dict[str, Any] = {"tools": tools}
    if servers:
        use["servers"] = dict(servers)
    return use


def servers_of(tool_use: dict[str, Any] | None) -> dict[str, str]:
    """Which server each tool a start offers comes from (offered name ->
    server name; {} where the start does not say)."""
    servers = (tool_use or {}).get("servers")
    if not isinstance(servers, dict):
        return {}
    return {str(name): str(server) for name, server in servers.items()}


def calling(calls: list[dict[str, str]]) -> dict[str, Any] | None:
    """The ``tool_use`` of a reply that made ``calls`` (None: none)."""
    return {"calls": calls} if calls else None


def answering(call_id: str, name: str) -> dict[str, Any]:
    """The ``tool_use`` of a tool result for the call ``call_id`` of ``name``."""
    return {"call_id": call_id, "name": name}


def tools_of(tool_use: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The tools a start offers ([] for none)."""
    tools = (tool_use or {}).get("tools")
    return tools if isinstance(tools, list) else []


def calls_of(tool_use: dict[str, Any] | None) -> list[dict[str, str]]:
    """The calls a reply made ([] for none), each ``{"id", "name", "arguments"}``."""
    calls = (tool_use or {}).get("calls")
    if not isinstance(calls, list):
        return []
    return [
        {
            "id": str(call.get("id", "")),
            "name": str(call.get("name", "")),
            "arguments": str(call.get("arguments", "{}")),
        }
        for call in calls
        if isinstance(call, dict)
    ]


def answered_call(tool_use: dict[str, Any] | None) -> tuple[str, str]:
    """The id and the tool name of the call a tool result answers ("" when
    unknown)."""
    use = tool_use or {}
    return str(use.get("call_id", "")), str(use.get("name", ""))
