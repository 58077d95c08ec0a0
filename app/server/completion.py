"""One chat completion, on the thread that owns the engine: the request's
messages matched against the tree, the rest added, the reply generated.

The tree is the cache. The request's system prompt picks a start of the
client's conversation, and each turn a child with the same role and text;
the deepest node matched is where the context is restored from its
checkpoints (or kept, when the engine is already there). Only the turns
below it are decoded, and they and the reply are stored as nodes, so the
next request that extends or branches from this one restores in turn, also
after a restart.

Tool calls are turns like any other: a reply that called tools is stored
with its calls, each result as a tool node below it, and the tools offered
are part of the start (templates render them with the system prompt), so
an agent's next step matches everything it sent before and decodes only
its new turns.

Which conversation: the one named by the ``X-Arbor-Conversation`` header
(any conversation, the window's included, which stays the window's), else
the client's chat's when it names one (Open WebUI's chat id header, or the
``user`` field), remembered in the settings table, else the one whose tree
holds the request's first turns (``_holding``), else a new one, titled by
its first message. Those the server makes are stored with their origin,
the local server, and the program that asked (``client_chats``), which the
window's list shows. Background tasks (titles, tags) are answered in a
scratch conversation deleted after the answer (``tasks``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from app.backend.errors import ContextFullError
from app.backend.grammars import json_constraint
from app.conversation.reply_shape import ReplyShape
from app.conversation.results import StopReason
from app.conversation.streams import AlternativeStreams
from app.conversation.titles import title_from
from app.server import tasks
from app.server.client_chats import NO_CLIENT, ClientChat
from app.server.requests import ChatRequest, Turn
from storage import (
    conversation_listing,
    conversation_rows,
    node_rows,
    setting_rows,
    tool_use,
)
from storage.node_rows import StoredText
from storage.values import Origin, Role

if TYPE_CHECKING:
    from app.conversation.results import Reply
    from app.conversation.service import ConversationService

# The settings key that remembers the conversation of each ``user`` field
# (schema version 8 read it to mark those made before origins were stored:
# see storage/migrations.py ``_add_origin``).
_CLIENT_KEY = "server.conversation:"
CLIENT_TITLE = "Local server"


@dataclass(frozen=True)
class Completion:
    """Finished replies (cut before a stop string, as stored), and where:
    one, or the ``n`` a request asked for; ``prefill`` is what the request
    began the reply with (the client has it: not sent again)."""

    replies: tuple[Reply, ...]
    conversation_id: int
    matched_turns: int  # of the request's turns, those found in the tree
    prefill: str = ""
    logprobs: int | None = None  # the top_logprobs asked for (None: none)

    @property
    def reply(self) -> Reply:
        """The first reply (the one the conversation goes on from)."""
        return self.replies[0]

    def content_of(self, reply: Reply) -> str:
        """A reply's answer, as the client sees it."""
        return reply.text.removeprefix(self.prefill)

    @property
    def content(self) -> str:
        """The first reply's answer, as the client sees it."""
        return self.content_of(self.reply)

    def finish_reason_of(self, reply: Reply) -> str:
        """OpenAI's name for why ``reply`` ended."""
        if reply.tool_calls:
            return "tool_calls"
        return "length" if reply.stats.stop_reason == StopReason.MAX_TOKENS else "stop"

    @property
    def finish_reason(self) -> str:
        """Why the first reply ended."""
        return self.finish_reason_of(self.reply)

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
    on_text: Callable[[int, str], None] | None,
    on_thinking: Callable[[int, str], None] | None,
    cancelled: threading.Event,
    chat: ClientChat = NO_CLIENT,
) -> Completion:
    """Answer ``request`` in the named conversation or the client's own.

    ``on_text`` receives each reply's answer as it streams (with the reply's
    index, 0 unless the request asked for several), ``on_thinking`` the
    reasoning; ``cancelled`` ends the replies early (the client went away).
    The request's stop strings end a reply as a turn marker would: the
    stored reply and the context end where the stop string begins, so the
    client's copy of it matches the next time. Raises ``NotFound`` for an
    unknown conversation.

    ``chat``: who asks and in which of its chats (``client_chats``), which
    picks the conversation when none is named; a background task is
    answered in a scratch conversation, deleted afterwards (``tasks``).
    """
    if chat.task is not None and conversation_id is None:
        return _answer_task(service, request, chat, on_text, on_thinking, cancelled)
    _check_size(service, request)
    conversation_id, start, made = _start(service, request, conversation_id, chat)
    # A start just made has nothing below it to match.
    node, matched = (
        (start, 0) if made else _deepest_match(service, start, request.turns)
    )
    remaining = request.turns[matched:]
    streams = AlternativeStreams(on_text, on_thinking, cancelled.is_set)
    shape = _shape(service, request)
    # A new last user message is sent with its reply, which decodes both in
    # one batch; everything else is added first.
    sent = (
        remaining[-1]
        if remaining
        and remaining[-1].role == "user"
        and request.n == 1
        and not request.prefill
        else None
    )
    for turn in remaining[: -1 if sent else None]:
        node = service.add_message(node, Role(turn.role), turn.text, _use_of(turn))
    if sent is not None:
        reply = service.send(node, sent.text, request.sampling, streams.of(0), shape)
        replies = [reply]
    elif request.n > 1:
        # Only the first is made ready to go on from at once; a client
        # that picks another has it decoded then (ConversationService).
        replies = service.regenerate_parallel(
            node, request.sampling, request.n, streams, shape, checkpoint_all=False
        )
        replies = [replace(reply, user_node=node) for reply in replies]
    else:
        reply = service.reply(
            node, request.sampling, streams.of(0), shape, prefix=request.prefill
        )
        replies = [replace(reply, user_node=node)]
    return Completion(
        tuple(replies), conversation_id, matched, request.prefill, request.logprobs
    )


