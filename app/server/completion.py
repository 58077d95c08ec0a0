"""One chat completion, on the thread that owns the engine: the request's
messages matched against the tree, the rest added, the reply generated.

The tree is the cache. The request's system prompt picks a start of the
client's conversation, and each turn a child with the same role and text;
the deepest node matched is where the context is restored from its
checkpoints (or kept, when the engine is already there). Only the turns
below it are decoded, and they and the reply are stored as nodes, so the
next request that extends or branches from this one restores in turn, also
after a restart.

Which conversation: the one named by the ``X-Arbor-Conversation`` header
(any conversation, the window's included, which stays the window's), else
one per ``user`` field (one for requests without it), remembered in the
settings table. Those the server makes are stored with their origin, the
local server, which the window's list marks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from app.conversation.results import StopReason
from app.conversation.streams import Streams
from app.server.requests import ChatRequest, Turn
from storage import conversation_rows, node_rows, setting_rows
from storage.values import Origin, Role

if TYPE_CHECKING:
    from app.conversation.results import Reply
    from app.conversation.service import ConversationService

# The settings key that remembers each API client's conversation (schema
# version 8 read it to mark those made before origins were stored: see
# storage/migrations.py ``_add_origin``).
_CLIENT_KEY = "server.conversation:"
CLIENT_TITLE = "Local server"


@dataclass(frozen=True)
class Completion:
    """A finished reply (cut before a stop string, as stored), and where."""

    reply: Reply
    conversation_id: int
    matched_turns: int  # of the request's turns, those found in the tree

    @property
    def content(self) -> str:
        """The answer, as the client sees it."""
        return self.reply.text

    @property
    def finish_reason(self) -> str:
        """OpenAI's name for why the reply ended."""
        return (
            "length"
            if self.reply.stats.stop_reason == StopReason.MAX_TOKENS
            else "stop"
        )

    @property
    def prompt_tokens(self) -> int:
        """Tokens of context before the reply's first sampled token."""
        stats = self.reply.stats
        return (
            stats.kept_tokens
            + stats.restored_tokens
            + stats.reprocessed_tokens
            + stats.prompt_tokens
        )

    @property
    def cached_tokens(self) -> int:
        """Of the prompt, the tokens kept in the context or restored."""
        return self.reply.stats.kept_tokens + self.reply.stats.restored_tokens


def complete(
    service: ConversationService,
    request: ChatRequest,
    conversation_id: int | None,
    on_text: Callable[[str], None] | None,
    on_thinking: Callable[[str], None] | None,
    cancelled: threading.Event,
) -> Completion:
    """Answer ``request`` in the named conversation or the client's own.

    ``on_text`` receives the answer as it streams, ``on_thinking`` the
    reasoning; ``cancelled`` ends the reply early (the client went away).
    The request's stop strings end the reply as a turn marker would: the
    stored reply and the context end where the stop string begins, so the
    client's copy of it matches the next time. Raises ``NotFound`` for an
    unknown conversation.
    """
    conversation_id, start, made = _start(service, request, conversation_id)
    # A start just made has nothing below it to match.
    node, matched = (
        (start, 0) if made else _deepest_match(service, start, request.turns)
    )
    remaining = request.turns[matched:]
    streams = Streams(on_text, on_thinking, cancelled.is_set)
    if not remaining:  # the request ends on a user message already stored
        reply = replace(service.reply(node, request.sampling, streams), user_node=node)
    else:
        for turn in remaining[:-1]:
            node = service.add_message(node, Role(turn.role), turn.text)
        reply = service.send(node, remaining[-1].text, request.sampling, streams)
    return Completion(reply, conversation_id, matched)


def _start(
    service: ConversationService, request: ChatRequest, conversation_id: int | None
) -> tuple[int, int, bool]:
    """The conversation and the start (root) whose system prompt is the
    request's, made if there is none; and whether it was made now."""
    db = service.db
    starts: list[tuple[int, str]] = []
    if conversation_id is None:
        known = setting_rows.get_setting(db, _CLIENT_KEY + (request.user or ""))
        if isinstance(known, int):
            # None when deleted in the window since: a new one is made.
            starts = node_rows.root_texts(db, known)
            conversation_id = known if starts else None
    else:
        conversation_rows.get_conversation(db, conversation_id)  # NotFound if unknown
        starts = node_rows.root_texts(db, conversation_id)
    if conversation_id is None:
        conversation_id, root = service.new_conversation(
            request.system or None,
            _client_title(request.user),
            origin=Origin.LOCAL_SERVER,
        )
        setting_rows.set_setting(
            db, _CLIENT_KEY + (request.user or ""), conversation_id
        )
        return conversation_id, root, True
    wanted = request.system.strip()
    for root_id, text in starts:
        if text.strip() == wanted:
            return conversation_id, root_id, False
    root = service.new_system_prompt(conversation_id, request.system)
    return conversation_id, root, True


def _client_title(user: str | None) -> str:
    return f"{CLIENT_TITLE} · {user}" if user else CLIENT_TITLE


def _deepest_match(
    service: ConversationService, start: int, turns: tuple[Turn, ...]
) -> tuple[int, int]:
    """The deepest node below ``start`` along ``turns``, and how many turns
    it took. The newest of equal children wins: the branch last worked on."""
    node, matched = start, 0
    for turn in turns:
        child = _matching_child(service, node, turn)
        if child is None:
            break
        node, matched = child, matched + 1
    return node, matched


def _matching_child(service: ConversationService, node: int, turn: Turn) -> int | None:
    role = Role(turn.role)
    # A reply is compared without its surrounding white space: clients (and
    # Arbor's own reply text) trim it. A user message must match exactly,
    # because its span was rendered from exactly that text.
    wanted = turn.text.strip() if role == Role.ASSISTANT else turn.text
    for child_id, child_role, text in reversed(node_rows.child_texts(service.db, node)):
        if child_role != role:
            continue
        if (text.strip() if role == Role.ASSISTANT else text) == wanted:
            return child_id
    return None
