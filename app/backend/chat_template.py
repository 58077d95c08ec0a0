"""Render a model's Jinja chat template the way llama.cpp's ``--jinja`` path does.

A GGUF's ``tokenizer.chat_template`` is written for Hugging Face transformers,
which renders it with Jinja2's ``ImmutableSandboxedEnvironment``. llama.cpp
renders the same source with its own engine and, before rendering, adapts the
messages to what the template can take. To make the context of a reply equal
to what llama.cpp would build (docs/DESIGN.md, invariant 6) we do the same in
three steps:

1. **Environment**: HF's (trim/lstrip blocks, ``{% break %}``/``{% continue %}``,
   the ``{% generation %}`` block kept as plain content, ``raise_exception``,
   ``strftime_now``, a ``tojson`` with HF arguments) plus llama.cpp's
   leniencies where its runtime accepts what Python's Jinja refuses:
   ``"text" + none`` or ``+ undefined`` concatenate as ``""``, an item of
   undefined is undefined, and ``{{ none }}`` prints nothing.
2. **Capabilities**, found once by rendering probe conversations, as llama.cpp's
   ``common/jinja/caps.cpp`` does: does the template read a system message's
   content, does it want content as a string or as typed parts, does it refuse
   consecutive turns of one role.
3. **Polyfills** on each render (``common_chat_templates_apply_jinja`` in
   llama.cpp's ``common/chat.cpp``): messages get the fields llama.cpp always
   sends; content is converted to the shape the template reads; ``developer``
   becomes ``system``; a system prompt the template cannot place is merged into
   the next message with a newline; the few model families llama.cpp special
   cases (GPT-OSS, LFM2, Ministral 3, StepFun) get the same message rewrites;
   ``enable_thinking``, ``datetime`` and ``date_string`` are defined.
4. **Tool use**, probed on first need (most conversations call no tool):
   whether the template describes ``tools``, writes an assistant's
   ``tool_calls``, shows a ``tool`` message, and reads arguments as an object.
   A call's arguments get the shape the template reads (an object, or JSON
   text); what a template lacks is polyfilled as minja's ``chat-template.hpp``
   did for llama.cpp: tools described in the system prompt with the generic
   format's instruction, calls written as that format's JSON, tool results
   as user messages holding ``{"tool_response": ...}``.

No Qt and no llama_cpp here: this module only needs Jinja2.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplate", "TemplateError"]


class TemplateError(ValueError):
    """A chat template does not parse, or refuses or fails to render."""


# --- The Jinja environment ---------------------------------------------------


class _GenerationBlock(jinja2.ext.Extension):
    """Accept HF's ``{% generation %}...{% endgeneration %}`` as plain content.

    transformers uses the block to mark assistant tokens for training masks;
    llama.cpp's parser drops the two tags and keeps the body in place, so a
    ``{% set %}`` inside it still reaches the enclosing scope. We do the same.
    """

    tags = {"generation"}  # noqa: RUF012 - Jinja declares it a plain set

    def parse(self, parser: Any) -> list[jinja2.nodes.Node]:
        """Return the block's body in place of the block."""
        next(parser.stream)
        body: list[jinja2.nodes.Node] = parser.parse_statements(
            ("name:endgeneration",), drop_needle=True
        )
        return body


def _raise_exception(message: str) -> None:
    raise TemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # HF's filter, not Jinja's: Jinja's escapes HTML characters (<, >, &, ')
    # and sorts keys, which would change tool schemas and special tokens.
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
    )


class _Environment(ImmutableSandboxedEnvironment):
    """HF's sandbox, with llama.cpp's string concatenation of none/undefined."""

    # Only ``+`` is routed through call_binop; every other operator keeps
    # Jinja's compiled fast path.
    intercepted_binops = frozenset({"+"})

    def call_binop(
        self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any
    ) -> Any:
        r"""Concatenate ``str + none/undefined`` as llama.cpp's runtime does.

        Templates such as firefunction-v2 append variables that only some
        callers define (``"\n" + functions``); llama.cpp treats the missing
        side as an empty string, so the template renders there.
        """
        if operator == "+":
            if isinstance(left, str) and _is_nothing(right):
                return left
            if isinstance(right, str) and _is_nothing(left):
                return right
        return super().call_binop(context, operator, left, right)


