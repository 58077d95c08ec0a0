"""Learn how a chat template writes tool calls, by rendering probes and diffing.

One mechanism for every family, after llama.cpp's differential analysis
(``common/chat-diff-analyzer.cpp``): render one conversation three times
through the template, the assistant's turn being plain text (A), one call
(B1) and two calls (B2), with the same ``tools``. Then:

1. **The call section.** The text where B1 differs from A, cut at marker
   boundaries (``<|...|>``, ``[TOOL_CALLS]``: a diff never splits one), is
   what the model writes to call. A leading empty reasoning block (Command
   R7B's ``<|START_THINKING|><|END_THINKING|>``) is the turn's, not the
   call's, and an end-of-generation marker inside it (gpt-oss' ``<|call|>``)
   ends it: the sampler stops there, so no grammar may have to write it.
2. **One call's body.** The probe's function name, argument names and
   values and call id are unlikely strings, found by search: a JSON object
   holding the name and the arguments is a ``json`` body (its key paths are
   learned, so Llama's ``"parameters"`` or Command R7B's ``"tool_name"``
   need no code); a name followed by JSON arguments is ``tagged``, with the
   literal text between them (``[ARGS]``, DeepSeek's tool separator);
   argument names as raw text with raw values is ``xml``, its tags learned
   from the text between name, keys and values.
3. **Around and between calls.** B2 repeats the first call, then some text,
   then the second: that text is the end of a call, the separator and the
   start of the next. What both the text before the first call and this text
   end with opens every call; the rest before the first call opens the
   section (Mistral Nemo's ``[TOOL_CALLS][``), and likewise for the ends.
   A template that cannot write two calls (Llama 3.x refuses; gpt-oss writes
   one per message) gets single calls.

A template that does not write calls at all, or whose calls cannot be
learned, gets llama.cpp's generic format (:mod:`app.backend.tool_calls`), and
:class:`~app.backend.chat_template.ChatTemplate` describes the tools and the
format in the system prompt. Special cases, each for a template that cannot
tell its syntax: see :func:`_special_case`.

No Qt here, and no llama_cpp at import: :mod:`app.backend.grammars` loads
llama-cpp-python's schema converter when a grammar is first asked for.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.backend import grammars
from app.backend.chat_template import ChatTemplate, TemplateError
from app.backend.tool_calls import (
    ARGUMENTS,
    CALL_ID,
    GENERATED_ID,
    MARKER,
    NAME,
    CallFormat,
    Constraint,
    ParsedReply,
    Piece,
    Slot,
    XmlParameters,
    opening_marker,
    parse_calls,
    parse_generic,
)

__all__ = ["DEFAULT_END_MARKERS", "GENERIC", "ToolSyntax", "learn_tool_syntax"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolSyntax:
    """How a model writes tool calls: read them, and constrain sampling to them.

    Attributes
    ----------
    kind : str
        ``"native"`` (the template's own syntax) or ``"generic"``.
    label : str
        A short description for logs, e.g. ``"<tool_call> JSON {name,
        arguments}"``.
    trigger : str
        Literal text that opens calls; streaming holds back text that could
        be its start. Empty where the reply itself is the call from its
        first character (a generation prompt that opened the calls).
    format : CallFormat or None
        The learned syntax (None for the generic format).
    openers : tuple of str
        Every literal that may open calls, ``trigger`` first (Llama 3.x:
        ``{`` and ``<|python_tag|>``).
    """

    kind: str
    label: str
    trigger: str
    format: CallFormat | None = None
    openers: tuple[str, ...] = field(default=())

    @property
    def parallel(self) -> bool:
        """Whether the syntax writes several calls in one reply."""
        return True if self.format is None else self.format.parallel

    def parse(
        self, text: str, tools: Sequence[Mapping[str, Any]] | None = None
    ) -> ParsedReply:
        """Read the calls in a generated reply.

        Parameters
        ----------
        text
            The reply as generated, markers included: all of it, or the part
            from the trigger on. Pass it before splitting reasoning off:
            gpt-oss writes each call as a message of its own.
        tools
            The request's OpenAI ``tools``, if known (see
            :func:`~app.backend.tool_calls.parse_calls`).

        Returns
        -------
        ParsedReply
            The calls, and the text without their markup. Never raises: a
            call that does not parse stays in the content.
        """
        if self.format is None:
            return parse_generic(text, tools)
        return parse_calls(self.format, text, tools)

    def constraint(
        self,
        tools: Sequence[Mapping[str, Any]],
        choice: str = "auto",
        parallel: bool = True,
        prefix: str = "",
    ) -> Constraint:
        """Return the grammar a reply that may or must call ``tools`` samples under.

        Parameters
        ----------
        tools
            The request's OpenAI ``tools``.
        choice
            ``"auto"`` (a lazy grammar, triggered by the calls' opening),
            ``"required"`` (the reply is calls, from its first token) or a
            function's name (the reply is calls of it).
        parallel
            Whether the reply may make several calls (also needs a syntax
            that writes several).
        prefix
            Literal text a required reply writes before its calls (e.g.
            ``"</think>"`` where the generation prompt left a thinking block
            open). Ignored for ``"auto"``.

        Returns
        -------
        Constraint
            GBNF, and the trigger patterns of a lazy grammar.

        Raises
        ------
        GrammarError
            If a tool's schema cannot be converted, or ``choice`` names no tool.
        """
        if self.format is None:
            return grammars.generic_constraint(tools, choice, parallel, prefix)
        return grammars.tool_constraint(
            self.format,
            tools,
            choice,
            parallel and self.format.parallel,
            prefix,
        )


GENERIC = ToolSyntax(
    "generic",
    'generic JSON {"tool_calls": [...]} / {"response": ...}',
    "{",
    openers=("{",),
)


# --- The probes ---------------------------------------------------------------

# Unlikely strings, found by search in the renders (llama.cpp's own choice of
# needles). Ids are 9 letters and digits: Mistral's templates refuse others.
_FUN_FIRST = "FFF_FIRST_FUN_F"
_FUN_SECOND = "SSS_SECOND_FUN_S"
_ARG_FIRST = "AA_ARG_FST_AA"
_ARG_SECOND = "BB_ARG_SND_BB"
_VALUE_FIRST = "XXXX_VAL_X"
_VALUE_SECOND = "YYYY_VAL_Y"
_ID_FIRST = "call00001"
_ID_SECOND = "call00002"
_USER = "U_USER_MSG Hello END_U"
_REPLY = "A_ASST_MSG I can help END_A"

_PARAMETERS = {
    "type": "object",
    "properties": {
        _ARG_FIRST: {"type": "string", "description": "First argument"},
        _ARG_SECOND: {"type": "string", "description": "Second argument"},
    },
    "required": [],
}
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": "Test function",
            "parameters": _PARAMETERS,
        },
    }
    for name in (_FUN_FIRST, _FUN_SECOND)
]


def _probe_call(name: str, call_id: str) -> dict[str, Any]:
    # OpenAI's shape: arguments as JSON text; the template's polyfill gives
    # them the shape it reads.
    arguments = {_ARG_FIRST: _VALUE_FIRST, _ARG_SECOND: _VALUE_SECOND}
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


# Whether a marker is an end-of-generation token is a fact of the vocabulary,
# which a template does not show; these are the ones the reference templates
# end a call turn with (the caller may pass the model's own).
DEFAULT_END_MARKERS = (
    "<|call|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",  # DeepSeek's, full-width bars
    "</s>",
    "<|END_OF_TURN_TOKEN|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|endoftext|>",
)

# An empty reasoning block at the start of a rendered turn.
_EMPTY_REASONING = re.compile(
    r"^\s*(?:<[^<>\s]*think[^<>\s]*>|\[THINK\])\s*"
    r"(?:<[^<>\s]*think[^<>\s]*>|\[/THINK\])\s*",
    re.IGNORECASE,
)


class _Unlearnable(Exception):
    """The renders do not show a syntax this module can describe."""


def learn_tool_syntax(
    template: ChatTemplate, end_markers: Collection[str] = ()
) -> ToolSyntax:
    """Learn how ``template`` writes tool calls.

    Parameters
    ----------
    template
        The model's chat template.
    end_markers
        The texts of the model's end-of-generation tokens, if known; the
        template's ``eos_token`` and :data:`DEFAULT_END_MARKERS` are used too.

    Returns
    -------
    ToolSyntax
        The template's own syntax, or :data:`GENERIC` where it writes no
        calls or they cannot be learned (the reason is logged).
    """
    special = _special_case(template)
    if special is not None:
        return special
    if not template.supports_tool_calls:
        return GENERIC
    ends = {*DEFAULT_END_MARKERS, *end_markers}
    if template.eos_token:
        ends.add(template.eos_token)
    try:
        return _learn(template, ends)
    except _Unlearnable as exc:
        log.info("tool calls fall back to the generic format: %s", exc)
        return replace(GENERIC, label=f"{GENERIC.label} ({exc})")


def _special_case(template: ChatTemplate) -> ToolSyntax | None:
    """Syntaxes a template cannot tell, written by hand."""
    source = template.source
    if "<|tool_call|>" in source and not template.supports_tool_calls:
        # Granite 3.x describes the syntax in its system prompt ("respond only
        # with <|tool_call|> followed by a JSON list") but renders an earlier
        # reply's calls nowhere, so no render shows it.
        fmt = CallFormat(
            "json",
            ('{"name": "', NAME, '", "arguments": ', ARGUMENTS, "}"),
            section_start="<|tool_call|>[",
            section_end="]",
            separator=", ",
            parallel=True,
            name_path=("name",),
            arguments_path=("arguments",),
        )
        return ToolSyntax(
            "native",
            "<|tool_call|> JSON list {name, arguments} (Granite, hand-written)",
            "<|tool_call|>",
            fmt,
            openers=("<|tool_call|>",),
        )
    return None


# --- Diffing renders ------------------------------------------------------------


def _render(template: ChatTemplate, reply: Mapping[str, Any]) -> str | None:
    messages = [{"role": "user", "content": _USER}, dict(reply)]
    try:
        return template.render(messages, tools=_TOOLS)
    except TemplateError:
        return None


# A diff is never cut inside a marker.
def _snap_back(text: str, at: int) -> int:
    for found in MARKER.finditer(text):
        if found.start() < at < found.end():
            return found.start()
    return at


def _snap_forward(text: str, at: int) -> int:
    for found in MARKER.finditer(text):
        if found.start() < at < found.end():
            return found.end()
    return at


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _common_suffix(a: str, b: str) -> int:
    return _common_prefix(a[::-1], b[::-1])


def _diff(a: str, b: str) -> tuple[int, int]:
    """Return (prefix, suffix) lengths common to a and b, at marker boundaries
    of ``b``; the prefix never overlaps the suffix."""
    prefix = _snap_back(b, _common_prefix(a, b))
    limit = min(len(a), len(b)) - prefix
    suffix = min(_common_suffix(a, b), limit)
    suffix = len(b) - _snap_forward(b, len(b) - suffix)
    return prefix, suffix


def _section(a: str, b: str, ends: Collection[str]) -> tuple[str, str]:
    """Return B's call section, and the end marker that cut it ("" if none)."""
    prefix, suffix = _diff(a, b)
    section = b[prefix : len(b) - suffix]
    empty = _EMPTY_REASONING.match(section)
    if empty:
        section = section[empty.end() :]
    cut, stop = len(section), ""
    for marker in ends:
        at = section.find(marker) if marker else -1
        if 0 <= at < cut:
            cut, stop = at, marker
    return section[:cut], stop


# --- Reading one call ----------------------------------------------------------


@dataclass
class _Body:
    kind: str
    start: int  # where the body starts in the section
    end: int
    slots: list[tuple[int, int, Slot]]  # spans in the section, in order
    name_path: tuple[str, ...] = ()
    arguments_path: tuple[str, ...] = ()
    id_path: tuple[str, ...] = ()
    arguments_as_string: bool = False
    xml: XmlParameters | None = None


_DECODER = json.JSONDecoder(strict=False)


def _json_values(text: str, start: int = 0) -> list[tuple[int, int, Any]]:
    """Every JSON object or array that decodes at some ``{``/``[``, in order."""
    found = []
    for at, char in enumerate(text):
        if at < start or char not in "{[":
            continue
        try:
            value, end = _DECODER.raw_decode(text, at)
        except json.JSONDecodeError:
            continue
        found.append((at, end, value))
    return found


def _path_to(
    value: Any, test: Any, path: tuple[str, ...] = ()
) -> tuple[str, ...] | None:
    if test(value):
        return path
    if isinstance(value, Mapping):
        for key, item in value.items():
            found = _path_to(item, test, (*path, str(key)))
            if found is not None:
                return found
    return None


def _holds_arguments(value: Any) -> bool:
    if isinstance(value, Mapping):
        return value.get(_ARG_FIRST) == _VALUE_FIRST
    if isinstance(value, str) and _ARG_FIRST in value:
        try:
            decoded = _DECODER.decode(value)
        except json.JSONDecodeError:
            return False
        return _holds_arguments(decoded) if isinstance(decoded, Mapping) else False
    return False


def _arguments_span(section: str, start: int) -> tuple[int, int] | None:
    # The rendered arguments: the first JSON value from ``start`` that holds
    # them (an object, or a string of JSON for templates that quote them).
    for at in range(start, len(section)):
        if section[at] not in '{"':
            continue
        try:
            value, end = _DECODER.raw_decode(section, at)
        except json.JSONDecodeError:
            continue
        if _holds_arguments(value):
            return at, end
    return None


def _read_body(section: str, name: str, call_id: str, start: int = 0) -> _Body:
    """Find the first call in ``section`` from ``start``, the function ``name``."""
    name_at = section.find(name, start)
    if name_at < 0:
        raise _Unlearnable(f"the render does not show the function name {name!r}")
    quoted = f'"{name}"'
    for at, end, value in _json_values(section, start):
        if at > name_at or end < name_at:
            continue
        if isinstance(value, list):
            continue  # an array of calls: its first object is the call
        name_path = _path_to(value, lambda v: v == name)
        arguments_path = _path_to(value, _holds_arguments)
        if name_path is None or arguments_path is None:
            continue
        return _json_body(
            section, at, end, value, quoted, call_id, name_path, arguments_path
        )
    args = _arguments_span(section, name_at + len(name))
    if args is not None:
        slots = [(name_at, name_at + len(name), NAME), (*args, ARGUMENTS)]
        id_at = section.find(call_id, start)
        if 0 <= id_at < args[0]:
            slots.append((id_at, id_at + len(call_id), CALL_ID))
        slots.sort()
        quoted_args = section[args[0]] == '"'
        return _Body(
            "tagged", slots[0][0], slots[-1][1], slots, arguments_as_string=quoted_args
        )
    return _xml_body(section, name_at, name)


def _json_body(
    section: str,
    at: int,
    end: int,
    value: Mapping[str, Any],
    quoted_name: str,
    call_id: str,
    name_path: tuple[str, ...],
    arguments_path: tuple[str, ...],
) -> _Body:
    name_at = section.find(quoted_name, at) + 1
    slots = [(name_at, name_at + len(quoted_name) - 2, NAME)]
    args = _arguments_span(section, at + 1)
    if args is None or args[1] > end:
        raise _Unlearnable("the call's arguments are not where its JSON says")
    slots.append((*args, ARGUMENTS))
    id_path = _path_to(value, lambda v: v == call_id) or ()
    if id_path:
        id_at = section.find(f'"{call_id}"', at) + 1
        slots.append((id_at, id_at + len(call_id), CALL_ID))
    # Id-like fields the template fills itself (Command R7B numbers calls).
    for key, item in value.items():
        named_id = str(key).lower() == "id" or str(key).lower().endswith("_id")
        numbered = isinstance(item, str | int) and not isinstance(item, bool)
        if named_id and numbered and (key,) != id_path:
            found = re.compile(rf'"{re.escape(str(key))}"\s*:\s*"?').search(
                section, at, end
            )
            if found:
                text = str(item)
                slots.append((found.end(), found.end() + len(text), GENERATED_ID))
    slots.sort()
    raw_arguments = _get_path(value, arguments_path)
    return _Body(
        "json",
        at,
        end,
        slots,
        name_path,
        arguments_path,
        id_path,
        arguments_as_string=isinstance(raw_arguments, str),
    )


def _get_path(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _xml_body(section: str, name_at: int, name: str) -> _Body:
    """Learn parameter tags from the order name, key 1, value 1, key 2, value 2."""
    spots = [name_at]
    for needle in (_ARG_FIRST, _VALUE_FIRST, _ARG_SECOND, _VALUE_SECOND):
        at = section.find(needle, spots[-1])
        if at < 0:
            raise _Unlearnable("neither JSON arguments nor tagged parameters found")
        spots.append(at)
    name_end = name_at + len(name)
    key1, value1, key2, value2 = spots[1:]
    before_key1 = section[name_end:key1]
    between = section[value1 + len(_VALUE_FIRST) : key2]
    common = _common_suffix(before_key1, between)
    param_open = between[_snap_forward(between, len(between) - common) :]
    if not param_open.strip():
        raise _Unlearnable("parameters have no opening tag")
    xml = XmlParameters(
        name_suffix=before_key1[: len(before_key1) - len(param_open)],
        param_open=param_open,
        key_suffix=section[key1 + len(_ARG_FIRST) : value1],
        value_suffix=between[: len(between) - len(param_open)],
    )
    after = value2 + len(_VALUE_SECOND)
    if not section.startswith(xml.value_suffix, after) or not xml.key_suffix.strip():
        raise _Unlearnable("parameter tags are not written alike")
    return _Body(
        "xml",
        name_at,
        after + len(xml.value_suffix),
        [(name_at, name_end, NAME)],
        xml=xml,
    )


# --- Learning ------------------------------------------------------------------


def _learn(template: ChatTemplate, ends: Collection[str]) -> ToolSyntax:
    text_reply = {"role": "assistant", "content": _REPLY}
    a = _render(template, text_reply)
    one = _render(template, _call_reply([_probe_call(_FUN_FIRST, _ID_FIRST)]))
    if a is None or one is None:
        raise _Unlearnable("the template refuses the probe conversation")
    section, stop = _section(a, one, ends)
    body = _read_body(section, _FUN_FIRST, _ID_FIRST)
    head, tail = section[: body.start], section[body.end :]
    pieces = _pieces(section, body)

    two = _render(
        template,
        _call_reply(
            [_probe_call(_FUN_FIRST, _ID_FIRST), _probe_call(_FUN_SECOND, _ID_SECOND)],
        ),
    )
    layout = _layout(a, two, ends, section, body, head) if two else None
    if layout is None:
        fmt = CallFormat(body.kind, pieces, section_start=head, section_end=tail)
    else:
        section_start, call_open, call_close, separator, section_end = layout
        fmt = CallFormat(
            body.kind,
            pieces,
            section_start=section_start,
            section_end=section_end,
            call_open=call_open,
            call_close=call_close,
            separator=separator,
            parallel=True,
        )
    fmt = replace(
        fmt,
        name_path=body.name_path,
        arguments_path=body.arguments_path,
        id_path=body.id_path,
        arguments_as_string=body.arguments_as_string,
        xml=body.xml,
        stops=(stop,) if stop else (),
    )
    return _syntax(_family_details(template, fmt))


def _call_reply(calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": calls}


def _pieces(section: str, body: _Body) -> tuple[Piece, ...]:
    pieces: list[Piece] = []
    at = body.start
    for start, end, slot in body.slots:
        if start > at:
            pieces.append(section[at:start])
        pieces.append(slot)
        at = end
    if body.end > at and body.kind != "xml":
        pieces.append(section[at : body.end])
    return tuple(pieces)


def _layout(
    a: str,
    two: str,
    ends: Collection[str],
    section: str,
    body: _Body,
    head: str,
) -> tuple[str, str, str, str, str] | None:
    """Split the text around calls into section and per-call parts, from B2."""
    section2, _stop = _section(a, two, ends)
    first = section[: body.end]
    if not section2.startswith(first) or _FUN_SECOND not in section2:
        return None  # one call per reply (gpt-oss), or none shown twice
    try:
        second = _read_body(section2, _FUN_SECOND, _ID_SECOND, len(first))
    except _Unlearnable:
        return None
    mid = section2[len(first) : second.start]
    tail, tail2 = section[body.end :], section2[second.end :]
    if not tail2.startswith(tail):
        return None
    # DeepSeek R1's Llama distill closes the section only after a second
    # call: the longer ending is the section's.
    tail = tail2
    call_open = head[_snap_forward(head, len(head) - _common_suffix(head, mid)) :]
    rest = mid[: len(mid) - len(call_open)]
    call_close = tail[: _snap_back(tail, _common_prefix(tail, rest))]
    separator = rest[len(call_close) :]
    return (
        head[: len(head) - len(call_open)],
        call_open,
        call_close,
        separator,
        tail[len(call_close) :],
    )


def _family_details(template: ChatTemplate, fmt: CallFormat) -> CallFormat:
    """What the renders cannot show of a family that they otherwise describe."""
    source = template.source
    if fmt.section_start.strip() == "" and fmt.call_open.strip() == "":
        # Llama 3.x writes a call as the bare reply; its models also open one
        # with <|python_tag|>, which the template shows only for built-in tools.
        openers = ("<|python_tag|>",) if "<|python_tag|>" in source else ()
        fmt = replace(
            fmt, at_start=True, openers=openers, section_start="", call_open=""
        )
    if "to=functions." in fmt.opening:
        # gpt-oss models write a call's header in two orders, "to=" before or
        # after the channel, with an optional <|constrain|>json; read both.
        fmt = replace(fmt, normalize=_harmony_headers)
    return fmt


_HARMONY_HEADER = re.compile(
    r"(?:<\|start\|>assistant)?"
    r"((?:(?!<\|message\|>|<\|start\|>).){0,256}?)"
    r"to=functions\.([\w.\-]+)"
    r"(?:(?!<\|message\|>|<\|start\|>).){0,256}?<\|message\|>",
    re.DOTALL,
)


def _harmony_headers(text: str) -> str:
    def canonical(found: re.Match[str]) -> str:
        return f" to=functions.{found.group(2)}<|channel|>commentary json<|message|>"

    return _HARMONY_HEADER.sub(canonical, text)


def _syntax(fmt: CallFormat) -> ToolSyntax:
    if fmt.at_start:
        # No marker: a reply that is a call starts with "{" (JSON), or with
        # the name itself (Functionary v3.2), which streaming cannot tell.
        trigger = "{" if fmt.body == "json" else ""
        openers = (trigger, *fmt.openers) if trigger else fmt.openers
    else:
        trigger = opening_marker(fmt.opening)
        openers = (trigger,)
    return ToolSyntax("native", _label(fmt), trigger, fmt, openers)


def _label(fmt: CallFormat) -> str:
    names = {NAME: "name", ARGUMENTS: "JSON", CALL_ID: "id", GENERATED_ID: "n"}
    if fmt.body == "json":
        keys = [fmt.name_path[-1], fmt.arguments_path[-1]]
        body = "JSON {" + ", ".join(keys) + "}"
    elif fmt.body == "xml":
        body = "name + XML parameters"
    else:
        body = "".join(
            p.strip() if isinstance(p, str) else names[p] for p in fmt.pieces
        )
    opening = fmt.opening.strip() or ("bare" if fmt.at_start else "")
    return " ".join(f"{opening} {body}".split())
