"""Tool calls as values, and reading them out of a generated reply.

A model writes its calls in its family's own syntax; :mod:`app.backend.tool_syntax`
learns that syntax from the chat template and describes it as a
:class:`CallFormat`: the text that opens and closes the calls, what stands
between two calls, and how one call is written, as literal text with slots
for the function's name, its arguments and, in some families, the call's id.
Three ways of writing one call cover the families llama.cpp knows:

- ``json``: a JSON object holding the name and the arguments (Hermes' and
  Qwen's ``{"name": ..., "arguments": ...}``, Llama 3.x's ``"parameters"``,
  Command R7B's ``"tool_name"``): read with a JSON decoder, keys in any order;
- ``tagged``: the name, literal markers, then the arguments as JSON
  (Mistral's ``name[ARGS]{...}``, DeepSeek's, gpt-oss' ``to=functions.name``,
  Functionary's ``<function=name>{...}``): markers matched with any
  whitespace, the arguments read with a JSON decoder;
- ``xml``: the name, then one tag per parameter holding its raw value
  (Qwen3-Coder's ``<function=name><parameter=k>v</parameter></function>``),
  values typed by the tool's JSON schema when the tools are known.

Reading is lenient: a call that does not parse (broken JSON, a reply cut at
``max_tokens``) stays in the reply's text, markers and all; nothing raises.
A template that writes no calls at all gets llama.cpp's *generic* format: the
whole reply is one JSON object, ``{"tool_calls": [...]}``, ``{"tool_call":
{...}}`` or ``{"response": "..."}`` (:func:`parse_generic`).

No Qt and no llama_cpp here: the module is pure Python, so that the server and
the conversation service can name its values without loading libllama.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.backend.errors import BackendError

__all__ = [
    "ARGUMENTS",
    "CALL_ID",
    "GENERATED_ID",
    "MARKER",
    "NAME",
    "CallFormat",
    "Constraint",
    "GrammarError",
    "ParsedReply",
    "Piece",
    "Slot",
    "ToolCall",
    "XmlParameters",
    "new_call_id",
    "opening_marker",
    "parse_calls",
    "parse_generic",
    "tool_functions",
]


@dataclass(frozen=True)
class ToolCall:
    """One call a reply makes.

    Attributes
    ----------
    id : str
        The call's id: the one the model wrote where its syntax has ids,
        else ``"call_"`` and 24 random letters and digits.
    name : str
        The function's name.
    arguments : str
        JSON text of an object, as OpenAI sends it.
    """

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ParsedReply:
    """A reply read for calls.

    Attributes
    ----------
    content : str
        The reply's text with the calls' markup removed, stripped.
    calls : tuple of ToolCall
        The calls, in the order written.
    """

    content: str
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Constraint:
    """What sampling must follow: a GBNF grammar, applied from the first token,
    or only once one of ``triggers`` (regex patterns, llama.cpp's lazy grammar)
    matches the text generated so far."""

    gbnf: str
    triggers: tuple[str, ...] = ()


class GrammarError(BackendError, ValueError):
    """A grammar cannot be made or compiled: an unsupported JSON schema, a
    ``tool_choice`` naming no tool, or GBNF that llama.cpp refuses."""


# --- How a family writes its calls -------------------------------------------


@dataclass(frozen=True)
class Slot:
    """A place in a call's text that varies: the name, arguments or an id."""

    kind: str


NAME = Slot("name")
ARGUMENTS = Slot("arguments")
# The call's id as the model writes it (Mistral's [CALL_ID], Nemo's "id").
CALL_ID = Slot("id")
# An id-like field the template numbers itself (Command R7B's "tool_call_id":
# "0"): the model writes one, but it is no id a client could answer to.
GENERATED_ID = Slot("generated id")

Piece = str | Slot


@dataclass(frozen=True)
class XmlParameters:
    """How an ``xml`` call writes its parameters, as in ``<function=NAME>`` +
    (``param_open`` KEY ``key_suffix`` VALUE ``value_suffix``)*."""

    name_suffix: str
    param_open: str
    key_suffix: str
    value_suffix: str


@dataclass(frozen=True)
class CallFormat:
    """How one family writes a reply's tool calls (see the module docstring).

    Calls are written as ``section_start`` + call (``separator`` call)* +
    ``section_end``, each call as ``call_open`` + body + ``call_close``.

    Attributes
    ----------
    body : str
        ``"json"``, ``"tagged"`` or ``"xml"``.
    pieces : tuple
        One call's body as the template writes it: literal text and slots
        (``json`` and ``tagged``; for ``xml`` only the name slot).
    section_start, section_end, call_open, call_close, separator : str
        The literal text around and between calls.
    parallel : bool
        Whether the template writes several calls in one reply.
    at_start : bool
        The calls have no opening marker (Llama 3.x's bare JSON): only a
        reply that starts with a call makes one.
    openers : tuple of str
        Markers that may stand before the calls though the template does not
        write them there (Llama 3.x's ``<|python_tag|>``).
    stops : tuple of str
        End-of-generation markers that may follow the calls; never part of
        a grammar, since the sampler allows them once the grammar ends.
    name_path, arguments_path, id_path : tuple of str
        Where a ``json`` body keeps the name, the arguments and the id.
    arguments_as_string : bool
        The template writes the arguments as a JSON string holding JSON.
    xml : XmlParameters or None
        The parameter tags of an ``xml`` body.
    normalize : callable or None
        A rewrite of the reply before reading it, for families whose models
        write the calls' header in more than one order (gpt-oss).
    """

    body: str
    pieces: tuple[Piece, ...]
    section_start: str = ""
    section_end: str = ""
    call_open: str = ""
    call_close: str = ""
    separator: str = ""
    parallel: bool = False
    at_start: bool = False
    openers: tuple[str, ...] = ()
    stops: tuple[str, ...] = ()
    name_path: tuple[str, ...] = ()
    arguments_path: tuple[str, ...] = ()
    id_path: tuple[str, ...] = ()
    arguments_as_string: bool = False
    xml: XmlParameters | None = None
    normalize: Callable[[str], str] | None = None

    @property
    def opening(self) -> str:
        """The literal text that opens the calls ("" for ``at_start``)."""
        return self.section_start or self.call_open


# A marker: a special token's text (<|im_end|>, DeepSeek's tool separator, </tool_call>)
# or a bracketed one ([TOOL_CALLS]).
MARKER = re.compile(r"<[^<>\s]{1,64}>|\[[A-Za-z_/]{2,32}\]")


def opening_marker(opening: str) -> str:
    """Return the marker that starts ``opening`` (else all of it, stripped).

    What streaming watches for and a lazy grammar is triggered by: Command
    R7B's calls open with ``<|START_ACTION|>[``, and the marker alone already
    says a call follows.
    """
    opening = opening.lstrip()
    found = MARKER.match(opening)
    return found.group() if found else opening


# --- Ids and tools -----------------------------------------------------------

_ID_ALPHABET = string.ascii_letters + string.digits


def new_call_id() -> str:
    """Return ``"call_"`` and 24 random letters and digits (OpenAI's shape)."""
    return "call_" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(24))


