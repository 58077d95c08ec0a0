"""GBNF grammars that make a reply a tool call, or JSON, whatever the model.

A grammar leaves the sampler only the tokens that keep the text inside it, so
even a random-weight model writes a call that parses and whose arguments
validate against the tool's schema. Each tool's ``parameters`` become GBNF
through llama-cpp-python's JSON-schema converter (``llama_grammar.
SchemaConverter``: one converter, not another); the call around them is the
family's syntax as :mod:`app.backend.tool_syntax` learned it, written as the
template writes it, with the function names as alternatives of literals.
The grammar ends after the last call: llama.cpp's grammar sampler then allows
only end-of-generation tokens.

``tool_choice="auto"`` makes the grammar lazy: llama.cpp applies it only once
a trigger pattern matches the text generated so far, and from the pattern's
first group on. llama.cpp *aborts the process* if that text breaks the
grammar (it throws from a C function), so every pattern here matches only
text the grammar accepts, and only at the end of the text (``$``): the token
that completes the opening marker, and no more, is what the grammar is
replayed; a token that runs past it leaves the reply unconstrained, which
parsing then reads leniently.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

from app.backend.integer_ranges import integer_bounds, integer_rule
from app.backend.tool_calls import (
    ARGUMENTS,
    CALL_ID,
    GENERATED_ID,
    NAME,
    CallFormat,
    Constraint,
    GrammarError,
    opening_marker,
    tool_functions,
)

__all__ = ["generic_constraint", "json_constraint", "tool_constraint"]

# Ids the model writes: Mistral's are 9 letters and digits (its templates
# refuse others); ids a template numbers itself are short.
_ID_RULES = {
    "call-id": "[a-zA-Z0-9]{9}",
    "generated-id": "[a-zA-Z0-9_-]{1,24}",
}
_SLOT_RULES = {CALL_ID: "call-id", GENERATED_ID: "generated-id"}


def _converter() -> Any:
    return _converter_class()(
        prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False
    )


# JSON as ``json.dumps`` and templates' ``tojson`` write it: ", " and ": ",
# nothing else between tokens. The converter's ``space`` allows a space
# anywhere, so a model could write {"a":1} where the template renders
# {"a": 1}, and the next request would decode the call again (its span and
# the template's rendering of it would differ).
_CANONICAL_SPACING = (
    ('"{" space', '"{"'),
    ('"[" space', '"["'),
    ('"," space', '", "'),
    ('":" space', '": "'),
)


# A character of a JSON string. The converter's allows control characters
# (a raw line break), which JSON does not: json.loads refuses them, and a
# small model ran a "string" on past its closing brace to max_tokens. As
# llama.cpp's own converter writes it.
_LOOSE_CHAR = r'char ::= [^"\\] |'
_JSON_CHAR = r'char ::= [^"\\\x7F\x00-\x1F] |'


@cache
def _converter_class() -> Any:
    """llama-cpp-python's schema converter, with integer bounds
    (``integer_ranges``) and canonical spacing.

    Imported here: the converter is plain Python, but its package's
    __init__ loads libllama, which naming a syntax must not need. Typed Any:
    llama-cpp-python leaves the converter unannotated.
    """
    from llama_cpp import llama_grammar

    base: Any = llama_grammar.SchemaConverter

    class Converter(base):  # type: ignore[misc]
        def visit(self, schema: Any, name: str) -> Any:
            if isinstance(schema, dict) and schema.get("type") == "integer":
                low, high = integer_bounds(schema)
                if low is not None or high is not None:
                    if low is not None and high is not None and low > high:
                        raise ValueError(f"no integer lies in [{low}, {high}]")
                    rule = f"{name}-" if name in llama_grammar.RESERVED_NAMES else name
                    return self._add_rule(
                        rule or "root", f"{integer_rule(low, high)} space"
                    )
            return super().visit(schema, name)

        def format_grammar(self) -> str:
            text = str(super().format_grammar())
            for spaced, canonical in _CANONICAL_SPACING:
                text = text.replace(spaced, canonical)
            text = text.replace(_LOOSE_CHAR, _JSON_CHAR)
            return text.replace('space ::= " "?', 'space ::= ""')

    return Converter


_CONVERTER_ERRORS = (AssertionError, KeyError, ValueError, TypeError, RecursionError)


def _resolve(converter: Any, schema: Any, url: str) -> dict[str, Any]:
    """Register a schema's ``$ref``s with the converter; return a copy to visit.

    ``url`` names the schema, so that refs of several schemas stay apart.
    """
    if not isinstance(schema, Mapping):
        raise GrammarError(f"{url}: a JSON schema must be an object, not {schema!r}")
    try:
        resolved: dict[str, Any] = converter.resolve_refs(
            copy.deepcopy(dict(schema)), url
        )
    except _CONVERTER_ERRORS as exc:
        raise GrammarError(
            f"{url}: the JSON schema cannot become a grammar: {exc}"
        ) from exc
    return resolved


def _convert(converter: Any, schema: Any, name: str, url: str) -> str:
    """Convert a resolved schema into the converter's rules; return its rule."""
    try:
        return str(converter.visit(schema, name))
    except _CONVERTER_ERRORS as exc:
        raise GrammarError(
            f"{url}: the JSON schema cannot become a grammar: {exc}"
        ) from exc


