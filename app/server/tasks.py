"""Background tasks: one-shot requests a client sends beside a person's chat
(a title, tags, follow-up questions, an autocompletion), answered out of the
way of that chat.

Open WebUI sends three after every reply (12 of 20 requests in one measured
session), each a single user message that quotes the chat's last turns
under a "### Task:" heading. Stored like a chat they would crowd the
person's tree with starts that never continue, and their checkpoints (70 %
of the bytes in that session) would push real chats' out of the storage
budget. So a task is answered in a scratch conversation of its own, origin
``LOCAL_SERVER_TASK``, which no list shows, and that conversation is deleted
with its nodes and checkpoints as soon as the answer is out (``close``).
Nothing of it is ever restored, so nothing is lost: a task's prompt shares
nothing with the next one but the system prompt.

Where the engine's time goes first is ``engine_owner``'s part: a person's
request waiting makes a running task stop, and the task is answered after.
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import replace
from typing import TYPE_CHECKING

from app.server.requests import ChatRequest
from storage import conversation_listing
from storage.values import Origin

if TYPE_CHECKING:
    from app.conversation.service import ConversationService
    from storage.db import Database

log = logging.getLogger(__name__)

# A task whose client sends no max_tokens gets at most this many. Open
# WebUI's longest task answer, 3-5 follow-up questions as JSON, is about
# 60-120 tokens (a title ~15, tags ~30): 256 leaves room for a model that
# talks before its JSON, while one that never closes it stops after 256
# tokens, ~4 s on the starter model, instead of the chat default's 2,048
# (~35 s, during which a person's next message would wait).
TASK_MAX_TOKENS = 256

SCRATCH_TITLE = "Background task"

# Open WebUI's task prompts (``backend/open_webui/config.py``,
# ``DEFAULT_*_PROMPT_TEMPLATE``): those of titles, tags, follow-ups, search
# queries, image prompts and autocompletion open with this heading, and the
# line after it says which task it is.
_TASK_HEADING = "### Task:"
_TASK_WORDS = (
    ("follow-up", "follow-ups"),
    ("title", "title"),
    ("tags", "tags"),
    ("search quer", "queries"),
    ("autocompletion", "autocomplete"),
    ("image generation", "image prompt"),
)
# Its other one-shot prompts, by their opening words.
_OTHER_OPENINGS = (
    ("Your task is to reflect the speaker's likely facial expression", "emoji"),
    ("You have been provided with a set of responses from various models", "merge"),
)
# Its tool choice without native tool calls: a system prompt listing them.
_TOOL_CHOICE = ("Available Tools:", "Your task is to choose and return the correct")

# Databases whose scratch left by an earlier process was deleted already.
_CLEARED: weakref.WeakSet[Database] = weakref.WeakSet()


def kind_of(request: ChatRequest) -> str | None:
    """The kind of background task ``request`` is ("title", "tags", …),
    recognised by Open WebUI's prompts; None for a person's message."""
    system = request.system.lstrip()
    if system.startswith(_TOOL_CHOICE[0]) and _TOOL_CHOICE[1] in system:
        return "tool choice"
    users = [turn.text for turn in request.turns if turn.role == "user"]
    text = users[-1].lstrip() if users else ""
    if text.startswith(_TASK_HEADING):
        what = text[len(_TASK_HEADING) :].split("###", 1)[0].lower()
        return next((kind for word, kind in _TASK_WORDS if word in what), "task")
    return next(
        (kind for opening, kind in _OTHER_OPENINGS if text.startswith(opening)), None
    )


def bounded(request: ChatRequest) -> ChatRequest:
    """``request`` with ``TASK_MAX_TOKENS`` where its client asked no limit."""
    if request.limited:
        return request
    return replace(
        request, sampling=replace(request.sampling, max_tokens=TASK_MAX_TOKENS)
    )


def open_scratch(
    service: ConversationService, request: ChatRequest, client: str | None
) -> int:
    """A hidden conversation for one task, starting with the request's
    system prompt and tools; its id."""
    _clear_leftovers(service)
    conversation_id, _root = service.new_conversation(
        request.system or None,
        SCRATCH_TITLE,
        origin=Origin.LOCAL_SERVER_TASK,
        client=client,
        tools=list(request.tools.tools),
    )
    return conversation_id


def close(service: ConversationService, conversation_id: int) -> None:
    """Delete a task's scratch conversation with its nodes (it was answered
    without checkpoints: ``ConversationService.without_checkpoints``)."""
    service.delete_conversation(conversation_id)


def _clear_leftovers(service: ConversationService) -> None:
    # Scratch of a process that died while answering a task, once per
    # database and process: later ones are this process's own, each deleted
    # after its answer.
    if service.db in _CLEARED:
        return
    with service.db.read_raw() as raw:
        leftovers = conversation_listing.hidden_conversations(
            raw, Origin.LOCAL_SERVER_TASK
        )
    for conversation_id in leftovers:
        log.info("deleting the scratch of an unfinished task: %s", conversation_id)
        service.delete_conversation(conversation_id)
    _CLEARED.add(service.db)
