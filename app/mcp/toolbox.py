"""The tools offered to the model, and the runner the tool loop calls.

The offer is every enabled server's tools, in the servers' order, each
in OpenAI's shape (what a conversation's start stores and the template
renders). A tool keeps its own name unless another server has a tool of
the same name: both are then offered as ``SERVER__TOOL``. A name the
templates and grammars cannot take (OpenAI's rule: letters, digits, ``_``,
``.``, ``-``, at most 64) has its other characters replaced.

The offer does not depend on permissions: a tool the user never allows is
still offered (a call of it is answered "denied"), so that changing a
permission changes no start and no conversation has to be decoded again.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.mcp.client import McpClients, ToolInfo
from app.mcp.config import (
    CALL_TIMEOUT_S,
    RESULT_TOKENS,
    Permission,
    ServerConfig,
)
from app.mcp.errors import ToolsError
from app.mcp.results import Outcome, ToolOutcome, cap, failure

_NAME_RULE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.\-]")
_EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class OfferedTool:
    """A server's tool as the model is offered it.

    ``name`` is what the model calls; ``tool`` what the server calls it.
    """

    name: str
    server: str
    tool: str
    description: str
    input_schema: dict[str, Any]
    permission: Permission

    def openai(self) -> dict[str, Any]:
        """The tool in OpenAI's shape (``storage.tool_use``)."""
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        function["parameters"] = self.input_schema or _EMPTY_SCHEMA
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class Toolbox:
    """What the model is offered: ``tools``, and the servers that could not
    be listed, with why (``unavailable``: server name -> reason)."""

    tools: tuple[OfferedTool, ...] = ()
    unavailable: Mapping[str, str] | None = None

    def openai_tools(self) -> list[dict[str, Any]]:
        """The offer in OpenAI's shape, for a start."""
        return [tool.openai() for tool in self.tools]

    def find(self, name: str) -> OfferedTool | None:
        """The tool the model calls ``name`` (None: none offered)."""
        return next((tool for tool in self.tools if tool.name == name), None)


def build_toolbox(
    servers: Iterable[ServerConfig],
    listings: Mapping[str, list[ToolInfo] | ToolsError],
) -> Toolbox:
    """The offer made of the enabled ``servers``' tools as ``listings``
    lists them (a server missing there, or listed as an error, offers none)."""
    enabled = [s for s in servers if s.enabled]
    found = [
        (server, tool)
        for server in enabled
        if isinstance(listed := listings.get(server.name), list)
        for tool in listed
    ]
    clashes = Counter(tool.name for _server, tool in found)
    taken: set[str] = set()
    offered = []
    for server, tool in found:
        wanted = tool.name if clashes[tool.name] == 1 else f"{server.name}__{tool.name}"
        name = _unique(_valid_name(wanted), taken)
        taken.add(name)
        offered.append(
            OfferedTool(
                name,
                server.name,
                tool.name,
                tool.description,
                tool.input_schema,
                server.permission(tool.name),
            )
        )
    unavailable = {
        server.name: str(listed)
        for server in enabled
        if isinstance(listed := listings.get(server.name), ToolsError)
    }
    return Toolbox(tuple(offered), unavailable)


def _valid_name(name: str) -> str:
    if _NAME_RULE.match(name):
        return name
    return _NOT_IN_NAME.sub("_", name)[:64] or "tool"


def _unique(name: str, taken: set[str]) -> str:
    number = 2
    unique = name
    while unique in taken:
        suffix = f"_{number}"
        unique = name[: 64 - len(suffix)] + suffix
        number += 1
    return unique


class McpToolRunner:
    """Runs the calls the tool loop allows, on MCP servers: the runner of
    ``app.conversation.tool_loop``.

    Parameters
    ----------
    clients
        The sessions with the servers.
    toolbox
        What the model was offered (names -> servers' tools, permissions).
    timeout_s
        How long one call may take.
    result_tokens
        The cap on a result, in tokens of the model (``app.mcp.results.cap``).
    count_tokens
        Counts a text's tokens with the model (None: the cap is in
        characters).
    """

    def __init__(
        self,
        clients: McpClients,
        toolbox: Toolbox,
        timeout_s: float = CALL_TIMEOUT_S,
        result_tokens: int = RESULT_TOKENS,
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.clients = clients
        self.toolbox = toolbox
        self.timeout_s = timeout_s
        self.result_tokens = result_tokens
        self.count_tokens = count_tokens

    def permission(self, name: str) -> str | None:
        """The permission of the tool the model calls ``name`` (None: no
        such tool was offered)."""
        tool = self.toolbox.find(name)
        return None if tool is None else str(tool.permission)

    def server_of(self, name: str) -> str | None:
        """The server of the tool the model calls ``name``."""
        tool = self.toolbox.find(name)
        return None if tool is None else tool.server

    def run(
        self, name: str, arguments: str, should_stop: Callable[[], bool] | None
    ) -> ToolOutcome:
        """Call the tool the model calls ``name`` with ``arguments`` (JSON
        text of an object), exactly as the model wrote them; the outcome
        capped. Never raises."""
        tool = self.toolbox.find(name)
        if tool is None:
            return failure(Outcome.FAILED, f"there is no tool called {name!r}.")
        try:
            parsed = json.loads(arguments or "{}")
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            return failure(Outcome.FAILED, "the arguments are not a JSON object.")
        outcome = self.clients.call(
            tool.server, tool.tool, parsed, self.timeout_s, should_stop
        )
        return cap(outcome, self.result_tokens, self.count_tokens)


def offered_as(toolbox: Toolbox, server: str, tool: str) -> str | None:
    """The name the model is offered ``server``'s ``tool`` under."""
    return next(
        (t.name for t in toolbox.tools if t.server == server and t.tool == tool), None
    )