def _is_nothing(value: Any) -> bool:
    return value is None or isinstance(value, jinja2.Undefined)


def _printable(value: Any) -> Any:
    """Return what ``{{ value }}`` prints, by llama.cpp's rules.

    llama.cpp prints none as nothing (Python: ``None``), a list as its items
    printed one after the other (Python: its repr) and a mapping as nothing.
    """
    if isinstance(value, (list, tuple)):
        return "".join(str(_printable(item)) for item in value)
    if value is None or isinstance(value, (dict, jinja2.Undefined)):
        return ""
    return value


def _make_environment() -> _Environment:
    env = _Environment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[jinja2.ext.loopcontrols, _GenerationBlock],
        finalize=_printable,
        # llama.cpp reads an attribute or item of undefined as undefined;
        # gemma-2 tests ``messages[0]['role']`` even when there are none.
        undefined=jinja2.ChainableUndefined,
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


# Source fixes llama.cpp applies before parsing (common_chat_templates_init):
# each guard rejects history llama.cpp itself produces.
_SOURCE_PATCHES: tuple[tuple[str, str, str], ...] = (
    (
        # GPT-OSS refuses channel markers inside message content.
        "<|channel|>",
        '{%- if "<|channel|>analysis<|message|>" in message.content or '
        '"<|channel|>final<|message|>" in message.content %}',
        "{%- if false %}",
    ),
    (
        # Mistral templates refuse assistant turns with empty content.
        "[TOOL_CALLS]",
        "{%- if (message['content'] is none or message['content'] == '' or "
        "message['content']|length == 0) and (message['tool_calls'] is not defined or "
        "message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
        "{%- if false %}",
    ),
)


def _patch_source(source: str) -> str:
    for marker, old, new in _SOURCE_PATCHES:
        if marker in source:
            source = source.replace(old, new)
    return source


# --- Capability probes -------------------------------------------------------