def tool_functions(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return the ``function`` of each OpenAI tool of type ``function``.

    Parameters
    ----------
    tools
        An OpenAI ``tools`` list; a bare function (no ``type``) is taken too.

    Returns
    -------
    list of dict
        ``{"name", "parameters", ...}`` per function, ``parameters``
        defaulting to an object without properties.
    """
    functions = []
    for tool in tools:
        if tool.get("type", "function") != "function":
            continue
        function = tool.get("function", tool)
        if not isinstance(function, Mapping) or not function.get("name"):
            continue
        found = dict(function)
        if not isinstance(found.get("parameters"), Mapping):
            found["parameters"] = {"type": "object", "properties": {}}
        functions.append(found)
    return functions


# --- Reading a reply ---------------------------------------------------------

_DECODER = json.JSONDecoder(strict=False)  # models write raw newlines in strings
_NAME_CHARS = re.compile(r"[\w.\-]+")
_ID_CHARS = re.compile(r"[A-Za-z0-9_\-]+")
_SPACE = re.compile(r"\s*")


def _flexible(literal: str, lead: bool = True) -> re.Pattern[str]:
    # Markers must match exactly; the whitespace a template puts around them
    # is a habit models keep only approximately.
    parts = re.split(r"(\s+)", literal)
    body = "".join(r"\s*" if p.isspace() else re.escape(p) for p in parts if p)
    return re.compile((r"\s*" if lead else "") + body)


def _match(literal: str, text: str, at: int) -> int | None:
    """Return where ``literal`` (any whitespace, leading too) ends after ``at``."""
    if not literal:
        return at
    found = _flexible(literal).match(text, at)
    return found.end() if found else None


def _find(literal: str, text: str, at: int) -> tuple[int, int] | None:
    """Return the span of the next ``literal`` at or after ``at``."""
    if not literal.strip():
        return None
    found = _flexible(literal.strip(), lead=False).search(text, at)
    return (found.start(), found.end()) if found else None


def _decode_json(text: str, at: int) -> tuple[Any, int] | None:
    at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
    try:
        value, end = _DECODER.raw_decode(text, at)
    except json.JSONDecodeError:
        return None
    return value, end


def _as_arguments(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = _DECODER.decode(value)
        except json.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def _call(name: Any, arguments: Any, call_id: Any = None) -> ToolCall | None:
    args = _as_arguments(arguments)
    if not isinstance(name, str) or not name or args is None:
        return None
    if not isinstance(call_id, str) or not call_id:
        call_id = new_call_id()
    # Re-serialized: clients json.loads the text, and the model's own text may
    # hold raw control characters that a strict decoder refuses.
    return ToolCall(call_id, name, json.dumps(args, ensure_ascii=False))


def _get(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _known_names(tools: Sequence[Mapping[str, Any]] | None) -> set[str] | None:
    return None if tools is None else {f["name"] for f in tool_functions(tools)}


def _schemas(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    if tools is None:
        return {}
    return {f["name"]: f["parameters"] for f in tool_functions(tools)}


def parse_calls(
    fmt: CallFormat, text: str, tools: Sequence[Mapping[str, Any]] | None = None
) -> ParsedReply:
    """Read the calls a reply makes in the syntax ``fmt`` describes.

    Parameters
    ----------
    fmt
        The family's syntax.
    text
        The generated text, markers included (all of the reply, or the part
        from the opening marker on).
    tools
        The request's OpenAI ``tools``, if known: ``xml`` values are then
        typed by each parameter's schema, and a reply without an opening
        marker (``at_start``) counts as a call only if it names one of them.

    Returns
    -------
    ParsedReply
        The calls, and the text without their markup.
    """
    if fmt.normalize is not None:
        text = fmt.normalize(text)
    calls: list[ToolCall] = []
    content: list[str] = []
    if fmt.at_start:
        start = _SPACE.match(text).end()  # type: ignore[union-attr]
        for opener in fmt.openers:
            if text.startswith(opener, start):
                start += len(opener)
                break
        found = _section(fmt, text, start, tools, opened=True)
        if found is None:
            return ParsedReply(text.strip(), ())
        calls, end = found
        known = _known_names(tools)
        if known is not None and any(c.name not in known for c in calls):
            return ParsedReply(text.strip(), ())
        return ParsedReply(text[end:].strip(), tuple(calls))
    at = 0
    while True:
        opening = _find(fmt.opening, text, at)
        if opening is None:
            content.append(text[at:])
            break
        content.append(text[at : opening[0]])
        found = _section(fmt, text, opening[1], tools, opened=not fmt.section_start)
        if found is None:
            content.append(text[opening[0] : opening[1]])
            at = opening[1]
            continue
        calls.extend(found[0])
        at = found[1]
    return ParsedReply("".join(content).strip(), tuple(calls))


def _section(
    fmt: CallFormat,
    text: str,
    at: int,
    tools: Sequence[Mapping[str, Any]] | None,
    opened: bool,
) -> tuple[list[ToolCall], int] | None:
    """Read calls from just after the opening; None if not even one parses.

    ``opened``: the opening just read was the first call's ``call_open``.
    """
    calls: list[ToolCall] = []
    while True:
        start: int | None = at
        if not opened:
            start = _match(fmt.call_open, text, at)
        opened = False
        found = None if start is None else _body(fmt, text, start, tools)
        if found is None:
            break
        calls.append(found[0])
        at = _match(fmt.call_close, text, found[1]) or found[1]
        # Another call follows only after the separator, and its call_open
        # (a format without call_open needs a separator to go on).
        after = _match(fmt.separator, text, at)
        if after is None or not (fmt.call_open or fmt.separator.strip()):
            break
        if not fmt.call_open:
            if _body(fmt, text, after, tools) is None:
                break
            at, opened = after, True
            continue
        if _match(fmt.call_open, text, after) is None:
            break
        at = after
    if not calls:
        return None
    end = _match(fmt.section_end, text, at)
    at = at if end is None else end
    for stop in fmt.stops:
        end = _match(stop, text, at)
        if end is not None:
            at = end
            break
    return calls, at


def _body(
    fmt: CallFormat,
    text: str,
    at: int,
    tools: Sequence[Mapping[str, Any]] | None,
) -> tuple[ToolCall, int] | None:
    if fmt.body == "json":
        decoded = _decode_json(text, at)
        if decoded is None or not isinstance(decoded[0], Mapping):
            return None
        value, end = decoded
        call = _call(
            _get(value, fmt.name_path),
            _get(value, fmt.arguments_path),
            _get(value, fmt.id_path) if fmt.id_path else None,
        )
        return None if call is None else (call, end)
    if fmt.body == "xml" and fmt.xml is not None:
        return _xml_body(fmt.xml, text, at, _schemas(tools))
    return _tagged_body(fmt.pieces, text, at)


def _tagged_body(
    pieces: tuple[Piece, ...], text: str, at: int
) -> tuple[ToolCall, int] | None:
    values: dict[Slot, Any] = {}
    for piece in pieces:
        if isinstance(piece, str):
            end = _match(piece, text, at)
            if end is None:
                return None
            at = end
            continue
        at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
        if piece == ARGUMENTS:
            decoded = _decode_json(text, at)
            if decoded is None:
                return None
            values[piece], at = decoded
            continue
        chars = _NAME_CHARS if piece == NAME else _ID_CHARS
        found = chars.match(text, at)
        if found is None:
            return None
        values[piece], at = found.group(), found.end()
    call = _call(values.get(NAME), values.get(ARGUMENTS), values.get(CALL_ID))
    return None if call is None else (call, at)


def _xml_body(
    xml: XmlParameters, text: str, at: int, schemas: Mapping[str, Any]
) -> tuple[ToolCall, int] | None:
    at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
    name = _NAME_CHARS.match(text, at)
    if name is None:
        return None
    end = _match(xml.name_suffix, text, name.end())
    if end is None:
        return None
    properties = _get(schemas.get(name.group()), ("properties",))
    arguments: dict[str, Any] = {}
    key_end = xml.key_suffix.strip() or "\n"
    value_end = xml.value_suffix.strip() or "\n"
    while True:
        start = _match(xml.param_open, text, end)
        if start is None:
            break
        close = text.find(key_end, start)
        if close < 0:
            return None
        key = text[start:close].strip()
        value_at = close + len(key_end)
        value_close = text.find(value_end, value_at)
        if not key or value_close < 0:
            return None
        schema = properties.get(key) if isinstance(properties, Mapping) else None
        arguments[key] = _xml_value(text[value_at:value_close].strip(), schema)
        end = value_close + len(value_end)
    call = _call(name.group(), arguments)
    return None if call is None else (call, end)


def _xml_value(raw: str, schema: Any) -> Any:
    """Type a raw parameter value: by its schema, else as JSON when it reads so."""
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if kind == "string" or (kind is None and schema is not None and "enum" in schema):
        return raw
    if kind == "boolean" and raw in ("True", "False"):
        return raw == "True"  # Python's str() of a bool, as Jinja prints it
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        return raw
    if kind is None and isinstance(value, str):
        return raw
    return value


# --- The generic format ------------------------------------------------------

_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_generic(
    text: str, tools: Sequence[Mapping[str, Any]] | None = None
) -> ParsedReply:
    """Read a reply in llama.cpp's generic format.

    Parameters
    ----------
    text
        The reply: ``{"tool_calls": [{"name", "arguments", "id"}, ...]}``,
        ``{"tool_call": {...}}`` or ``{"response": ...}`` (also inside a
        Markdown code fence), or any other text, which is content.
    tools
        The request's tools, if known: a call must name one of them.

    Returns
    -------
    ParsedReply
        The calls, or the response as content.
    """
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    body = fenced.group(1) if fenced else stripped
    decoded = _decode_json(body, 0) if body.startswith("{") else None
    if decoded is None or not isinstance(decoded[0], Mapping):
        return ParsedReply(stripped, ())
    value, end = decoded
    rest = body[end:].strip()
    if "response" in value and not ("tool_calls" in value or "tool_call" in value):
        response = value["response"]
        if not isinstance(response, str):
            response = json.dumps(response, ensure_ascii=False)
        return ParsedReply(f"{response}\n{rest}".strip(), ())
    raw = value.get("tool_calls", [value.get("tool_call")])
    known = _known_names(tools)
    calls = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, Mapping):
            return ParsedReply(stripped, ())
        call = _call(item.get("name"), item.get("arguments"), item.get("id"))
        if call is None or (known is not None and call.name not in known):
            return ParsedReply(stripped, ())
        calls.append(call)
    if not calls:
        return ParsedReply(stripped, ())
    said = value.get("content")
    content = said if isinstance(said, str) else ""
    return ParsedReply(f"{content}\n{rest}".strip(), tuple(calls))
