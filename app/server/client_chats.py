"""Who is asking, and in which of its chats: a request's headers and body
turned into a small value, ``ClientChat``, that picks its conversation.

A client says little about itself. What it does say, in order of trust:

- ``X-Arbor-Conversation: ID`` names a conversation (read by the HTTP side);
- Open WebUI, with ``ENABLE_FORWARD_USER_INFO_HEADERS``, sends its chat's id
  in ``X-OpenWebUI-Chat-Id`` and the person's in ``X-OpenWebUI-User-*``
  (``backend/open_webui/env.py``: ``FORWARD_SESSION_INFO_HEADER_CHAT_ID``
  and ``FORWARD_USER_INFO_HEADER_USER_*``, these names by default);
- the body's ``user`` names the person (OpenAI's meaning), which Arbor has
  always taken as one conversation per value;
- ``X-Arbor-Client: NAME`` names the program; else its ``User-Agent`` does,
  cut to a readable name ("OpenAI/Python 1.52.0" is "openai-python");
- ``X-Arbor-Task: KIND`` marks a one-shot background request (a title, tags),
  which ``tasks`` also recognises by its prompt.

A request that names no chat is placed by its content (``completion``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from app.server import tasks
from app.server.requests import ChatRequest

CLIENT_HEADER = "X-Arbor-Client"
TASK_HEADER = "X-Arbor-Task"
OPEN_WEBUI_CHAT_HEADER = "X-OpenWebUI-Chat-Id"
_OPEN_WEBUI_HEADERS = (
    OPEN_WEBUI_CHAT_HEADER,
    "X-OpenWebUI-User-Id",
    "X-OpenWebUI-User-Name",
    "X-OpenWebUI-Message-Id",
)
OPEN_WEBUI = "Open WebUI"

# ``conversation.client`` holds at most 100 characters; a name is for reading
# in a list, so it is kept much shorter.
_NAME_LENGTH = 40
_CHAT_ID_LENGTH = 200

# User agents of the libraries people point at a local server, to the names
# their users know them by. The version is left out: it changes with every
# upgrade, and a chat that goes on after one is still the same program's.
_KNOWN_AGENTS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^OpenAI/Python\b", re.IGNORECASE), "openai-python"),
    (re.compile(r"^OpenAI/JS\b", re.IGNORECASE), "openai-node"),
    (re.compile(r"^python-httpx/", re.IGNORECASE), "python-httpx"),
    (re.compile(r"^python-requests/", re.IGNORECASE), "python-requests"),
    (re.compile(r"^Python-urllib/", re.IGNORECASE), "python-urllib"),
    (re.compile(r"^Python/[\d.]+ aiohttp/", re.IGNORECASE), "python-aiohttp"),
    (re.compile(r"^Mozilla/"), "web browser"),
)
# Otherwise the first product token ("curl/8.5.0" is "curl").
_PRODUCT = re.compile(r"^\s*([A-Za-z0-9][\w.+-]*)")


@dataclass(frozen=True)
class ClientChat:
    """Who asks and in which chat, as far as the request says.

    ``client``: the program's readable name (None: it did not say).
    ``chat_id``: the client's own id of the chat, with its source
    ("open-webui:…"), None when it sent none. ``task``: the kind of a
    background request ("title", "tags", …), None for a person's message.
    """

    client: str | None = None
    chat_id: str | None = None
    task: str | None = None


NO_CLIENT = ClientChat()


def from_headers(headers: Mapping[str, str]) -> ClientChat:
    """What the headers say (``headers`` looked up case-insensitively, as
    aiohttp's are; a plain dict needs the names as written here)."""
    chat = _printable(headers.get(OPEN_WEBUI_CHAT_HEADER, ""), _CHAT_ID_LENGTH)
    task = _printable(headers.get(TASK_HEADER, ""), _NAME_LENGTH)
    return ClientChat(
        client=_client_name(headers),
        chat_id=f"open-webui:{chat}" if chat else None,
        task=task or None,
    )


def with_request(asking: ClientChat, request: ChatRequest) -> ClientChat:
    """``asking`` with what the body adds: a background task recognised by
    its prompt (``tasks.kind_of``)."""
    if asking.task is not None:
        return asking
    return replace(asking, task=tasks.kind_of(request))


def client_name(user_agent: str) -> str | None:
    """A readable name of the program behind ``user_agent`` (None: none)."""
    for pattern, name in _KNOWN_AGENTS:
        if pattern.search(user_agent):
            return name
    found = _PRODUCT.match(user_agent)
    return found.group(1)[:_NAME_LENGTH] if found else None


def _client_name(headers: Mapping[str, str]) -> str | None:
    said = _printable(headers.get(CLIENT_HEADER, ""), _NAME_LENGTH)
    if said:
        return said
    # Open WebUI calls through aiohttp, whose agent says only that; its own
    # headers say who it is.
    if any(headers.get(name) for name in _OPEN_WEBUI_HEADERS):
        return OPEN_WEBUI
    return client_name(headers.get("User-Agent", ""))


def _printable(value: str, length: int) -> str:
    """``value`` without control characters, trimmed and cut to ``length``."""
    return "".join(ch for ch in value if ch.isprintable()).strip()[:length]