def _check_size(service: ConversationService, request: ChatRequest) -> None:
    """Refuse a request whose messages cannot fit the context, before
    anything of it is stored (``ContextFullError``, with the numbers).

    The whole history is the context a reply needs, matched in the tree or
    not; its texts alone, tokenized without the template, are a lower bound
    of it. Counted turn by turn and stopped once over, so that a request of
    50,000 messages costs what its first few hundred do.
    """
    engine = service.engine
    if engine is None:
        return
    limit = engine.n_ctx
    # Each turn takes at least its role's marker: more turns than the
    # context has positions never fit.
    if len(request.turns) >= limit:
        raise ContextFullError(
            f"The request holds {len(request.turns):,} messages; the model's "
            f"context holds {limit:,} tokens."
        )
    # A token holds a character at least: texts shorter than the context
    # fit this bound untokenized (most requests; tokenizing costs ~1 ms per
    # thousand tokens).
    if len(request.system) + sum(len(turn.text) for turn in request.turns) <= limit:
        return
    needed = len(engine.tokenize(request.system)) if request.system else 0
    for count, turn in enumerate(request.turns, 1):
        needed += len(engine.tokenize(turn.text)) + 1
        if needed > limit:
            raise ContextFullError(
                f"The messages need more than {limit:,} tokens (at least "
                f"{needed:,} by the first {count:,} of {len(request.turns):,}); "
                f"the model's context holds {limit:,}."
            )


def _use_of(turn: Turn) -> dict[str, Any] | None:
    """A turn's part in tool use, as its node stores it."""
    if turn.role == "tool":
        return tool_use.answering(turn.call_id, turn.name)
    return tool_use.calling(list(turn.calls))


def _shape(service: ConversationService, request: ChatRequest) -> ReplyShape:
    """What the replies must be: JSON, tool calls in the model's syntax, or
    free text."""
    if request.output.json:
        return ReplyShape(
            json_constraint(request.output.schema), logprobs=request.logprobs
        )
    options = request.tools
    if not options.may_call or service.engine is None:
        return ReplyShape(logprobs=request.logprobs)
    syntax = service.engine.chat_format.tool_syntax
    return ReplyShape(
        syntax.constraint(list(options.tools), options.choice, options.parallel),
        syntax,
        request.logprobs,
    )


def _start(
    service: ConversationService,
    request: ChatRequest,
    conversation_id: int | None,
    chat: ClientChat = NO_CLIENT,
) -> tuple[int, int, bool]:
    """The conversation and the start (root) whose system prompt and tools
    are the request's, made if there is none; and whether it was made now.

    The conversation is the one named, else the client's chat's (its id, or
    the ``user`` field, remembered in the settings table), else the one whose
    tree holds the request's first turns (``_holding``), else a new one.
    """
    db = service.db
    if conversation_id is not None:
        conversation_rows.get_conversation(db, conversation_id)  # NotFound if unknown
        return _start_in(service, request, conversation_id)
    key = _chat_key(request, chat)
    if key is not None:
        known = setting_rows.get_setting(db, key)
        # Gone when deleted in the window since: a new one is made.
        if isinstance(known, int) and node_rows.root_texts(db, known):
            return _start_in(service, request, known)
    else:
        found = _holding(service, request, chat)
        if found is not None:
            return found
    conversation_id, root = service.new_conversation(
        request.system or None,
        _client_title(request),
        origin=Origin.LOCAL_SERVER,
        client=chat.client,
        tools=list(request.tools.tools),
    )
    if key is not None:
        setting_rows.set_setting(db, key, conversation_id)
    return conversation_id, root, True


def _client_title(request: ChatRequest) -> str:
    """A new client conversation's title: its first message's, as the
    window's are."""
    return title_from(request.turns[0].text) or CLIENT_TITLE


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
    for child in node_rows.child_texts(service.db, node)[::-1]:
        if child.role == turn.role and _same_turn(child, turn):
            return child.id
    return None


