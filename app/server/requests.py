"""A chat completions request body, checked and turned into Arbor's terms.

Everything a client can get wrong is found here, before the request waits
for the engine, and raised as ``BadRequest`` with the offending parameter,
which the HTTP layer answers with an OpenAI-style 400. The tool and output
shape parts are ``tool_requests``'.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from app.backend.errors import InvalidSetting
from app.backend.values import MAX_FORKS, SamplingParams
from app.conversation.logprobs import MAX_TOP_LOGPROBS
from app.server.tool_requests import (
    FREE_TEXT,
    NO_TOOLS,
    BadRequest,
    OutputFormat,
    ToolOptions,
    calls_of_message,
    output_format,
    tool_options,
)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "BadRequest",
    "ChatRequest",
    "Envelope",
    "Turn",
    "envelope_of",
    "sampling_of",
]

# A client that sends no max_tokens gets a reply of at most this many tokens
# (OpenAI's own default is "until the context is full"; an agent loop that
# forgets the field should not hold the one engine for minutes).
DEFAULT_MAX_TOKENS = 2048

_SYSTEM_ROLES = ("system", "developer")
_MAX_STOPS = 4  # OpenAI's limit


@dataclass(frozen=True)
class Turn:
    """One user, assistant or tool message of the request.

    ``calls``: an assistant's tool calls, each ``{"id", "name",
    "arguments"}``; ``call_id`` and ``name``: the call a tool result answers.
    """

    role: str  # "user" | "assistant" | "tool"
    text: str
    calls: tuple[dict[str, str], ...] = ()
    call_id: str = ""
    name: str = ""


@dataclass(frozen=True)
class ChatRequest:
    """What a chat completions request asks, in Arbor's terms.

    ``turns`` start with a user turn and end with a user turn or tool
    results; ``prefill`` is the start of the reply when the messages end
    with an assistant turn (the reply goes on from it).
    """

    model: str
    system: str  # "" for none: a root's text
    turns: tuple[Turn, ...]
    sampling: SamplingParams
    stream: bool
    include_usage: bool
    user: str | None
    tools: ToolOptions = NO_TOOLS
    output: OutputFormat = FREE_TEXT
    n: int = 1
    prefill: str = ""
    logprobs: int | None = None  # top_logprobs wanted; None: no logprobs
    limited: bool = False  # whether the client set max_tokens itself


@dataclass(frozen=True)
class Envelope:
    """What every generating request says besides its input: the model it
    names, and whether the answer is streamed (with a usage event)."""

    model: str
    stream: bool
    include_usage: bool


def envelope_of(body: Any) -> Envelope:
    """Check a decoded JSON body's envelope; raise ``BadRequest``."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest(
            "'model' is required: a model id from GET /v1/models.", "model"
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false.", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object.", "stream_options")
    return Envelope(model, stream, bool(options.get("include_usage", False)))


def parse_chat_request(body: Any) -> ChatRequest:
    """Check a decoded JSON body; raise ``BadRequest`` for what is wrong."""
    envelope = envelope_of(body)
    system, turns, prefill = _conversation(body.get("messages"))
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > 200):
        raise BadRequest("'user' must be a string of at most 200 characters.", "user")
    tools = tool_options(body)
    output = output_format(body)
    if output.json and tools.choice not in ("auto", "none"):
        raise BadRequest(
            "A reply cannot both have to call a tool and be a JSON object: "
            "'tool_choice' or 'response_format'.",
            "response_format",
        )
    return ChatRequest(
        model=envelope.model,
        system=system,
        turns=turns,
        sampling=sampling_of(body),
        stream=envelope.stream,
        include_usage=envelope.include_usage,
        user=user or None,
        tools=tools,
        output=output,
        n=_count(body.get("n", 1)),
        prefill=prefill,
        logprobs=_logprobs(body),
        limited=body.get("max_completion_tokens", body.get("max_tokens")) is not None,
    )


def _count(n: Any) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_FORKS:
        raise BadRequest(
            f"'n' must be a whole number from 1 to {MAX_FORKS} (replies generated "
            "together).",
            "n",
        )
    return n


def _logprobs(body: dict[str, Any]) -> int | None:
    """How many top tokens to report with each token's logprob (None: off)."""
    wanted = body.get("logprobs", False)
    top = body.get("top_logprobs")
    if wanted is None:
        wanted = False
    if not isinstance(wanted, bool):
        raise BadRequest("'logprobs' must be true or false.", "logprobs")
    if top is None:
        return 0 if wanted else None
    if (
        isinstance(top, bool)
        or not isinstance(top, int)
        or not 0 <= top <= MAX_TOP_LOGPROBS
    ):
        raise BadRequest(
            f"'top_logprobs' must be a whole number from 0 to {MAX_TOP_LOGPROBS}.",
            "top_logprobs",
        )
    if not wanted:
        raise BadRequest("'top_logprobs' needs 'logprobs': true.", "top_logprobs")
    return top


