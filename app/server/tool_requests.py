"""The tool and output-shape parts of a chat completions request, checked.

``tools`` (OpenAI's function definitions), ``tool_choice``,
``parallel_tool_calls`` and ``response_format``, and the tool calls and
results inside the messages. Anything malformed is a ``BadRequest`` naming
its parameter, before the request waits for the engine.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


class BadRequest(Exception):
    """A request the API refuses (HTTP 400), with the parameter at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


# OpenAI's rule for a function's name.
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
# What the model may do with the tools: call them as it sees fit, must call
# one, may call none; or a function's name (it must call that one).
AUTO, REQUIRED, NONE = "auto", "required", "none"


@dataclass(frozen=True)
class ToolOptions:
    """The tools a request offers and what the model must do with them.

    ``choice`` is ``AUTO``, ``REQUIRED``, ``NONE`` or the name of the one
    function to call; ``parallel``: several calls in one reply allowed.
    """

    tools: tuple[dict[str, Any], ...] = ()
    choice: str = AUTO
    parallel: bool = True

    @property
    def may_call(self) -> bool:
        """Whether the reply may contain calls."""
        return bool(self.tools) and self.choice != NONE


NO_TOOLS = ToolOptions()


@dataclass(frozen=True)
class OutputFormat:
    """``response_format``: free text, or JSON (an object; one that follows
    ``schema`` where given)."""

    json: bool = False
    schema: dict[str, Any] | None = None


FREE_TEXT = OutputFormat()


def tool_options(body: dict[str, Any]) -> ToolOptions:
    """The request's ``tools``, ``tool_choice`` and ``parallel_tool_calls``."""
    if body.get("functions") is not None or body.get("function_call") is not None:
        raise BadRequest(
            "'functions' and 'function_call' are deprecated: send 'tools' and "
            "'tool_choice' instead.",
            "functions",
        )
    raw = body.get("tools")
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise BadRequest("'tools' must be a list of function tools.", "tools")
    tools = tuple(_tool(tool, index) for index, tool in enumerate(raw))
    names = [tool["function"]["name"] for tool in tools]
    if len(set(names)) != len(names):
        raise BadRequest("Two tools have the same name.", "tools")
    choice = _choice(body.get("tool_choice"), names)
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise BadRequest(
            "'parallel_tool_calls' must be true or false.", "parallel_tool_calls"
        )
    return ToolOptions(tools, choice, parallel)


def _tool(tool: Any, index: int) -> dict[str, Any]:
    where = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type") != "function":
        raise BadRequest(f"{where} must be a function tool.", where)
    function = tool.get("function")
    if not isinstance(function, dict):
        raise BadRequest(f"{where} needs a 'function' object.", where)
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise BadRequest(
            f"{where}: the function's name must be 1 to 64 letters, digits, "
            "'_', '.' or '-'.",
            where,
        )
    description = function.get("description", "")
    if not isinstance(description, str):
        raise BadRequest(f"{where}: 'description' must be a string.", where)
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict):
        raise BadRequest(f"{where}: 'parameters' must be a JSON schema object.", where)
    # Only what a template and a grammar read: a client's extra keys would
    # make two requests with the same tools look like different starts.
    kept: dict[str, Any] = {"name": name}
    if description:
        kept["description"] = description
    kept["parameters"] = parameters
    return {"type": "function", "function": kept}


def _choice(choice: Any, names: list[str]) -> str:
    if choice is None:
        return AUTO if names else NONE
    if choice in (AUTO, REQUIRED, NONE):
        if choice == REQUIRED and not names:
            raise BadRequest(
                "'tool_choice' is 'required' but no tools are given.", "tool_choice"
            )
        return str(choice)
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise BadRequest(
            "'tool_choice' must be 'auto', 'required', 'none' or "
            '{"type": "function", "function": {"name": ...}}.',
            "tool_choice",
        )
    if name not in names:
        raise BadRequest(
            f"'tool_choice' names {name!r}, which is not among the tools.",
            "tool_choice",
        )
    return name


def output_format(body: dict[str, Any]) -> OutputFormat:
    """The request's ``response_format``."""
    response_format = body.get("response_format")
    if response_format is None:
        return FREE_TEXT
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "text":
        return FREE_TEXT
    if kind == "json_object":
        return OutputFormat(json=True)
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise BadRequest(
                "A 'json_schema' response format needs json_schema.schema, a JSON "
                "schema object.",
                "response_format",
            )
        return OutputFormat(json=True, schema=schema)
    raise BadRequest(
        "'response_format' must be of type 'text', 'json_object' or 'json_schema'.",
        "response_format",
    )


def calls_of_message(message: dict[str, Any], where: str) -> tuple[dict[str, str], ...]:
    """An assistant message's ``tool_calls``, each ``{"id", "name",
    "arguments"}`` with the arguments as JSON text."""
    raw = message.get("tool_calls")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequest(f"{where}: 'tool_calls' must be a list.", where)
    calls = []
    for index, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        call_id = call.get("id") if isinstance(call, dict) else None
        if not isinstance(name, str) or not isinstance(call_id, str) or not call_id:
            raise BadRequest(
                f"{where}.tool_calls[{index}] needs an 'id' and a function 'name'.",
                where,
            )
        arguments = function.get("arguments", "{}") if function else "{}"
        if not isinstance(arguments, str):
            # Some clients send the object itself.
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    return tuple(calls)
