"""The closed sets of words stored with a node (its role and its status) and
with a conversation (where it was made).

``StrEnum``s, so a stored value reads back as the same word (``Role.USER ==
"user"``) and code that names one cannot misspell it.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """Who a node speaks for; the root holds the system prompt."""

    ROOT = "root"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"  # what a tool returned to a reply's call


class Status(StrEnum):
    """How a node's text came to an end."""

    COMPLETE = "complete"  # a whole message or reply
    GENERATING = "generating"  # a reply being written (or left so by a crash)
    INTERRUPTED = "interrupted"  # a reply whose process died while writing it
    STOPPED = "stopped"  # a reply the user stopped, closed as a turn
    TRUNCATED = "truncated"  # a reply cut off by a full context


class Origin(StrEnum):
    """Where a conversation was made, when not in the window or the CLI
    (those store None): the list marks it."""

    LOCAL_SERVER = "local server"  # by a client of the OpenAI-compatible API
    # Scratch of the local server for a client's background task (a title,
    # tags, follow-up questions): lives for one answer, never listed.
    LOCAL_SERVER_TASK = "local server task"


# Conversations that no list shows (the window's, ``arbor list``): scratch
# that lives for one answer and is deleted after it.
HIDDEN_ORIGINS = frozenset({Origin.LOCAL_SERVER_TASK})