def _conversation(messages: Any) -> tuple[str, tuple[Turn, ...], str]:
    """The system prompt, the turns, and the prefill (the text of a last
    assistant turn the reply goes on from, else "").

    Consecutive user messages are joined, and so are consecutive plain
    assistant messages (Arbor's tree alternates them); tool results each
    stay a turn of their own.
    """
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list.", "messages")
    system_parts: list[str] = []
    turns: list[Turn] = []
    names: dict[str, str] = {}  # tool call id -> function name
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{where} must be an object.", where)
        role = message.get("role")
        if role in _SYSTEM_ROLES:
            if turns:
                raise BadRequest(
                    f"{where}: a system message must come before the conversation.",
                    where,
                )
            system_parts.append(_text(message.get("content"), where))
        elif role == "tool":
            turns.append(_tool_result(message, where, names))
        elif role == "assistant":
            calls = calls_of_message(message, where)
            names.update((call["id"], call["name"]) for call in calls)
            content = message.get("content")
            text = "" if content is None and calls else _text(content, where)
            _add(turns, Turn("assistant", text, calls))
        elif role == "user":
            _add(turns, Turn("user", _text(message.get("content"), where)))
        else:
            raise BadRequest(
                f"{where}: role {role!r} is not supported (system, developer, user, "
                "assistant or tool).",
                where,
            )
    prefill = ""
    if turns and turns[-1].role == "assistant" and not turns[-1].calls:
        prefill = turns.pop().text
    if not turns or turns[0].role != "user" or turns[-1].role == "assistant":
        raise BadRequest(
            "The messages must start with a user message (after any system "
            "message) and end with a user message, the results of the last "
            "reply's tool calls, or the start of a reply to go on from.",
            "messages",
        )
    if any(not turn.text.strip() for turn in turns if turn.role == "user"):
        raise BadRequest("A user message is empty.", "messages")
    return "\n\n".join(system_parts), tuple(turns), prefill


def _add(turns: list[Turn], turn: Turn) -> None:
    """Append ``turn``, joined to the last one where both are plain messages
    of the same role."""
    last = turns[-1] if turns else None
    if last is not None and last.role == turn.role and not (last.calls or turn.calls):
        turns[-1] = Turn(turn.role, f"{last.text}\n\n{turn.text}")
    elif last is not None and last.role == turn.role == "assistant":
        # Text, then calls (or calls split over two messages): one reply.
        text = "\n\n".join(t for t in (last.text, turn.text) if t)
        turns[-1] = Turn("assistant", text, last.calls + turn.calls)
    else:
        turns.append(turn)


def _tool_result(message: dict[str, Any], where: str, names: dict[str, str]) -> Turn:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise BadRequest(f"{where}: a tool message needs its 'tool_call_id'.", where)
    if call_id not in names:
        raise BadRequest(
            f"{where}: no earlier assistant message made the call {call_id!r}.",
            where,
        )
    return Turn(
        "tool",
        _text(message.get("content"), where),
        call_id=call_id,
        name=names[call_id],
    )


def _text(content: Any, where: str) -> str:
    # A string, or a list of parts of which only text parts are understood.
    if isinstance(content, str):
        return _checked(content, where)
    if isinstance(content, list):
        pieces = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise BadRequest(
                    f"{where}: only text content is supported (no images or audio).",
                    where,
                )
            piece = part.get("text")
            if not isinstance(piece, str):
                raise BadRequest(f"{where}: a text part needs a 'text' string.", where)
            pieces.append(piece)
        return _checked("".join(pieces), where)
    raise BadRequest(f"{where}: 'content' must be a string or a list of parts.", where)


def _checked(text: str, where: str) -> str:
    if "\x00" in text:
        raise BadRequest(f"{where}: the text holds a NUL character.", where)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest(f"{where}: the text is not valid Unicode.", where) from None
    return text


# Request field -> SamplingParams field, for those that map one to one.
_SAMPLING_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repeat_penalty": "repeat_penalty",
    "seed": "seed",
}


def sampling_of(body: dict[str, Any]) -> SamplingParams:
    """The sampling a request body asks (``temperature`` … ``stop``, and
    ``max_tokens``, ``DEFAULT_MAX_TOKENS`` when absent)."""
    values: dict[str, Any] = {}
    for key, field in _SAMPLING_FIELDS.items():
        value = body.get(key)
        if value is None:
            continue
        whole = field in ("top_k", "seed")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise BadRequest(f"'{key}' must be a number.", key)
        if whole and not float(value).is_integer():
            raise BadRequest(f"'{key}' must be a whole number.", key)
        values[field] = int(value) if whole else float(value)
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise BadRequest("'max_tokens' must be a whole number.", "max_tokens")
        values["max_tokens"] = limit
    else:
        values["max_tokens"] = DEFAULT_MAX_TOKENS
    values["stop"] = _stops(body.get("stop"))
    try:
        return replace(SamplingParams(), **values)
    except InvalidSetting as exc:
        raise BadRequest(str(exc), next(iter(values), None)) from exc


def _stops(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if (
        not isinstance(stops, list)
        or len(stops) > _MAX_STOPS
        or not all(isinstance(s, str) and s for s in stops)
    ):
        raise BadRequest(
            f"'stop' must be a non-empty string or a list of up to {_MAX_STOPS}.",
            "stop",
        )
    return tuple(stops)