class _Tracked(dict):  # type: ignore[type-arg]
    """A message that records which of its keys the template read.

    llama.cpp's probe marks a value "used" when the template reaches it by
    subscript, attribute, iteration of its items, or ``tojson``; these are the
    dict entry points Jinja uses for the same operations.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._keys_read: set[Any] = set()

    def __getitem__(self, key: Any) -> Any:
        self._keys_read.add(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        """Record the read, then behave as ``dict.get``."""
        self._keys_read.add(key)
        return super().get(key, default)

    def items(self) -> Any:
        """Record every key as read, then behave as ``dict.items``."""
        self._keys_read.update(self.keys())
        return super().items()

    def values(self) -> Any:
        """Record every key as read, then behave as ``dict.values``."""
        self._keys_read.update(self.keys())
        return super().values()


_PROBE_MARKER = "STRING_MARKER"


# Model families whose messages llama.cpp rewrites before rendering
# (common_chat_try_specialized_template and the parsers/ folder).
def _is_gpt_oss(source: str) -> bool:
    return "<|channel|>" in source


def _is_lfm2(source: str) -> bool:
    lfm2 = "<|tool_list_start|>" in source and "<|tool_list_end|>" in source
    lfm25 = "List of tools: [" in source and "<|tool_list_start|>" not in source
    return lfm2 or lfm25


def _is_ministral3(source: str) -> bool:
    return (
        "[SYSTEM_PROMPT]" in source
        and "[TOOL_CALLS]" in source
        and "[ARGS]" in source
        and "[CALL_ID]" not in source
    )


def _is_stepfun(source: str) -> bool:
    return "You have access to the following functions in JSONSchema format" in source


# --- The template ------------------------------------------------------------


class ChatTemplate:
    """A model's chat template, rendered with llama.cpp's polyfills.

    Parameters
    ----------
    source
        Jinja source, e.g. the GGUF's ``tokenizer.chat_template``.
    bos_token, eos_token
        Token texts the template sees as ``bos_token`` and ``eos_token``.

    Attributes
    ----------
    source : str
        The source as given (before llama.cpp's source patches).
    bos_token, eos_token : str
        As given.
    supports_system_role : bool
        Whether the template reads a system message's content. When it does
        not, :meth:`render` merges the system prompt into the next message.
    supports_string_content, supports_typed_content : bool
        Whether message content may be a string, or a list of typed parts
        (``[{"type": "text", "text": ...}]``); :meth:`render` converts content
        to a shape the template takes.
    supports_tools, supports_tool_calls, supports_tool_responses : bool
        Whether the template describes a ``tools`` variable, writes an
        assistant's ``tool_calls``, and shows a ``tool`` message's content
        (probed on first use); :meth:`render` polyfills what it lacks.
    requires_object_arguments : bool
        Whether the template reads a call's arguments as an object rather
        than JSON text; :meth:`render` converts them to what it reads.

    Raises
    ------
    TemplateError
        If the source does not parse.
    """

    def __init__(self, source: str, bos_token: str = "", eos_token: str = "") -> None:
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        try:
            self._template = _make_environment().from_string(_patch_source(source))
        except Exception as exc:  # syntax errors, and recursion on absurd nesting
            raise TemplateError(f"the chat template does not parse: {exc}") from exc
        self.supports_system_role = self._probe_system_role()
        (
            self.supports_string_content,
            self.supports_typed_content,
        ) = self._probe_content_shape()

    def render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = False,
        **variables: Any,
    ) -> str:
        """Render ``messages`` as llama.cpp would build the prompt.

        Parameters
        ----------
        messages
            Chat messages: ``role`` and ``content``, optionally
            ``reasoning_content`` or ``thinking`` (an assistant's reasoning)
            and any other keys a template reads. They are not modified.
        add_generation_prompt
            Whether to end with the header that opens the assistant's turn.
        **variables
            Extra template variables, e.g. ``enable_thinking=False``,
            ``reasoning_effort="low"``, ``tools=[...]``. They override the
            defaults (``enable_thinking=True``, today's ``date_string``).

        Returns
        -------
        str
            The rendered text.

        Raises
        ------
        TemplateError
            If the template refuses the conversation (``raise_exception``) or
            fails in any other way.
        """
        tools = variables.get("tools")
        listed = list(tools) if isinstance(tools, list | tuple) else None
        try:
            prepared = self._polyfill(messages, listed)
        except TemplateError:
            raise
        except Exception as exc:  # malformed messages (a non-mapping, a bad part)
            raise TemplateError(f"the messages cannot be rendered: {exc}") from exc
        context = self._context(prepared, add_generation_prompt, variables)
        text = self._render(context)
        if _is_gpt_oss(self.source) and not add_generation_prompt:
            # llama.cpp ends a finished conversation with <|end|>, as GPT-OSS
            # renders earlier assistant turns, not with the final <|return|>.
            head, sep, tail = text.rpartition("<|return|>")
            if sep:
                text = head + "<|end|>" + tail
        return text

    # -- rendering --

    def _render(self, context: Mapping[str, Any]) -> str:
        try:
            return self._template.render(context)
        except TemplateError:
            raise
        except Exception as exc:  # a template can fail in any Python way
            raise TemplateError(
                f"the chat template failed: {type(exc).__name__}: {exc}"
            ) from exc

    def _context(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool,
        variables: Mapping[str, Any],
    ) -> dict[str, Any]:
        now = datetime.now()
        context: dict[str, Any] = {
            "messages": messages,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            # Defined even when false, as transformers does. llama.cpp leaves
            # it undefined then, and templates that default it to true
            # (rwkv-world, Solar-Open) would end every history with an open
            # assistant turn; the prompts with the flag set are identical.
            "add_generation_prompt": add_generation_prompt,
            # llama.cpp always defines these (common_chat_extra_context).
            "enable_thinking": True,
            "datetime": now.strftime("%b %d %Y"),
            "date_string": now.strftime("%d %b %Y"),
        }
        context.update(variables)
        # llama.cpp leaves ``tools`` undefined when there are none; templates
        # test ``tools is defined`` or ``tools is not none``.
        if not context.get("tools"):
            context.pop("tools", None)
        effort = variables.get("reasoning_effort")
        if isinstance(effort, str) and effort:
            context.setdefault("reasoning_strength", effort)
        preserve = variables.get("preserve_reasoning")
        if isinstance(preserve, bool):
            context.setdefault("preserve_thinking", preserve)
            for name in (
                "clear_thinking",
                "truncate_history_thinking",
                "drop_thinking",
            ):
                context.setdefault(name, not preserve)
        return context

    def _polyfill(
        self,
        messages: Iterable[Mapping[str, Any]],
        tools: list[Any] | None = None,
        tool_use: bool = True,
    ) -> list[dict[str, Any]]:
        # The order follows common_chat_templates_apply_jinja; tool use first,
        # as minja's polyfills ran before llama.cpp's own.
        prepared = [_as_llama_message(m) for m in messages]
        if tool_use and (tools or any(_uses_tools(m) for m in prepared)):
            prepared = self._tool_polyfill(prepared, tools)
        if _is_stepfun(self.source):
            # Leftover whitespace drives StepFun into reasoning loops.
            for message in prepared:
                _trim_content(message)
        for message in prepared:
            self._shape_content(message)
        if not _is_gpt_oss(self.source):
            # GPT-OSS has a developer role of its own.
            for message in prepared:
                if message.get("role") == "developer":
                    message["role"] = "system"
        if not self.supports_system_role and _merge_system_message(prepared):
            # The merged text is a string; give it the shape the template takes.
            self._shape_content(prepared[0])
        if _is_gpt_oss(self.source) or _is_lfm2(self.source):
            # These templates read an assistant's reasoning from ``thinking``.
            for message in prepared:
                reasoning = message.get("reasoning_content")
                if isinstance(reasoning, str):
                    message["thinking"] = reasoning
        if _is_ministral3(self.source):
            reads_thinking = "thinking" in self.source
            for message in prepared:
                _ministral3_blocks(message, reads_thinking)
        return prepared

    def _shape_content(self, message: dict[str, Any]) -> None:
        # llama.cpp's messages_inp_normalizer: convert only when the template
        # takes one shape and not the other.
        content = message.get("content")
        only_string = self.supports_string_content and not self.supports_typed_content
        only_typed = self.supports_typed_content and not self.supports_string_content
        if only_typed and isinstance(content, str):
            message["content"] = [{"type": "text", "text": content}]
        elif only_string and isinstance(content, list):
            message["content"] = _join_text_parts(content)

    # -- capability probes (llama.cpp's caps_get) --

    def _probe(self, messages: list[dict[str, Any]]) -> tuple[bool, str]:
        context = {
            "messages": messages,
            "tools": [],
            "bos_token": "",
            "eos_token": "",
            "add_generation_prompt": True,
        }
        try:
            return True, self._template.render(context)
        except Exception:  # a probe only observes; any failure is an answer
            return False, ""

    def _probe_system_role(self) -> bool:
        system = _Tracked(role="system", content="System message")
        self._probe([system, _Tracked(role="user", content="User message")])
        # Supported when the template reached the system content, even if it
        # failed afterwards: llama.cpp's probe looks at use, not at success.
        return "content" in system._keys_read

    def _probe_content_shape(self) -> tuple[bool, bool]:
        ok, text = self._probe([{"role": "user", "content": _PROBE_MARKER}])
        string_ok = ok and _PROBE_MARKER in text
        typed = [{"type": "text", "text": _PROBE_MARKER}]
        ok, text = self._probe([{"role": "user", "content": typed}])
        # A template that prints the list itself (its repr or JSON) does not
        # read typed parts, though the marker shows up inside the dump.
        dumped = "'type': 'text'" in text or '"type": "text"' in text
        typed_ok = ok and _PROBE_MARKER in text and not dumped
        if not string_ok and not typed_ok:
            # Nothing to learn (e.g. the template needs a system message):
            # keep llama.cpp's defaults, string content only.
            return True, False
        return string_ok, typed_ok

    # -- tool use: capabilities (probed on first need) and polyfills --

    @property
    def supports_tools(self) -> bool:
        """Whether the template describes the ``tools`` it is given."""
        return self._tool_caps.tools

    @property
    def supports_tool_calls(self) -> bool:
        """Whether the template writes an assistant's ``tool_calls``."""
        return self._tool_caps.calls

    @property
    def supports_tool_responses(self) -> bool:
        """Whether the template shows a ``tool`` message's content."""
        return self._tool_caps.responses

    @property
    def requires_object_arguments(self) -> bool:
        """Whether the template reads a call's arguments as an object."""
        return self._tool_caps.object_arguments

    def _render_probe(
        self, messages: list[dict[str, Any]], tools: list[Any] | None = None
    ) -> str | None:
        # The template as it is, with llama.cpp's other polyfills only.
        try:
            prepared = self._polyfill(messages, tool_use=False)
            for message in prepared:
                if message.get("content") == _NULL_CONTENT:
                    message["content"] = None
            variables = {"tools": tools} if tools else {}
            return self._render(self._context(prepared, False, variables))
        except Exception:  # a probe only observes; any failure is an answer
            return None

    @cached_property
    def _tool_caps(self) -> _ToolCaps:
        user = {"role": "user", "content": "User message"}
        described = self._render_probe([user], _PROBE_TOOLS)
        tools = described is not None and _PROBE_TOOL in described
        # A call shows where the function's name appears more often than in
        # a plain reply: the tools' description names it too.
        plain = self._render_probe(
            [user, {"role": "assistant", "content": "Reply"}], _PROBE_TOOLS
        )
        named = (plain or described or "").count(_PROBE_TOOL)
        shown: dict[tuple[bool, bool], str | None] = {}
        # Some templates (DeepSeek R1's Llama distill) write calls only when
        # the reply's content is null; llama.cpp sends "" and loses them.
        for null_content in (False, True):
            for as_object in (True, False):
                reply = _probe_call_message(as_object, null_content)
                text = self._render_probe([user, reply], _PROBE_TOOLS)
                shown[(null_content, as_object)] = (
                    text
                    if text is not None and text.count(_PROBE_TOOL) > named
                    else None
                )
            if any(shown[(null_content, o)] for o in (True, False)):
                break
        by_object, by_text = shown[(null_content, True)], shown[(null_content, False)]
        calls = bool(by_object or by_text)
        # Objects are required where only they show the arguments as written:
        # a template that dumps them (tojson) escapes JSON text, one that
        # iterates them fails on it; one that concatenates them fails on an
        # object, and one that prints them prints nothing for an object.
        object_ok = by_object is not None and _PROBE_VALUE in by_object
        text_ok = (
            by_text is not None
            and _PROBE_VALUE in by_text
            and f'\\"{_PROBE_ARG}\\"' not in by_text
        )
        object_arguments = object_ok and not text_ok
        answer = {"role": "tool", "tool_call_id": "call00001", "content": _PROBE_RESULT}
        reply = _probe_call_message(object_arguments, null_content and calls)
        text = self._render_probe([user, reply, answer], _PROBE_TOOLS)
        responses = text is not None and _PROBE_RESULT in text
        return _ToolCaps(
            tools, calls, responses, object_arguments, null_content and calls
        )

    def _tool_polyfill(
        self, messages: list[dict[str, Any]], tools: list[Any] | None
    ) -> list[dict[str, Any]]:
        caps = self._tool_caps
        names: dict[str, str] = {}
        out: list[dict[str, Any]] = []
        for message in messages:
            calls = message.get("tool_calls")
            if message.get("role") == "assistant" and isinstance(calls, list) and calls:
                for call in calls:
                    names[str(call.get("id", ""))] = _call_function(call).get(
                        "name", ""
                    )
                if caps.calls:
                    message["tool_calls"] = [
                        _shape_arguments(call, caps.object_arguments) for call in calls
                    ]
                    if caps.null_content and not message.get("content"):
                        message["content"] = None
                else:
                    message["content"] = _generic_calls(calls, message.get("content"))
                    del message["tool_calls"]
            elif message.get("role") == "tool" and not caps.responses:
                message = _generic_response(message, names)
            out.append(message)
        if tools and not caps.tools:
            prompt = _TOOLS_PROMPT + json.dumps(tools, indent=2, ensure_ascii=False)
            if not caps.calls:
                prompt += "\n\n" + _GENERIC_PROMPT
            out = _add_system(out, prompt)
        return out


# --- Tool use ----------------------------------------------------------------


@dataclass(frozen=True)
class _ToolCaps:
    tools: bool
    calls: bool
    responses: bool
    object_arguments: bool
    null_content: bool  # calls are written only when the content is null


_PROBE_TOOL = "tool_probe_fn"
_PROBE_ARG = "probe_arg"
_PROBE_VALUE = "PROBE_VALUE_X"
_PROBE_RESULT = "PROBE_RESULT_R"
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _PROBE_TOOL,
            "description": "Tool description",
            "parameters": {
                "type": "object",
                "properties": {_PROBE_ARG: {"type": "string", "description": "Arg"}},
                "required": [_PROBE_ARG],
            },
        },
    }
]
# Stands for a null content through _as_llama_message, which makes it "".
_NULL_CONTENT = "\0null"

