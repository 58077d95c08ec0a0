"""Requests the window sends to the engine worker (Qt-free).

Jobs are plain frozen dataclasses queued through one signal, so they run one at
a time on the engine thread in the order they were asked for. What each one
did comes back as one of ``app.window.job_results``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.mcp.config import ServerConfig
from app.preferences import Preferences


@dataclass(frozen=True)
class LoadModel:
    """Load (or replace) the model; cannot be cancelled."""

    path: Path
    settings: BackendSettings


@dataclass(frozen=True)
class NewConversation:
    """Create a conversation with an optional system prompt and title.

    ``sampling`` None: its replies use the Settings' sampling; else these,
    from the preset named ``preset`` if any.
    """

    system_prompt: str | None
    title: str | None = None
    sampling: SamplingParams | None = None
    preset: str | None = None


@dataclass(frozen=True)
class NewSystemPrompt:
    """A new root with ``system_prompt``: a branch of its own, nothing erased."""

    conversation_id: int
    system_prompt: str


@dataclass(frozen=True)
class SetSampling:
    """The sampling a conversation's replies use (None: the Settings')."""

    conversation_id: int
    sampling: SamplingParams | None
    preset: str | None = None


@dataclass(frozen=True)
class Send:
    """A user message under ``parent_id`` (root or assistant), and its reply."""

    parent_id: int
    text: str
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class Edit:
    """An edited sibling of user message ``node_id``, and its reply."""

    node_id: int
    text: str
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class Regenerate:
    """A new reply beside assistant message ``node_id``.

    In a branch whose start offers tools the reply may call them, as
    ``SendWithTools``'s does (``tool_choice`` likewise), and the tool loop
    goes on after it; elsewhere ``tool_choice`` is not read.
    """

    node_id: int
    params: SamplingParams
    budget_bytes: int | None = None
    tool_choice: str = "auto"


@dataclass(frozen=True)
class RegenerateParallel:
    """``n`` new replies generated together beside reply (or under user message)
    ``node_id``; they stream side by side."""

    node_id: int
    params: SamplingParams
    n: int
    budget_bytes: int | None = None


@dataclass(frozen=True)
class GenerateReply:
    """A (new) reply to user message ``node_id``."""

    node_id: int
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class SendWithTools:
    """A user message under ``parent_id`` with the enabled MCP servers' tools
    offered, and the tool loop after it (``app.conversation.tool_loop``).

    The branch goes on under a start that offers those tools (found, or
    made with the branch copied under it). A call whose tool's permission
    is "always" runs, "never" is denied, "ask" waits: the turn ends with
    ``Ending.NEEDS_APPROVAL`` and ``AnswerCalls`` takes it up. ``tool_choice``
    shapes the first reply: ``"auto"`` (the model decides), ``"required"``
    (a call), ``"none"`` or a tool's offered name.
    """

    parent_id: int
    text: str
    params: SamplingParams
    budget_bytes: int | None = None
    tool_choice: str = "auto"


@dataclass(frozen=True)
class AnswerCalls:
    """The user's decisions on the calls of reply ``node_id`` that have no
    result yet: each ``(call_id, "run" | "deny")``; a call not named waits
    (and so do those after it). The loop goes on after the results."""

    node_id: int
    decisions: tuple[tuple[str, str], ...]
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class EditCallArguments:
    """A sibling of reply ``node_id`` whose call ``call_id`` has
    ``arguments`` (the JSON text of an object) instead: that call runs, the
    others are decided as their permissions say, and the loop goes on."""

    node_id: int
    call_id: str
    arguments: str
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class EditToolResult:
    """A sibling of tool result ``node_id`` that reads ``text``, and the loop
    going on from it: the reply's later calls are answered (one that asks
    waits), then the model replies."""

    node_id: int
    text: str
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class SaveToolServers:
    """Store ``servers`` as the user's MCP servers; the servers running are
    stopped, so that the next tool use starts them as configured now."""

    servers: tuple[ServerConfig, ...]


@dataclass(frozen=True)
class Restore:
    """Put the engine at the end of ``node_id``'s path."""

    node_id: int


@dataclass(frozen=True)
class DeleteBranch:
    """Delete ``node_id`` and everything below it."""

    node_id: int


@dataclass(frozen=True)
class SetActiveNode:
    """Remember ``node_id`` as where its conversation continues (no restore)."""

    node_id: int


@dataclass(frozen=True)
class RenameConversation:
    """Give a conversation a new title."""

    conversation_id: int
    title: str


@dataclass(frozen=True)
class DeleteConversation:
    """Delete a conversation with every message and checkpoint in it."""

    conversation_id: int


@dataclass(frozen=True)
class ImportConversation:
    """Create a conversation from an exported file's JSON (read by the window).

    ``data`` is checked here, on the worker, and written in one transaction.
    """

    data: Any


@dataclass(frozen=True)
class EvictCheckpoints:
    """Delete least recently used checkpoints until they fit ``budget_bytes``."""

    budget_bytes: int


@dataclass(frozen=True)
class ClearCheckpoints:
    """Delete every checkpoint (messages stay: they are reprocessed when needed)."""


@dataclass(frozen=True)
class SetReasoning:
    """Store a conversation's reasoning choice; its next reply uses it.

    ``choice`` is one of the model's ``reasoning_choices``, or None for the
    template's default.
    """

    conversation_id: int
    choice: str | None


@dataclass(frozen=True)
class SavePreferences:
    """Store the user's preferences (the window keeps using them at once)."""

    prefs: Preferences


@dataclass(frozen=True)
class ContinueWithSummary:
    """Start a conversation from the model's summary of ``node_id``'s path."""

    node_id: int
    params: SamplingParams


@dataclass(frozen=True)
class ContinueReply:
    """A longer sibling of reply ``node_id``, which ended at the length limit."""

    node_id: int
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class CountTokens:
    """How many tokens ``text`` (a file to attach, named ``name``) takes."""

    name: str
    text: str


@dataclass(frozen=True)
class ServeRequest:
    """Work for the local server (``app/server``): ``run`` is called with the
    service and its result or exception ends ``future``, which the server
    waits on. Its failures are the client's to hear, not the window's."""

    # Called with the engine worker's ConversationService (unnamed here: the
    # window side does not name what drives the engine).
    run: Callable[[Any], Any]
    future: Future[Any]


Job = (
    LoadModel
    | NewConversation
    | NewSystemPrompt
    | SetSampling
    | Send
    | Edit
    | Regenerate
    | RegenerateParallel
    | GenerateReply
    | Restore
    | SetActiveNode
    | DeleteBranch
    | SetReasoning
    | RenameConversation
    | DeleteConversation
    | ImportConversation
    | EvictCheckpoints
    | ClearCheckpoints
    | SavePreferences
    | ContinueWithSummary
    | CountTokens
    | ContinueReply
    | ServeRequest
    | SendWithTools
    | AnswerCalls
    | EditCallArguments
    | EditToolResult
    | SaveToolServers
)


def is_generating(job: Job | None) -> bool:
    """Whether ``job`` streams a reply (and can be stopped)."""
    match job:
        case (
            Send()
            | Edit()
            | Regenerate()
            | RegenerateParallel()
            | GenerateReply()
            | ContinueReply()
            | SendWithTools()
            | AnswerCalls()
            | EditCallArguments()
            | EditToolResult()
        ):
            return True
        case _:
            return False