def _visit(converter: Any, schema: Any, name: str, url: str) -> str:
    """Resolve and convert one whole schema; return its rule name."""
    return _convert(converter, _resolve(converter, schema, url), name, url)


def _literal(text: str) -> str:
    """Return ``text`` as a GBNF string literal."""
    out = []
    for char in text:
        if char in '"\\':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _sequence(parts: Iterable[str]) -> str:
    joined = " ".join(part for part in parts if part and part != '""')
    return joined or '""'


def _grammar(converter: Any, rules: Mapping[str, str]) -> str:
    own = "\n".join(f"{name} ::= {body}" for name, body in rules.items())
    return f"{own}\n{converter.format_grammar()}\n"


# --- Trigger patterns (ECMAScript, as llama.cpp's std::regex reads them) --------

_REGEX_SPECIAL = set("\\^$.|?*+()[]{}/")
_REGEX_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _regex_escape(text: str) -> str:
    return "".join(
        _REGEX_ESCAPES.get(c, "\\" + c if c in _REGEX_SPECIAL else c) for c in text
    )


def _closure(text: str) -> str:
    """A pattern matching every prefix of ``text`` (the empty one too)."""
    pattern = ""
    for char in reversed(text):
        pattern = f"(?:{_regex_escape(char)}{pattern})?"
    return pattern


def _pattern(starts: Iterable[tuple[str, str]], at_start: bool) -> str:
    """Match a mandatory part, then any prefix of the rest, ending the text.

    ``starts`` holds (mandatory, rest) pairs, one per way the grammar can
    begin; the one group llama.cpp replays from is the whole match.
    """
    alternatives = dict.fromkeys(_regex_escape(m) + _closure(r) for m, r in starts)
    body = "|".join(alternatives)
    if len(alternatives) > 1:
        body = f"(?:{body})"
    # ^...$ makes llama.cpp match the whole text (a reply that is a call
    # from its first character); $ alone, the text's end, anywhere.
    return rf"^\s*({body})$" if at_start else f"({body})$"


# --- JSON and response_format ---------------------------------------------------


def json_constraint(schema: Mapping[str, Any] | None) -> Constraint:
    """Return a grammar for ``response_format``: a JSON object, or one that
    follows ``schema``.

    Parameters
    ----------
    schema
        A JSON schema (``json_schema``), or None for any JSON object
        (``json_object``).

    Returns
    -------
    Constraint
        A grammar applied from the first token.

    Raises
    ------
    GrammarError
        If the schema cannot be converted.
    """
    converter = _converter()
    _visit(
        converter, schema if schema is not None else {"type": "object"}, "", "response"
    )
    return Constraint(converter.format_grammar() + "\n")


# --- Tool calls in a family's own syntax -----------------------------------------


def _chosen(tools: Sequence[Mapping[str, Any]], choice: str) -> list[dict[str, Any]]:
    functions = tool_functions(tools)
    if choice not in ("auto", "required"):
        functions = [f for f in functions if f["name"] == choice]
        if not functions:
            raise GrammarError(
                f"tool_choice names {choice!r}, which is not among the tools"
            )
    if not functions:
        raise GrammarError("there are no function tools to call")
    return functions