# minja's polyfill texts (the llama.cpp that had them: common/chat.cpp,
# common_chat_params_init_generic).
_TOOLS_PROMPT = (
    "You can call any of the following tools to satisfy the user's requests: "
)
_GENERIC_PROMPT = (
    "Respond in JSON format, either with `tool_call` (a request to call tools) "
    "or with `response` reply to the user's request"
)


def _probe_call_message(as_object: bool, null_content: bool) -> dict[str, Any]:
    arguments: Any = {_PROBE_ARG: _PROBE_VALUE}
    return {
        "role": "assistant",
        "content": _NULL_CONTENT if null_content else "",
        "tool_calls": [
            {
                "id": "call00001",
                "type": "function",
                "function": {
                    "name": _PROBE_TOOL,
                    "arguments": arguments if as_object else json.dumps(arguments),
                },
            }
        ],
    }


def _uses_tools(message: Mapping[str, Any]) -> bool:
    return bool(message.get("tool_calls")) or message.get("role") == "tool"


def _call_function(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    return dict(function) if isinstance(function, Mapping) else {}


def _shape_arguments(call: Any, as_object: bool) -> Any:
    # llama.cpp keeps arguments as the JSON text clients send, and parses them
    # for templates that read an object (func_args_not_string).
    function = _call_function(call)
    if not function:
        return call
    arguments = function.get("arguments")
    if as_object and isinstance(arguments, str):
        # Not JSON: the template gets the text, as sent.
        with contextlib.suppress(json.JSONDecodeError):
            function["arguments"] = json.loads(arguments) if arguments.strip() else {}
    elif not as_object and not isinstance(arguments, str):
        function["arguments"] = json.dumps(arguments, ensure_ascii=False)
    # As llama.cpp sends a call (common_chat_msg's to_json_oaicompat).
    return {"type": "function", **call, "function": function}


def _generic_calls(calls: list[Any], content: Any) -> str:
    """An assistant's calls as the generic format's JSON.

    Written exactly as the grammar has the model write them
    (``grammars.generic_constraint``): one call as ``{"tool_call": {"name",
    "arguments"}}``, several as ``{"tool_calls": [...]}`` with the ids the
    model wrote, on one line with ``json.dumps``' spacing. minja's polyfill
    (llama.cpp's) writes every call list indented, ids and all; a reply
    sampled otherwise would be read again by every later request, which
    renders it so. A template without tool support has no format of its own
    to keep, so the one the model writes is the one rendered.
    """
    written = []
    for call in calls:
        function = _call_function(call)
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        item: dict[str, Any] = {"name": function.get("name"), "arguments": arguments}
        if len(calls) > 1 and isinstance(call, Mapping) and call.get("id"):
            item["id"] = call["id"]
        written.append(item)
    value: dict[str, Any] = (
        {"tool_call": written[0]} if len(written) == 1 else {"tool_calls": written}
    )
    text = _content_text(content)
    if text:
        value["content"] = text
    return json.dumps(value, ensure_ascii=False)


def _generic_response(
    message: dict[str, Any], names: Mapping[str, str]
) -> dict[str, Any]:
    """A tool message as a user message (minja's polyfill), named by its call."""
    response: dict[str, Any] = {}
    call_id = message.get("tool_call_id")
    name = message.get("name") or names.get(str(call_id))
    if name:
        response["tool"] = name
    response["content"] = _content_text(message.get("content"))
    if call_id:
        response["tool_call_id"] = call_id
    content = json.dumps({"tool_response": response}, indent=2, ensure_ascii=False)
    return {"role": "user", "content": content}


def _add_system(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    if messages and messages[0].get("role") == "system":
        existing = _content_text(messages[0].get("content"))
        first = {"role": "system", "content": f"{existing}\n\n{prompt}"}
        return [first, *messages[1:]]
    return [{"role": "system", "content": prompt}, *messages]


# --- Message rewrites --------------------------------------------------------


def _as_llama_message(message: Mapping[str, Any]) -> dict[str, Any]:
    # common_chat_msg::to_json_oaicompat: content is always present (empty
    # rather than null) and empty reasoning is left out, so templates that
    # test ``reasoning_content is defined`` see what llama.cpp sends.
    copy = {key: _copy_value(value) for key, value in message.items()}
    if copy.get("content") is None:
        copy["content"] = ""
    if not copy.get("reasoning_content"):
        copy.pop("reasoning_content", None)
    return copy


def _copy_value(value: Any) -> Any:
    # Templates never mutate (the sandbox is immutable), but our polyfills
    # replace content and parts; copy containers so the caller's stay intact.
    if isinstance(value, list):
        return [_copy_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _copy_value(v) for k, v in value.items()}
    return value


def _join_text_parts(parts: list[Any]) -> str:
    # llama.cpp joins text parts with newlines and ignores other part types.
    texts = [
        str(part.get("text", ""))
        for part in parts
        if isinstance(part, Mapping) and part.get("type") == "text"
    ]
    return "\n".join(texts)


def _trim_content(message: dict[str, Any]) -> None:
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = content.strip()
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                part["text"] = str(part.get("text", "")).strip()
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        message["reasoning_content"] = reasoning.strip()
        if not message["reasoning_content"]:
            del message["reasoning_content"]


def _merge_system_message(messages: list[dict[str, Any]]) -> bool:
    r"""Fold a leading system message into the next message, as llama.cpp does.

    The next message keeps its role (normally ``user``) and gets
    ``system + "\n" + content``; a system message alone is dropped.
    Return whether a message received the system prompt.
    """
    if not messages or messages[0].get("role") != "system":
        return False
    system = messages.pop(0)
    if not messages:
        return False
    first = messages[0]
    prompt = _content_text(system.get("content"))
    first["content"] = prompt + "\n" + _content_text(first.get("content"))
    return True


def _content_text(content: Any) -> str:
    if isinstance(content, list):
        return _join_text_parts(content)
    return "" if content is None else str(content)


def _ministral3_blocks(message: dict[str, Any], reads_thinking: bool) -> None:
    # Ministral 3's template reads system and assistant content as typed
    # blocks, reasoning as a leading ``thinking`` block (parsers/ministral3.cpp).
    # llama.cpp's detection also matches Devstral, whose template reads only
    # the first block's text: there a thinking block would hide the reply, so
    # unlike llama.cpp we add it only for templates that mention thinking.
    if message.get("role") not in ("system", "assistant"):
        return
    blocks: list[Any] = []
    reasoning = message.pop("reasoning_content", None)
    if isinstance(reasoning, str) and reads_thinking:
        blocks.append({"type": "thinking", "thinking": reasoning})
    content = message.get("content")
    if isinstance(content, str):
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        blocks.extend(content)
    message["content"] = blocks
