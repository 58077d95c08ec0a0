"""The jobs: what the window asks of whoever runs them (Qt-free, picklable).

The contract between the window (``app/window``, ``app/qt``) and the runner
(``app/runner``), below both: it imports neither, nor Qt
(``tests/system/test_layering.py``). Jobs are plain frozen dataclasses queued through
one signal, so they run one at a time on the engine thread (or in its child
process) in the order they were asked for. What each one did comes back as one
of ``app.jobs.results``.

Each job carries its own words and its result type, so that a new job is its
class here plus one ``case`` where it runs (``app/runner/job_runner.py``
``_dispatch``) and one where its result is handled (``app/window/presenter.py``
``on_finished``). The words, declared on ``BaseJob`` (``app/jobs/base.py``):

- ``busy``: what the status bar says while it runs (None: nothing);
- ``progress(done, total)``: what it says as the job reports progress;
- ``failure``: the title of the message that says it failed;
- ``result_type``: the result it makes when it succeeds.

The jobs that stream a reply (and can be stopped) are ``Generating``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.jobs.base import BaseJob
from app.jobs.results import (
    Counted,
    Created,
    Deleted,
    Done,
    Freed,
    ModelLoaded,
    Moved,
    Replied,
)
from app.mcp.config import ServerConfig
from app.preferences import Preferences
from app.text.quantities import format_bytes


class Generating(BaseJob):
    """A job that streams a reply (or several), and can be stopped."""

    busy = "Generating…"
    failure = "Could not generate a reply"
    result_type = Replied

    def progress(self, done: int, total: int) -> str | None:
        """The prompt read so far, in tokens."""
        return f"Reading the prompt… {done:,} of {total:,} tokens"


class WithTools(Generating):
    """A reply with the MCP servers' tools offered, and the tool loop after
    it (``app.conversation.tool_loop``)."""

    failure = "Could not go on with the tools"


@dataclass(frozen=True)
class LoadModel(BaseJob):
    """Load (or replace) the model; cannot be cancelled."""

    busy = "Loading the model…"
    failure = "Could not load the model"
    result_type = ModelLoaded

    def progress(self, done: int, total: int) -> str | None:
        """How much of the model is loaded, in percent."""
        return f"Loading the model… {done * 100 // max(total, 1)}%"

    path: Path
    settings: BackendSettings


@dataclass(frozen=True)
class NewConversation(BaseJob):
    """Create a conversation with an optional system prompt and title.

    ``sampling`` None: its replies use the Settings' sampling; else these,
    from the preset named ``preset`` if any.
    """

    failure = "Could not create the conversation"
    result_type = Created

    system_prompt: str | None
    title: str | None = None
    sampling: SamplingParams | None = None
    preset: str | None = None


@dataclass(frozen=True)
class NewSystemPrompt(BaseJob):
    """A new root with ``system_prompt``: a branch of its own, nothing erased."""

    failure = "Could not change the system prompt"
    result_type = Created

    conversation_id: int
    system_prompt: str


@dataclass(frozen=True)
class SetSampling(BaseJob):
    """The sampling a conversation's replies use (None: the Settings')."""

    failure = "Could not change the sampling"
    result_type = Done

    conversation_id: int
    sampling: SamplingParams | None
    preset: str | None = None


@dataclass(frozen=True)
class Send(Generating):
    """A user message under ``parent_id`` (root or assistant), and its reply."""

    parent_id: int
    text: str
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class Edit(Generating):
    """An edited sibling of user message ``node_id``, and its reply."""

    node_id: int
    text: str
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class Regenerate(Generating):
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
class RegenerateParallel(Generating):
    """``n`` new replies generated together beside reply (or under user message)
    ``node_id``; they stream side by side."""

    node_id: int
    params: SamplingParams
    n: int
    budget_bytes: int | None = None


@dataclass(frozen=True)
class GenerateReply(Generating):
    """A (new) reply to user message ``node_id``."""

    node_id: int
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class SendWithTools(WithTools):
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
class AnswerCalls(WithTools):
    """The user's decisions on the calls of reply ``node_id`` that have no
    result yet: each ``(call_id, "run" | "deny")``; a call not named waits
    (and so do those after it). The loop goes on after the results."""

    # The calls decided run first; the model replies after them.
    busy = "Running the tool…"

    node_id: int
    decisions: tuple[tuple[str, str], ...]
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class EditCallArguments(WithTools):
    """A sibling of reply ``node_id`` whose call ``call_id`` has
    ``arguments`` (the JSON text of an object) instead: that call runs, the
    others are decided as their permissions say, and the loop goes on."""

    # The calls decided run first; the model replies after them.
    busy = "Running the tool…"

    node_id: int
    call_id: str
    arguments: str
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class EditToolResult(WithTools):
    """A sibling of tool result ``node_id`` that reads ``text``, and the loop
    going on from it: the reply's later calls are answered (one that asks
    waits), then the model replies."""

    node_id: int
    text: str
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class SaveToolServers(BaseJob):
    """Store ``servers`` as the user's MCP servers; the servers running are
    stopped, so that the next tool use starts them as configured now."""

    failure = "Could not save the tool servers"
    result_type = Done

    servers: tuple[ServerConfig, ...]


@dataclass(frozen=True)
class Restore(BaseJob):
    """Put the engine at the end of ``node_id``'s path."""

    busy = "Restoring…"
    failure = "Could not go to that message"
    result_type = Moved

    def progress(self, done: int, total: int) -> str | None:
        """The tokens of the branch read again so far."""
        return f"Reading this branch again… {done:,} of {total:,} tokens"

    node_id: int