def tool_constraint(
    fmt: CallFormat,
    tools: Sequence[Mapping[str, Any]],
    choice: str,
    parallel: bool,
    prefix: str = "",
) -> Constraint:
    """Return the grammar of a reply that may or must call tools in ``fmt``.

    Parameters
    ----------
    fmt
        The family's syntax.
    tools
        The request's OpenAI ``tools``.
    choice
        ``"auto"`` (lazy), ``"required"`` or a function's name.
    parallel
        Whether several calls may follow one another.
    prefix
        Literal text a required reply starts with (ignored for ``"auto"``).

    Returns
    -------
    Constraint
        The grammar, with trigger patterns when lazy.

    Raises
    ------
    GrammarError
        If a schema cannot be converted or ``choice`` names no tool.
    """
    functions = _chosen(tools, choice)
    lazy = choice == "auto"
    converter = _converter()
    rules: dict[str, str] = {}
    bodies = [_body(fmt, converter, index, f) for index, f in enumerate(functions)]
    for index, body in enumerate(bodies):
        rules[f"call-{index}"] = body
    used = {rule for slot, rule in _SLOT_RULES.items() if slot in fmt.pieces}
    for rule in sorted(used):
        rules[rule] = _ID_RULES[rule]
    alternatives = "( " + " | ".join(f"call-{i}" for i in range(len(bodies))) + " )"
    close = _literal(fmt.call_close)
    rules["call"] = _sequence([_literal(fmt.call_open), alternatives, close])
    # A lazy grammar starts where its trigger matched: at the opening's first
    # visible character.
    opening = fmt.section_start + fmt.call_open
    first = _literal(opening.lstrip() if lazy else opening)
    more = f"( {_literal(fmt.separator)} call )*" if parallel else ""
    openers = ""
    if fmt.at_start and fmt.openers:
        openers = "( " + " | ".join(_literal(o) for o in fmt.openers) + " )?"
    head = "" if lazy else _literal(prefix)
    root = [head, openers, first, alternatives, close, more, _literal(fmt.section_end)]
    rules = {"root": _sequence(root), **rules}
    triggers = _triggers(fmt, functions) if lazy else ()
    return Constraint(_grammar(converter, rules), triggers)


def _body(
    fmt: CallFormat, converter: Any, index: int, function: Mapping[str, Any]
) -> str:
    name = str(function["name"])
    url = f"tools[{index}] ({name})"
    if fmt.body == "xml" and fmt.xml is not None:
        return _xml_body(fmt, converter, index, function, url)
    parts = []
    for piece in fmt.pieces:
        if isinstance(piece, str):
            parts.append(_literal(piece))
        elif piece == NAME:
            # Inside a JSON string where the body is JSON.
            written = (
                json.dumps(name, ensure_ascii=False)[1:-1]
                if fmt.body == "json"
                else name
            )
            parts.append(_literal(written))
        elif piece == ARGUMENTS:
            if fmt.arguments_as_string:
                # JSON text inside a JSON string: GBNF cannot escape a schema's
                # grammar, so any string; the parse still checks it is JSON.
                parts.append(
                    _visit(converter, {"type": "string"}, f"args-text-{index}", url)
                )
            else:
                parts.append(
                    _visit(converter, function["parameters"], f"args-{index}", url)
                )
        else:
            parts.append(_SLOT_RULES[piece])
    return _sequence(parts)


def _xml_body(
    fmt: CallFormat, converter: Any, index: int, function: Mapping[str, Any], url: str
) -> str:
    assert fmt.xml is not None
    xml = fmt.xml
    # Resolved whole: a parameter's $ref points into the tool's schema.
    schema = _resolve(converter, function["parameters"], url)
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parts = [_literal(str(function["name"]) + xml.name_suffix)]
    for key, value_schema in properties.items():
        closing = xml.value_suffix.strip()
        value = _xml_value(converter, value_schema, f"xml-{index}-{key}", url, closing)
        tag = _sequence(
            [
                _literal(xml.param_open + key + xml.key_suffix),
                value,
                _literal(xml.value_suffix),
            ]
        )
        parts.append(tag if key in required else f"( {tag} )?")
    return _sequence(parts)


def _xml_value(converter: Any, schema: Any, name: str, url: str, closing: str) -> str:
    """A parameter's raw value: text for strings, JSON for everything else."""
    if not isinstance(schema, Mapping):
        raise GrammarError(f"{url}: parameter {name!r} has no schema object")
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        return "( " + " | ".join(_literal(v) for v in schema["enum"]) + " )"
    if schema.get("type") != "string":
        return _convert(converter, schema, name, url)
    low, high = schema.get("minLength", 0), schema.get("maxLength")
    if high is not None:
        # Bounded: counted in characters, so without the closing tag's "<".
        return f"[^<]{{{low},{high}}}"
    if low:
        return f"[^<]{{{low},}}"
    return _text_without(closing)


def _text_without(closing: str) -> str:
    """Any text that does not contain ``closing`` (code holds "<" and "</").

    Each alternative is a proper prefix of ``closing`` and a character that
    does not continue it (nor starts it again, so that "<</x>" cannot hide
    the tag "</x>").
    """
    if not closing:
        return "[^\\x00]*"
    first = _class_char(closing[0])
    alternatives = []
    for k, char in enumerate(closing):
        excluded = _class_char(char) + (first if k and char != closing[0] else "")
        alternatives.append(_sequence([_literal(closing[:k]), f"[^{excluded}]"]))
    return "( " + " | ".join(alternatives) + " )*"