def _same_turn(child: StoredText, turn: Turn) -> bool:
    """Whether a stored node is the request's turn."""
    if turn.role == "user":
        # A user message must match exactly: its span was rendered from
        # exactly that text.
        return child.text == turn.text
    if turn.role == "tool":
        return child.text == turn.text and (
            tool_use.answered_call(child.tool_use)[0] == turn.call_id
        )
    # A reply is compared without its surrounding white space: clients (and
    # Arbor's own reply text) trim it; its calls by name and arguments, as
    # JSON values (a client may send them back spaced otherwise).
    return child.text.strip() == turn.text.strip() and _calls_key(
        tool_use.calls_of(child.tool_use)
    ) == _calls_key(list(turn.calls))


def _calls_key(calls: list[dict[str, str]]) -> list[tuple[str, Any]]:
    return [(call["name"], _json_value(call["arguments"])) for call in calls]


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


# --- which conversation: the client's chat ------------------------------------

# The settings key that remembers the conversation of a chat a client names
# by its own id (``ClientChat.chat_id``: Open WebUI's chat id header).
_CHAT_KEY = "server.chat:"
# How far back ``_holding`` looks: the conversations the server made for the
# same client, most recently updated first (one indexed query, see
# ``conversation_listing.openings``), and how many starts found there it follows.
_SEARCHED_CONVERSATIONS = 200
_FOLLOWED_STARTS = 8


def _chat_key(request: ChatRequest, chat: ClientChat) -> str | None:
    """The settings key of the chat the client names (its id, else the
    ``user`` field), or None when it names none."""
    if chat.chat_id is not None:
        return _CHAT_KEY + chat.chat_id
    if request.user is not None:
        return _CLIENT_KEY + request.user
    return None


def _start_in(
    service: ConversationService, request: ChatRequest, conversation_id: int
) -> tuple[int, int, bool]:
    """The start of ``conversation_id`` with the request's system prompt and
    tools, made if there is none (a branch from a new root: nothing erased)."""
    tools = list(request.tools.tools)
    for start in node_rows.root_texts(service.db, conversation_id):
        if _same_start(start.text, start.tool_use, request):
            return conversation_id, start.id, False
    root = service.new_system_prompt(conversation_id, request.system, tools)
    return conversation_id, root, True


def _holding(
    service: ConversationService, request: ChatRequest, chat: ClientChat
) -> tuple[int, int, bool] | None:
    """The conversation whose tree already holds the request's first turns,
    for a client that names no chat; None when none does.

    Clients resend the whole chat each time, so a chat's next request
    begins with the turns of its last one. Searched: the conversations the
    server made for the same client, among the most recent, that have a
    first message of the same text under some start. One under the request's
    own start (system prompt and tools) holds the request if that first
    message matches; one under another start only if the reply after it
    matches too (a chat whose system prompt changed, as one with today's
    date in it does): the request then gets a start of its own there. Of
    several, the deepest match wins, then one under the request's own
    start, then the most recent. A request that shares nothing but a system
    prompt with every conversation starts a new one, rather than a new
    branch of a catch-all tree.

    Cost: one query bounded by ``_SEARCHED_CONVERSATIONS`` (it reads their
    starts and first messages through indexes, whatever the file's size:
    0.3 ms in a file of 2,000 such conversations), then for at most
    ``_FOLLOWED_STARTS`` starts the children read along the request's
    turns, as any request's match reads them.
    """
    first = request.turns[0]
    with service.db.read_raw() as raw:
        found = conversation_listing.openings(
            raw, first.text, Origin.LOCAL_SERVER, chat.client, _SEARCHED_CONVERSATIONS
        )
    best: tuple[int, bool, conversation_listing.Opening] | None = None
    for opening in found[:_FOLLOWED_STARTS]:
        same = _same_start(opening.system, opening.tool_use, request)
        _node, matched = _deepest_match(service, opening.start_id, request.turns)
        if matched < (1 if same else 2):
            continue
        # Deepest first, then one under the request's own start; the list is
        # most recent first, so a tie keeps the earlier.
        if best is None or (matched, same) > best[:2]:
            best = (matched, same, opening)
    if best is None:
        return None
    _matched, same, opening = best
    if same:
        return opening.conversation_id, opening.start_id, False
    return _start_in(service, request, opening.conversation_id)


def _same_start(system: str, use: dict[str, Any] | None, request: ChatRequest) -> bool:
    """Whether a start with ``system`` and tool use ``use`` is the request's:
    the same system prompt (without surrounding white space) and tools."""
    tools = list(request.tools.tools)
    return system.strip() == request.system.strip() and tool_use.tools_of(use) == tools


def _answer_task(
    service: ConversationService,
    request: ChatRequest,
    chat: ClientChat,
    on_text: Callable[[int, str], None] | None,
    on_thinking: Callable[[int, str], None] | None,
    cancelled: threading.Event,
) -> Completion:
    """Answer a background task in a scratch conversation of its own, then
    delete that (``tasks``): nothing of it stays in a tree or the budget."""
    scratch = tasks.open_scratch(service, request, chat.client)
    try:
        # Nothing comes back to a task's nodes: no checkpoint is written.
        with service.without_checkpoints():
            return complete(
                service,
                tasks.bounded(request),
                scratch,
                on_text,
                on_thinking,
                cancelled,
            )
    finally:
        tasks.close(service, scratch)