@dataclass(frozen=True)
class DeleteBranch(BaseJob):
    """Delete ``node_id`` and everything below it."""

    busy = "Deleting…"
    failure = "Could not delete the branch"
    result_type = Moved

    node_id: int


@dataclass(frozen=True)
class SetActiveNode(BaseJob):
    """Remember ``node_id`` as where its conversation continues (no restore)."""

    failure = "Could not save your place"
    result_type = Moved

    node_id: int


@dataclass(frozen=True)
class RenameConversation(BaseJob):
    """Give a conversation a new title."""

    failure = "Could not rename the conversation"
    result_type = Done

    conversation_id: int
    title: str


@dataclass(frozen=True)
class DeleteConversation(BaseJob):
    """Delete a conversation with every message and checkpoint in it."""

    busy = "Deleting…"
    failure = "Could not delete the conversation"
    result_type = Deleted

    conversation_id: int


@dataclass(frozen=True)
class ImportConversation(BaseJob):
    """Create a conversation from an exported file's JSON (read by the window).

    ``data`` is checked here, on the worker, and written in one transaction.
    """

    failure = "Could not import the conversation"
    result_type = Created

    data: Any


@dataclass(frozen=True)
class EvictCheckpoints(BaseJob):
    """Delete least recently used checkpoints until they fit ``budget_bytes``."""

    busy = "Deleting checkpoints…"
    failure = "Cannot evict checkpoints"
    result_type = Freed

    def progress(self, done: int, total: int) -> str | None:
        """The checkpoint bytes freed so far."""
        return f"Freeing space… {format_bytes(done)} of {format_bytes(total)}"

    budget_bytes: int


@dataclass(frozen=True)
class ClearCheckpoints(BaseJob):
    """Delete every checkpoint (messages stay: they are reprocessed when needed)."""

    busy = "Deleting checkpoints…"
    failure = "Cannot clear checkpoints"
    result_type = Freed


@dataclass(frozen=True)
class SetContextSize(BaseJob):
    """Store the context size a conversation's model loads with (None: the
    Settings' own); loading the model with it is a ``LoadModel`` of its own."""

    failure = "Could not keep the context size for this conversation"
    result_type = Done

    conversation_id: int
    size: int | None


@dataclass(frozen=True)
class SetReasoning(BaseJob):
    """Store a conversation's reasoning choice; its next reply uses it.

    ``choice`` is one of the model's ``reasoning_choices``, or None for the
    template's default.
    """

    failure = "Could not change the reasoning setting"
    result_type = Done

    conversation_id: int
    choice: str | None


@dataclass(frozen=True)
class SavePreferences(BaseJob):
    """Store the user's preferences (the window keeps using them at once)."""

    failure = "Could not save the settings"
    result_type = Done

    prefs: Preferences


@dataclass(frozen=True)
class ContinueWithSummary(BaseJob):
    """Start a conversation from the model's summary of ``node_id``'s path."""

    busy = "Summarizing this branch…"
    failure = "Could not continue from a summary"
    result_type = Created

    def progress(self, done: int, total: int) -> str | None:
        """The tokens of the branch read so far, before the summary."""
        return f"Reading the branch to summarize… {done:,} of {total:,} tokens"

    node_id: int
    params: SamplingParams


@dataclass(frozen=True)
class ContinueReply(Generating):
    """A longer sibling of reply ``node_id``, which ended at the length limit."""

    node_id: int
    params: SamplingParams
    budget_bytes: int | None = None


@dataclass(frozen=True)
class CountTokens(BaseJob):
    """How many tokens ``text`` (a file to attach, named ``name``) takes."""

    failure = "Could not attach the file"
    result_type = Counted

    name: str
    text: str


@dataclass(frozen=True)
class ServeRequest(BaseJob):
    """Work for the local server (``app/server``): ``run`` is called with the
    service and its result or exception ends ``future``, which the server
    waits on. Its failures are the client's to hear, not the window's."""

    busy = "Serving a request (local server)…"
    failure = "Could not answer the local server's request"
    result_type = Done

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
    | SetContextSize
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