def _class_char(char: str) -> str:
    return "\\" + char if char in "\\]^-[" else _literal(char)[1:-1]


def _triggers(
    fmt: CallFormat, functions: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """Patterns that start the lazy grammar, each a prefix of what it accepts."""
    starts: list[tuple[str, str]] = []
    for function in functions:
        name = str(function["name"])
        if fmt.body == "json":
            name = json.dumps(name, ensure_ascii=False)[1:-1]
        # The text every call of this tool starts with, up to its arguments.
        lead = ""
        for piece in fmt.pieces:
            if piece == NAME:
                lead += name + (fmt.xml.name_suffix if fmt.xml else "")
            elif isinstance(piece, str):
                lead += piece
            else:
                break
        if fmt.at_start:
            # Enough to tell a call from an answer: up to the name's end,
            # and the name itself where the reply starts with it.
            cut = lead.find(name)
            mandatory = lead[: cut + len(name)] if cut == 0 else lead[:cut]
            starts.append((mandatory, lead[len(mandatory) :]))
        else:
            opening = (fmt.section_start + fmt.call_open).lstrip()
            marker = opening_marker(opening)
            starts.append((marker, opening[len(marker) :] + lead))
    patterns = [_pattern(starts, fmt.at_start)]
    for opener in fmt.openers if fmt.at_start else ():
        patterns.append(_pattern([(opener, m + r) for m, r in starts], at_start=True))
    return tuple(patterns)


# --- The generic format ---------------------------------------------------------


def generic_constraint(
    tools: Sequence[Mapping[str, Any]],
    choice: str,
    parallel: bool,
    prefix: str = "",
) -> Constraint:
    """Return the grammar of llama.cpp's generic format for ``tools``.

    Parameters
    ----------
    tools, choice, parallel, prefix
        As for :func:`tool_constraint`.

    Returns
    -------
    Constraint
        ``{"tool_calls": [...]}`` (parallel) or ``{"tool_call": {...}}``;
        lazy for ``"auto"``, triggered by the object's first key.

    Raises
    ------
    GrammarError
        If a schema cannot be converted or ``choice`` names no tool.
    """
    functions = _chosen(tools, choice)
    converter = _converter()
    schemas: list[dict[str, Any]] = []
    identified: list[dict[str, Any]] = []
    for index, function in enumerate(functions):
        url = f"tools[{index}] ({function['name']})"
        # Refs resolve against each tool's own schema, before it is nested.
        parameters = _resolve(converter, function["parameters"], url)
        properties: dict[str, Any] = {
            "name": {"type": "string", "const": function["name"]},
            "arguments": parameters,
        }
        schemas.append(
            {
                "type": "object",
                "properties": properties,
                "required": ["name", "arguments"],
            }
        )
        # Among several calls, each names itself with an id the model writes.
        identified.append(
            {
                "type": "object",
                "properties": {
                    **properties,
                    "id": {"type": "string", "pattern": "^[a-zA-Z0-9]{9}$"},
                },
                "required": ["name", "arguments", "id"],
            }
        )
    one = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    with_id = identified[0] if len(identified) == 1 else {"anyOf": identified}
    single = {
        "type": "object",
        "properties": {"tool_call": one},
        "required": ["tool_call"],
    }
    # One call is always {"tool_call": ...}, several {"tool_calls": [...]}:
    # as ChatTemplate renders a reply's calls back (``_generic_calls``), so
    # that what the model wrote is what the next request's context reads.
    schema: dict[str, Any] = single
    if parallel:
        several = {"type": "array", "items": with_id, "minItems": 2}
        schema = {
            "anyOf": [
                single,
                {
                    "type": "object",
                    "properties": {"tool_calls": several},
                    "required": ["tool_calls"],
                },
            ]
        }
    _convert(converter, schema, "calls", "tools")
    lazy = choice == "auto"
    head = "" if lazy else _literal(prefix)
    rules = {"root": _sequence([head, "calls"])}
    triggers: tuple[str, ...] = ()
    if lazy:
        # Spaced canonically: {"tool_call": {  or  {"tool_calls": [
        plural = "s?" if parallel else ""
        opened = "[\\[{]" if parallel else "\\{"
        triggers = (rf'^\s*(\{{"tool_call{plural}(?:"(?::(?: {opened}?)?)?)?)$',)
    return Constraint(_grammar(converter, rules), triggers)
