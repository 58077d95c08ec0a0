"""A chat completions request body, checked and turned into Arbor's terms.

Everything a client can get wrong is found here, before the request waits
for the engine, and raised as ``BadRequest`` with the offending parameter,
which the HTTP layer answers with an OpenAI-style 400.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from app.backend.errors import InvalidSetting
from app.backend.values import SamplingParams

# A client that sends no max_tokens gets a reply of at most this many tokens
# (OpenAI's own default is "until the context is full"; an agent loop that
# forgets the field should not hold the one engine for minutes).
DEFAULT_MAX_TOKENS = 2048

_SYSTEM_ROLES = ("system", "developer")
_MAX_STOPS = 4  # OpenAI's limit


class BadRequest(Exception):
    """A request the API refuses (HTTP 400), with the parameter at fault."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Turn:
    """One user or assistant message of the request."""

    role: str  # "user" | "assistant"
    text: str


@dataclass(frozen=True)
class ChatRequest:
    """What a chat completions request asks, in Arbor's terms."""

    model: str
    system: str  # "" for none: a root's text
    turns: tuple[Turn, ...]  # alternating, ending with a user turn
    sampling: SamplingParams
    stream: bool
    include_usage: bool
    user: str | None


def parse_chat_request(body: Any) -> ChatRequest:
    """Check a decoded JSON body; raise ``BadRequest`` for what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest(
            "'model' is required: a model id from GET /v1/models.", "model"
        )
    _refuse_unsupported(body)
    system, turns = _conversation(body.get("messages"))
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be true or false.", "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object.", "stream_options")
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > 200):
        raise BadRequest("'user' must be a string of at most 200 characters.", "user")
    return ChatRequest(
        model=model,
        system=system,
        turns=turns,
        sampling=_sampling(body),
        stream=stream,
        include_usage=bool(options.get("include_usage", False)),
        user=user or None,
    )


def _refuse_unsupported(body: dict[str, Any]) -> None:
    # Said plainly rather than ignored: a client that relies on one of these
    # would otherwise get an answer that silently is not what it asked for.
    n = body.get("n", 1)
    if n != 1:
        raise BadRequest("Only n=1 is supported.", "n")
    if body.get("tools") or body.get("functions"):
        raise BadRequest("Tool and function calling are not supported.", "tools")
    if body.get("logprobs"):
        raise BadRequest("logprobs are not supported.", "logprobs")
    response_format = body.get("response_format")
    if response_format not in (None, {"type": "text"}):
        raise BadRequest(
            "Only the 'text' response format is supported.", "response_format"
        )


def _conversation(messages: Any) -> tuple[str, tuple[Turn, ...]]:
    """The system prompt and the turns, consecutive same-role messages joined
    (Arbor's tree alternates user and assistant turns)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list.", "messages")
    system_parts: list[str] = []
    turns: list[Turn] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise BadRequest(f"{where} must be an object.", where)
        role = message.get("role")
        text = _text(message.get("content"), where)
        if role in _SYSTEM_ROLES:
            if turns:
                raise BadRequest(
                    f"{where}: a system message must come before the conversation.",
                    where,
                )
            system_parts.append(text)
        elif role in ("user", "assistant"):
            if turns and turns[-1].role == role:
                turns[-1] = Turn(role, f"{turns[-1].text}\n\n{text}")
            else:
                turns.append(Turn(role, text))
        else:
            raise BadRequest(
                f"{where}: role {role!r} is not supported (system, developer, user "
                "or assistant).",
                where,
            )
    if not turns or turns[0].role != "user" or turns[-1].role != "user":
        raise BadRequest(
            "The messages must start and end with a user message (after any "
            "system message).",
            "messages",
        )
    if any(not turn.text.strip() for turn in turns if turn.role == "user"):
        raise BadRequest("A user message is empty.", "messages")
    return "\n\n".join(system_parts), tuple(turns)


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


def _sampling(body: dict[str, Any]) -> SamplingParams:
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
