"""The conversation service: what the window and the CLI drive (no Qt here).

It owns one engine and keeps it positioned on some node of some conversation.
Every operation that produces text (send, edit, regenerate) first moves the
engine to the parent node (see ``context_sync``), commits the user's message,
then streams the reply. Nothing is ever overwritten: edits and regenerations
add siblings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from app.backend.errors import ContextFullError
from app.backend.reasoning import ANSWER, THINKING
from app.backend.values import MAX_FORKS, SamplingParams, StateKind
from app.conversation import batches, spans, summary
from app.conversation.batches import Batches
from app.conversation.checkpoint_writer import CheckpointSink, DirectWriter
from app.conversation.context_sync import ContextSync, write_batches
from app.conversation.errors import ServiceError
from app.conversation.generation import (
    NOTHING_EARLIER,
    Earlier,
    ReplyPipeline,
    ReplyPlan,
)
from app.conversation.presets import stored_sampling
from app.conversation.prompt_completion import PromptCompletion, complete_prompt
from app.conversation.reply_shape import FREE, ReplyShape
from app.conversation.results import (
    Reply,
    ReplyStats,
    Restored,
    StopReason,
    SyncStats,
)
from app.conversation.spans import Placement
from app.conversation.streams import (
    NO_ALTERNATIVE_STREAMS,
    NO_STREAMS,
    AlternativeStreams,
    StopCheck,
    Streams,
)
from app.conversation.titles import title_from
from app.conversation.tree_cache import TreeCache
from storage import (
    checkpoint_rows,
    conversation_rows,
    exchange,
    node_rows,
    setting_rows,
    tool_use,
    tree_reads,
)
from storage.conversation_listing import ConversationRecord
from storage.db import Database
from storage.errors import NotFound, StorageUnavailable
from storage.records import DeletedBranch, NodeRecord, NodeSummary, StartSpan
from storage.values import Origin, Role, Status

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine

log = logging.getLogger(__name__)

# Starts whose span and message header the service remembers (system
# prompts in use at once).
_REMEMBERED_STARTS = 16

K = TypeVar("K")
V = TypeVar("V")


def _remembered(cache: dict[K, V], key: K, make: Callable[[], V]) -> V:
    """``cache[key]``, made first if missing; the oldest entry goes beyond
    ``_REMEMBERED_STARTS``."""
    if key not in cache:
        if len(cache) >= _REMEMBERED_STARTS:
            cache.pop(next(iter(cache)))
        cache[key] = make()
    return cache[key]


def _variables_key(variables: dict[str, Any]) -> str:
    """Template variables as a cache key (tools are lists of dicts)."""
    return json.dumps(variables, sort_keys=True, default=str)


# The nodes a reply answers.
_ANSWERED_ROLES = (Role.USER, Role.TOOL)

# Who may follow whom in a conversation's tree.
_PARENT_ROLES = {
    Role.USER: (Role.ROOT, Role.ASSISTANT, Role.TOOL),
    Role.ASSISTANT: (Role.USER, Role.TOOL),
    # A reply's calls are answered one result after another.
    Role.TOOL: (Role.ASSISTANT, Role.TOOL),
}


@dataclass(frozen=True)
class _Choice:
    """One reply to generate: how it samples, where it streams, and what
    its node records besides the parameters and the model."""

    params: SamplingParams
    streams: Streams
    generation: dict[str, Any] = field(default_factory=dict)
    shape: ReplyShape = FREE


def _check_text(text: str | None, what: str) -> None:
    """Refuse text that SQLite and the tokenizer cannot take.

    A Python str can hold lone surrogates (undecodable bytes from a command
    line, a broken paste): they have no UTF-8 form.
    """
    try:
        if text is not None:
            text.encode("utf-8")
    except UnicodeEncodeError:
        raise ServiceError(f"The {what} is not valid UTF-8.") from None


class ConversationService:
    """Conversations as trees, each node restorable through its checkpoint.

    Parameters
    ----------
    db
        The open database.
    engine
        The loaded model, or None for operations that need no model
        (listing, showing, deleting).
    checkpoints
        Where checkpoints go: a ``CheckpointWriter`` writes them on its own
        thread (then ``close`` the service, or use it as a context manager);
        by default each is written at once on the calling thread.

    Notes
    -----
    With a queued writer, a write that failed (disk full, read-only,
    locked) is raised as ``StorageUnavailable`` by the next call that moves
    or generates, or by ``flush_checkpoints`` and ``close``. A send waits
    for its user message's checkpoint before it stores a reply, so that a
    disk too full for it fails the send while the message is still
    unanswered (a retry then answers it once), as when writes were direct.
    """

    def __init__(
        self,
        db: Database,
        engine: LlamaEngine | None = None,
        checkpoints: CheckpointSink | None = None,
    ) -> None:
        self.db = db
        self.engine = engine
        self._checkpoints = checkpoints if checkpoints is not None else DirectWriter(db)
        self._saving = True  # False: nodes are stored without checkpoints
        self._sync: ContextSync | None = None
        self.profile_id: int | None = None
        if engine is not None:
            self.profile_id = checkpoint_rows.ensure_profile(
                db, engine.profile_fingerprint, engine.profile_details
            )
        # The open conversation's tree, so that a move reads only checkpoints.
        self._tree = TreeCache(db, self.profile_id)
        # The role header of messages under a start (``_header_length``), and
        # the spans of starts (``_start_span``), for the loaded model.
        self._headers: dict[tuple[str, tuple[int, ...], str], list[int]] = {}
        self._start_spans: dict[tuple[str, str, str], StartSpan] = {}
        if engine is not None:
            assert self.profile_id is not None
            self._sync = ContextSync(
                db,
                engine,
                self.profile_id,
                self._store_checkpoint,
                self._tree,
                self._checkpoints.settle,
                # Written at once: a reprocess's checkpoints in few transactions.
                write_batches(db, self.profile_id, engine.state_kind)
                if isinstance(self._checkpoints, DirectWriter)
                else None,
            )
            self._remember_vocab(engine)

    def _remember_vocab(self, engine: LlamaEngine) -> None:
        """Give the engine its vocabulary identity from the database, or store it.

        Hashing the vocabulary costs ~20 ms of start-up; it only changes with
        the model file, so one hash per model serves every later start.
        """
        key = f"vocab_id:{engine.vocab_key}"
        known = setting_rows.get_setting(self.db, key)
        if isinstance(known, str):
            engine.adopt_vocab_id(known)
        elif not (self.db.read_only or self.db.space_low):
            setting_rows.set_setting(self.db, key, engine.vocab_id)

    def __enter__(self) -> ConversationService:
        """Use the service in a ``with`` block that closes it."""
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_exc: object) -> None:
        """Close the service; after an exception, that exception is the one raised."""
        if exc_type is None:
            self.close()
            return
        try:
            self.close()
        except Exception:
            log.warning("a checkpoint write also failed", exc_info=True)

    def flush_checkpoints(self) -> None:
        """Wait until every checkpoint asked for is written.

        Raises ``StorageUnavailable`` (or the bug's own exception) if one
        could not be written and that was not reported yet.
        """
        self._checkpoints.flush()
        self._raise_write_failure()

    def close(self) -> None:
        """Write every queued checkpoint and stop the writer (the engine stays).

        Raises like ``flush_checkpoints``; the writer is stopped either way.
        """
        try:
            self.flush_checkpoints()
        finally:
            self._checkpoints.close()

    # --- reading ----------------------------------------------------------------

    def list_conversations(
        self, text_filter: str | None = None
    ) -> list[ConversationRecord]:
        """Conversations, most recent first."""
        return conversation_rows.list_conversations(self.db, text_filter)

    def path(self, node_id: int) -> list[NodeRecord]:
        """Nodes from the root to ``node_id`` (from the tree cache when fresh)."""
        return self._tree.path(node_id)

    def tree(self, conversation_id: int) -> list[NodeSummary]:
        """All nodes of a conversation, parents first."""
        return tree_reads.tree(self.db, conversation_id, self.profile_id)

    # --- changing the tree --------------------------------------------------------

    def new_conversation(
        self,
        system_prompt: str | None = None,
        title: str | None = None,
        sampling: SamplingParams | None = None,
        preset: str | None = None,
        origin: Origin | None = None,
        client: str | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> tuple[int, int]:
        """Create a conversation; return its id and its root node's id.

        ``sampling``: what its replies use (None: the Settings'), from the
        preset named ``preset`` if any. ``origin``: where it is made, when
        not in the window or the CLI (the list marks it); ``client``: the
        program that made it, where known. ``tools``: those its start offers
        the model (OpenAI's shape).
        """
        _check_text(system_prompt, "system prompt")
        _check_text(title, "title")
        conversation, root = conversation_rows.create_conversation(
            self.db,
            title,
            system_prompt,
            stored_sampling(sampling, preset),
            origin,
            self._start_span(system_prompt, tools=tools),
            client=client,
            tool_use=tool_use.offering(tools or []),
        )
        return conversation.id, root.id

    def new_system_prompt(
        self,
        conversation_id: int,
        system_prompt: str,
        tools: list[dict[str, Any]] | None = None,
        servers: Mapping[str, str] | None = None,
    ) -> int:
        """Start a branch of the conversation from a new root with
        ``system_prompt`` (and ``tools`` offered, each from the MCP server
        ``servers`` names for it); return the root's id. Nothing is erased:
        the earlier system prompts keep their branches."""
        _check_text(system_prompt, "system prompt")
        text = system_prompt.strip()
        root = conversation_rows.add_root(
            self.db,
            conversation_id,
            text,
            self._start_span(text, conversation_id, tools),
            tool_use.offering(tools or [], servers),
        )
        return root.id

    def add_message(
        self,
        parent_id: int,
        role: Role,
        text: str,
        use: dict[str, Any] | None = None,
    ) -> int:
        """Add a message written elsewhere under ``parent_id``, without
        generating: a user message under a start or a reply, a reply under a
        user message or a tool result, or a tool result under a reply that
        called tools or another result (a history an API client sends).
        ``use`` is its part in tool use (``storage.tool_use``). Returns its id.

        Its span is rendered and decoded on the way to a node below it, and
        checkpointed then, like an imported message's.
        """
        parent = node_rows.get_node(self.db, parent_id)
        if parent.role not in _PARENT_ROLES.get(role, ()):
            raise ServiceError(f"A {role} message cannot follow a {parent.role} node.")
        _check_text(text, "message")
        first = role == Role.USER and parent.parent_id is None
        with self.db.adding() as added:
            node = node_rows.add_node(
                self.db,
                parent_id,
                role,
                text,
                tool_use=use,
                title_if_unnamed=title_from(text) if first else None,
            )
            added.add(node.id)
        return node.id

    def stored_sampling(self, node_id: int) -> dict[str, Any] | None:
        """The sampling stored with ``node_id``'s conversation (None: none)."""
        node = node_rows.get_node(self.db, node_id)
        return conversation_rows.get_conversation(
            self.db, node.conversation_id
        ).sampling

    def set_sampling(
        self,
        conversation_id: int,
        sampling: SamplingParams | None,
        preset: str | None = None,
    ) -> None:
        """Store the sampling the conversation's replies use (None: the
        Settings'), from the preset named ``preset`` if any."""
        conversation_rows.set_conversation_sampling(
            self.db, conversation_id, stored_sampling(sampling, preset)
        )

    def _start_span(
        self,
        system_prompt: str | None,
        conversation_id: int | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> StartSpan | None:
        """The span of a start with ``system_prompt`` in the conversation
        (None: a new one), for the loaded model (None without one), so that
        its first visit decodes it, or restores or keeps the cells of another
        start with the same span (``context_sync``). Rendered once per prompt
        and reasoning choice: a client of the local server starts many
        conversations with the same system prompt."""
        engine = self.engine
        if engine is None:
            return None
        variables = self._variables(conversation_id)
        if tools:
            variables["tools"] = tools

        def render() -> StartSpan:
            placement = spans.start_span(engine, system_prompt, variables)
            return StartSpan(tuple(placement.tokens), placement.text, engine.vocab_id)

        key = (engine.vocab_id, system_prompt or "", _variables_key(variables))
        return _remembered(self._start_spans, key, render)

    def set_context_size(self, conversation_id: int, size: int | None) -> None:
        """Store the context size a conversation's model loads with; None is
        the Settings' own. Nothing is loaded here: that is the caller's."""
        conversation_rows.set_context_size(self.db, conversation_id, size)

    def set_reasoning(self, conversation_id: int, choice: str | None) -> None:
        """Store a conversation's reasoning choice; None is the template's default."""
        engine = self.engine
        switch = engine.reasoning_switch if engine is not None else None
        if choice is not None and engine is not None and switch is None:
            raise ServiceError("This model's chat template has no reasoning switch.")
        if choice is not None and switch is not None and choice not in switch.choices:
            raise ServiceError(
                f"Reasoning {choice!r} is not one of this model's choices: "
                + ", ".join(switch.choices)
                + "."
            )
        conversation_rows.set_reasoning(self.db, conversation_id, choice)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Give a conversation a new title."""
        _check_text(title, "title")
        if not title.strip():
            raise ServiceError("A conversation's title cannot be empty.")
        conversation_rows.rename_conversation(self.db, conversation_id, title)

    def import_conversation(self, data: Any) -> exchange.ImportResult:
        """Create a conversation from an exported file's JSON; say what was made.

        ``ExchangeError`` names what is wrong with ``data``; nothing is then
        written.
        """
        return exchange.import_json(self.db, data)

    def set_active_node(self, node_id: int) -> int:
        """Remember ``node_id`` as where its conversation continues (the engine
        stays where it is; ``restore`` moves it); return the conversation's id."""
        return conversation_rows.set_active_node(self.db, node_id)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation with every message and checkpoint in it."""
        # Queued writes land first, so the deletion takes their bytes with it
        # (one landing later would find its node gone and be dropped).
        self._checkpoints.flush()
        sync = self._sync
        if sync and sync.loaded and sync.loaded[0].conversation_id == conversation_id:
            sync.forget()  # the context holds what is about to go
        conversation_rows.delete_conversation(self.db, conversation_id)

    def clear_checkpoints(self, conversation_id: int | None = None) -> int:
        """Delete the checkpoints of one conversation (or all); return bytes freed.

        Messages stay: a node without a checkpoint is rebuilt when visited.
        """
        # A queued write landing after the clearing would bring one back.
        self._checkpoints.flush()
        if conversation_id is not None:
            conversation_rows.get_conversation(self.db, conversation_id)  # NotFound
        return checkpoint_rows.delete_checkpoints(
            self.db, conversation_id=conversation_id
        )

    def evict_checkpoints(
        self,
        budget_bytes: int,
        progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Delete least recently used checkpoints beyond ``budget_bytes``.

        Queued checkpoints are written first, so that they count. Returns the
        bytes freed; ``progress(done, total)`` is told them as they go.
        """
        self._checkpoints.flush()
        return checkpoint_rows.evict_checkpoints(self.db, budget_bytes, progress)

    def delete_branch(self, node_id: int) -> DeletedBranch:
        """Delete a node and everything under it; say where that left its
        conversation (the parent, or for a start of several the first other
        start; and the active node, moved there if it was deleted)."""
        self._checkpoints.flush()  # a queued write would bring one back
        try:
            deleted = node_rows.delete_subtree(self.db, node_id)
        except ValueError as exc:  # the only start (storage decides)
            raise ServiceError(
                "The start of a conversation cannot be deleted (delete the "
                "conversation instead)."
            ) from exc
        if self._sync is not None:
            self._sync.drop(node_id)  # the context no longer holds it
        return deleted

    # --- moving and generating ----------------------------------------------------

    def restore(self, node_id: int) -> Restored:
        """Put the engine at the end of ``node_id``'s path (e.g. a click on a node).

        Nothing is written on the way: ``node_id`` becomes the conversation's
        active node, and the checkpoints used count as used, a moment later
        (``conversation_rows.defer_active_node``; a process killed right then
        reopens where it was before this restore).
        """
        self._raise_write_failure()
        path, _variables = self._ensured_path(node_id)
        stats = self._move_to(path)
        conversation_id = path[0].conversation_id
        conversation_rows.defer_active_node(self.db, conversation_id, node_id)
        return Restored(
            **asdict(stats), conversation_id=conversation_id, node_id=node_id
        )

    def send(
        self,
        parent_id: int,
        text: str,
        params: SamplingParams,
        streams: Streams = NO_STREAMS,
        shape: ReplyShape = FREE,
    ) -> Reply:
        """Add a user message under ``parent_id`` (root or reply) and reply to it.

        The answer and the reasoning of a model that thinks go to
        ``streams`` as they come; its ``should_stop`` ends the reply early.
        ``shape``: a grammar the reply follows, and the tool syntax its calls
        are read with. If ``parent_id`` already holds this very message with
        no reply (an earlier attempt whose reply failed), that message is
        answered instead of adding a copy; ``Reply.user_node`` is then its id.
        """
        parent = self._tree.path(parent_id)[-1]
        if parent.role == Role.USER:
            raise ServiceError(
                f"Node {parent_id} is a user message; send continues from an "
                "assistant reply or the conversation start (regenerate answers "
                "a user message)."
            )
        return self._add_user_and_reply(parent_id, text, params, streams, shape)

    def edit(
        self,
        user_node_id: int,
        text: str,
        params: SamplingParams,
        streams: Streams = NO_STREAMS,
    ) -> Reply:
        """Add an edited copy of a user message as its sibling, and reply to it."""
        node = node_rows.get_node(self.db, user_node_id)
        if node.role != Role.USER or node.parent_id is None:
            raise ServiceError(f"Node {user_node_id} is not a user message.")
        return self._add_user_and_reply(node.parent_id, text, params, streams)

    def regenerate(
        self,
        assistant_node_id: int,
        params: SamplingParams,
        streams: Streams = NO_STREAMS,
    ) -> Reply:
        """Generate a new reply beside an existing one (a sibling)."""
        node = node_rows.get_node(self.db, assistant_node_id)
        if node.role != Role.ASSISTANT or node.parent_id is None:
            raise ServiceError(f"Node {assistant_node_id} is not an assistant reply.")
        return self.reply(node.parent_id, params, streams)

    def reply(
        self,
        user_node_id: int,
        params: SamplingParams,
        streams: Streams = NO_STREAMS,
        shape: ReplyShape = FREE,
        prefix: str = "",
    ) -> Reply:
        """Generate a (new) assistant reply to the user message (or the tool
        result) ``user_node_id``, in ``shape`` (see ``send``).

        ``prefix``: the reply's beginning, written elsewhere (an API client's
        last assistant turn): the reply goes on from it, and its text and
        span hold it; it is not streamed.
        """
        _check_text(prefix, "reply")
        return self._reply(user_node_id, params, streams, shape=shape, prefix=prefix)

    def continue_reply(
        self,
        assistant_node_id: int,
        params: SamplingParams,
        streams: Streams = NO_STREAMS,
    ) -> Reply:
        """A longer version of a reply that ended at the length limit: a new
        sibling that starts with that reply's tokens, as decoded, and goes on
        (the reply itself stays, as branching always keeps what was)."""
        node = node_rows.get_node(self.db, assistant_node_id)
        generation = node.generation or {}
        if (
            node.role != Role.ASSISTANT
            or node.parent_id is None
            or generation.get("stop_reason") != StopReason.MAX_TOKENS
        ):
            raise ServiceError("Only a reply that ended at the length limit goes on.")
        return self._reply(node.parent_id, params, streams, going_on=node)

    def regenerate_parallel(
        self,
        node_id: int,
        params: SamplingParams,
        n: int,
        streams: AlternativeStreams = NO_ALTERNATIVE_STREAMS,
        shape: ReplyShape = FREE,
        checkpoint_all: bool = True,
    ) -> list[Reply]:
        """Generate ``n`` new replies to a user message together, as siblings.

        ``node_id`` is the user message, or one of its replies. The replies
        share the context up to their generation prompt, which is decoded
        once; each then gets its own sequence of the engine (``fork``), and
        one decode per step carries one token of every reply still going.
        Alternative ``k`` samples with seed ``seed + k`` (a random ``seed``
        when ``params`` has none); with temperature 0, where the seed plays
        no part, it starts with the ``k``-th most likely first token and
        continues greedily, so greedy alternatives differ too. Each stops on
        its own (end of turn, ``max_tokens``, its share of the context);
        ``streams.should_stop`` stops them all. Pieces stream through
        ``streams.on_token(k, piece)`` and ``streams.on_thinking(k, piece)``.

        Exactness: the cells a reply gets in such a batch are not those that
        decoding its tokens alone gives. Measured with llama-cpp-python
        0.3.36 on the CPU (a 40-token reply after a 93-token prefix, N = 2
        and 4): on the tiny test model every reply's cells differed from
        the first step, with flash attention on or off (logits up to 2.5e-3
        apart: several rows take other matmul kernels than one); on
        SmolLM2-135M (Q4_1) they were identical with flash attention, but
        with it off half of the cache bytes differed and the logits after
        restoring them were 0.7 apart (the replies' cells interleave in the
        cache, which reorders the attention sums). A checkpoint must restore
        what reprocessing the node's tokens gives, since the context sync
        reprocesses a node whose checkpoint is missing, and the nodes below
        are checkpointed on top of whichever it was. So the forks only
        sample: afterwards each reply's span is decoded again alone on the
        main sequence, in ``prompt_step`` batches (prompt speed, not generation
        speed), its node records those batch sizes as its ``chunks``, and
        its checkpoint is captured from that. Restoring it is then exact,
        and moving to it reprocesses nothing. The main sequence is left
        holding the first reply, which becomes the conversation's active node
        (where it continues and reopens). With ``checkpoint_all`` False only
        the first is decoded again now; the others keep their spans without
        a checkpoint and are decoded when first visited (a client asking the
        API for ``n`` goes on from one of them, mostly the first).

        Models whose state is one whole snapshot (recurrent, hybrid) get the
        ``n`` replies one after another instead.
        """
        engine = self._require_engine()
        self._raise_write_failure()
        if not 1 <= n <= MAX_FORKS:
            raise ServiceError(f"Between 1 and {MAX_FORKS} alternatives, not {n}.")
        node = node_rows.get_node(self.db, node_id)
        if node.role == Role.ASSISTANT and node.parent_id is not None:
            user_id = node.parent_id
        elif node.role in _ANSWERED_ROLES:
            user_id = node.id
        else:
            raise ServiceError(
                f"Node {node_id} is neither a user message nor a reply to one."
            )
        seed = params.with_seed().seed
        assert seed is not None
        seeded = [replace(params, seed=(seed + k) % 2**32) for k in range(n)]
        if engine.state_kind is StateKind.FULL:
            replies = [
                self.reply(user_id, p, streams.of(k), shape)
                for k, p in enumerate(seeded)
            ]
            return self._first_active(node.conversation_id, replies)
        path, variables = self._ensured_path(user_id)
        if path[-1].role not in _ANSWERED_ROLES:
            raise ServiceError(f"Node {user_id} is not a user message.")
        opening = spans.place_reply(engine, path, variables)
        self._check_room(opening.start_pos + len(opening.tokens) + 8 * n)
        stats = ReplyStats.after(self._move_to(opening.base))
        choices = []
        for k, p in enumerate(seeded):
            alternative: dict[str, Any] = {"index": k, "of": n}
            if p.temperature == 0 and k:
                alternative["first_token_rank"] = k
            choices.append(
                _Choice(p, streams.of(k), {"alternative": alternative}, shape)
            )
        replies = self._generate(
            path[-1],
            opening,
            None,
            choices,
            stats,
            forked=True,
            checkpoint_all=checkpoint_all,
        )
        return self._first_active(node.conversation_id, replies)

    def _first_active(self, conversation_id: int, replies: list[Reply]) -> list[Reply]:
        """``replies``, with the first recorded as the active node.

        Each reply became the active node as it was added, which left the
        last one there. The record is deferred bookkeeping, written at the
        job's end as a restore's is."""
        conversation_rows.defer_active_node(
            self.db, conversation_id, replies[0].assistant_node
        )
        return replies

    def _reply(
        self,
        user_node_id: int,
        params: SamplingParams,
        streams: Streams,
        going_on: NodeRecord | None = None,
        shape: ReplyShape = FREE,
        prefix: str = "",
    ) -> Reply:
        """A reply to ``user_node_id``; one that goes on from ``going_on``
        (a reply cut at the length limit) starts with its tokens, one with a
        ``prefix`` with that text's."""
        engine = self._require_engine()
        self._raise_write_failure()
        path, variables = self._ensured_path(user_node_id)
        if path[-1].role not in _ANSWERED_ROLES:
            raise ServiceError(f"Node {user_node_id} is not a user message.")
        opening = spans.place_reply(engine, path, variables)
        earlier = NOTHING_EARLIER
        if going_on is not None:
            before = len(opening.tokens)
            opening = self._going_on(opening, going_on)
            earlier = Earlier(
                going_on.text, going_on.thinking, len(opening.tokens) - before
            )
            # What the user sees first is the reply as it was.
            streams.emit([(THINKING, going_on.thinking), (ANSWER, going_on.text)])
        elif prefix:
            begun = engine.tokenize(prefix)
            opening = Placement(
                opening.base, opening.text + prefix, [*opening.tokens, *begun]
            )
            earlier = Earlier(prefix, "", len(begun))
        self._check_room(opening.start_pos + len(opening.tokens))
        stats = ReplyStats.after(self._move_to(opening.base))
        choice = _Choice(params.with_seed(), streams, shape=shape)
        return self._generate(
            path[-1], opening, None, [choice], stats, earlier=earlier
        )[0]

    def _going_on(self, opening: Placement, reply: NodeRecord) -> Placement:
        """``opening`` followed by what ``reply`` sampled (its span: the same
        opening, the sampled tokens, then the turn's closing)."""
        engine = self._require_engine()
        header = len(opening.tokens)
        generated = int((reply.generation or {}).get("generated_tokens", -1))
        sampled = list(reply.tokens[header : header + generated])
        if list(reply.tokens[:header]) != opening.tokens or len(sampled) != generated:
            raise ServiceError(
                "This reply cannot go on: it was written with another format or "
                "model. Regenerate it instead."
            )
        return Placement(
            opening.base,
            opening.text + engine.detokenize(sampled),
            [*opening.tokens, *sampled],
        )

    def _add_user_and_reply(
        self,
        parent_id: int,
        text: str,
        params: SamplingParams,
        streams: Streams,
        shape: ReplyShape = FREE,
    ) -> Reply:
        engine = self._require_engine()
        self._raise_write_failure()
        if not text.strip():
            raise ServiceError("The message is empty.")
        _check_text(text, "message")
        unanswered = self._unanswered_user(parent_id, text)
        if unanswered is not None:
            # An earlier attempt saved this message, then failed to reply (a
            # full disk, a model error): answer it rather than add a twin.
            reply = self._reply(unanswered.id, params, streams, shape=shape)
            return replace(reply, user_node=unanswered.id)
        path, variables = self._ensured_path(parent_id)
        placement, prompt_text = spans.place_user(engine, path, text, variables)
        prompt_tokens = engine.tokenize(prompt_text)
        self._check_room(
            placement.start_pos + len(placement.tokens) + len(prompt_tokens)
        )
        planned = self._message_batches(path, placement, len(prompt_tokens), variables)
        # The user's words are committed before any model work, so nothing they
        # typed is lost if generation fails or the process dies.
        with self.db.adding() as added:
            user = node_rows.add_node(
                self.db,
                parent_id,
                Role.USER,
                text,
                tokens=placement.tokens,
                start_pos=placement.start_pos,
                chunks=planned.recorded(),
                vocab_id=engine.vocab_id,
                span_text=placement.text,
                title_if_unnamed=title_from(text) if parent_id == path[0].id else None,
            )
            added.add(user.id)
        stats = ReplyStats.after(self._move_to(placement.base, then=user))
        # The template's generation prompt follows the user's turn directly.
        opening = Placement([*placement.base, user], prompt_text, prompt_tokens)
        choice = _Choice(params.with_seed(), streams, shape=shape)
        return self._generate(user, opening, user, [choice], stats)[0]

    def _message_batches(
        self,
        path: list[NodeRecord],
        placement: Placement,
        n_opening: int,
        variables: dict[str, Any],
    ) -> Batches:
        """How a new message's span is decoded (``batches``): with its
        reply's opening where they fit one batch and the context can be cut
        back between them; its role header apart where it follows a start."""
        engine = self._require_engine()
        if engine.state_kind is StateKind.FULL:
            return batches.for_message(len(placement.tokens), 0, 0, engine.prompt_step)
        header = 0
        if [n.id for n in placement.base] == [path[0].id]:
            header = self._header_length(path, placement.tokens, variables)
        return batches.for_message(
            len(placement.tokens), header, n_opening, engine.prompt_step
        )

    def _header_length(
        self, path: list[NodeRecord], tokens: list[int], variables: dict[str, Any]
    ) -> int:
        """How many of a message's first ``tokens`` under the start of
        ``path`` any message there begins with (0: none)."""
        engine = self._require_engine()
        key = (engine.vocab_id, path[0].tokens, _variables_key(variables))
        header = _remembered(
            self._headers,
            key,
            lambda: spans.message_header(engine, path[:1], variables),
        )
        return len(header) if tokens[: len(header)] == header else 0

    def _unanswered_user(self, parent_id: int, text: str) -> NodeRecord | None:
        """A user message ``text`` under ``parent_id`` that has no reply, if any."""
        self._tree.refresh(parent_id)
        if not self._tree.has_children(parent_id):
            return None  # a start just made, a reply just written: no lookup
        for child_id, role, child_text, _use in node_rows.child_texts(
            self.db, parent_id
        ):
            if (
                role == Role.USER
                and child_text == text
                and not self._tree.has_children(child_id)
            ):
                return node_rows.get_node(self.db, child_id)
        return None

    def _check_room(self, needed: int) -> None:
        engine = self._require_engine()
        needed += 8  # a reply needs room for at least a few tokens
        if needed > engine.n_ctx:
            raise ContextFullError.for_message(
                needed, engine.n_ctx, engine.info.n_ctx_train
            )

    def _generate(
        self,
        parent: NodeRecord,
        opening: Placement,
        user: NodeRecord | None,
        choices: list[_Choice],
        stats: ReplyStats,
        forked: bool = False,
        earlier: Earlier = NOTHING_EARLIER,
        checkpoint_all: bool = True,
    ) -> list[Reply]:
        """Decode the new user turn (if any) and the replies' opening, then
        generate one reply under ``parent`` per choice (see ``ReplyPipeline``).

        ``opening`` is the replies' first span text and tokens (the
        generation prompt), placed after its effective nodes; ``earlier`` the
        answer and reasoning a reply that goes on holds already. If anything
        fails, the context is forgotten (its contents are unknown) and each
        reply left "generating" is removed, or kept as "interrupted" when it
        has text.

        The message's checkpoint and the replies' nodes are stored once the
        first tokens are out (``store_replies``): the wait for them would
        otherwise come before the first token.
        """
        engine = self._require_engine()
        sync = self._sync
        assert sync is not None
        replies: list[NodeRecord] = []
        try:
            prompt_started = time.perf_counter()
            first = Batches((len(opening.tokens),))
            if user is not None:
                whole_state = self._decode_user(user, opening, stats)
                first = Batches.of(user.chunks).opening_after(len(opening.tokens))
            start = engine.n_past
            if first.lead:  # decoded with the message: it ends the context
                start -= len(opening.tokens)
            else:
                engine.decode(opening.tokens, first.sizes)
            stats.prompt_tokens += len(opening.tokens)
            stats.prompt_ms = (time.perf_counter() - prompt_started) * 1000
            stats.logits_digest = hashlib.sha256(engine.logits().tobytes()).hexdigest()

            def store_replies() -> list[NodeRecord]:
                if user is not None:
                    # A delta's cells are as decoded: the opening and the
                    # first token only came after them.
                    checkpoint = whole_state or engine.capture(
                        user.start_pos, user.end_pos
                    )
                    stats.checkpoint_bytes_written += self._store_checkpoint(
                        user, checkpoint
                    )
                    # A message whose checkpoint cannot be stored (a full
                    # disk) fails here, still unanswered, so that a retry
                    # answers it instead of a copy.
                    self._checkpoints.settle([user.id])
                    self._raise_write_failure()
                for choice in choices:
                    generation = {
                        "params": choice.params.as_dict(),
                        "model": engine.info.name,
                        **choice.generation,
                    }
                    replies.append(
                        self._add_generating_reply(
                            parent.id, opening, start, first, generation
                        )
                    )
                return replies

            plans = [
                ReplyPlan(choice.params, choice.streams, choice.shape)
                for choice in choices
            ]
            pipeline = ReplyPipeline(
                engine,
                self.db,
                sync,
                opening,
                first,
                start,
                self._store_checkpoint,
                self._move_to,
                store_replies,
            )
            made = pipeline.run(plans, stats, forked, earlier, checkpoint_all)
        except Exception:
            sync.forget()
            for reply in replies:
                self._abandon(reply.id)
            raise
        user_id = user.id if user is not None else None
        return [replace(reply, user_node=user_id) for reply in made]

    def _add_generating_reply(
        self,
        parent_id: int,
        opening: Placement,
        start: int,
        first: Batches,
        generation: dict[str, Any],
    ) -> NodeRecord:
        """Store a reply, status "generating", once its first token is out
        (its opening decoded in the batch ``first``).

        Its span so far is the generation prompt; sampled tokens are added as
        they come, so a killed process leaves what was written. The
        conversation now goes on with the loaded model: it is recorded.
        """
        with self.db.adding() as added:
            reply = node_rows.add_node(
                self.db,
                parent_id,
                Role.ASSISTANT,
                "",
                tokens=opening.tokens,
                start_pos=start,
                chunks=first.recorded(),
                vocab_id=self._require_engine().vocab_id,
                status=Status.GENERATING,
                generation=generation,
                span_text=opening.text,
            )
            added.add(reply.id)
        self._record_model(reply.conversation_id)
        return reply

    def _record_model(self, conversation_id: int) -> None:
        engine = self._require_engine()
        identity = str(engine.profile_details["model_identity"])
        if self.conversation_model(conversation_id) != (str(engine.path), identity):
            conversation_rows.set_conversation_model(
                self.db, conversation_id, str(engine.path), identity
            )

    def conversation_model(self, conversation_id: int) -> tuple[str, str] | None:
        """The model file and content identity a conversation was last
        continued with, or None (no reply yet, or made before Arbor kept it)."""
        conversation = self._tree.conversation(
            conversation_id
        ) or conversation_rows.get_conversation(self.db, conversation_id)
        if conversation.model_path is None or conversation.model_identity is None:
            return None
        return conversation.model_path, conversation.model_identity

    def other_model(self, conversation_id: int) -> str | None:
        """The path of the model a conversation was made with, when it is not
        the loaded one (by content, not path); else None."""
        recorded = self.conversation_model(conversation_id)
        if recorded is None or self.engine is None:
            return None
        path, identity = recorded
        if identity == self.engine.profile_details["model_identity"]:
            return None
        return path

    def _decode_user(
        self, user: NodeRecord, opening: Placement, stats: ReplyStats
    ) -> bytes | None:
        """Decode a new user message at the end of the context in the batches
        it records, with its reply's opening where they share one. The cells
        of its first batch may be held already (``ContextSync.move_to``): the
        same header under the same start.

        Its checkpoint is the caller's to capture (from its range, once the
        first token is out) and store; but a whole-state model's is the state
        at the message's end, so it is taken now and returned (else None).
        """
        engine = self._require_engine()
        assert self._sync is not None
        planned = Batches.of(user.chunks)
        sizes = list(planned.sizes)
        held = engine.n_past - user.start_pos
        if held:
            assert held == sizes.pop(0), "only a whole first batch is kept"
        tokens = [*user.tokens[held:], *opening.tokens[: planned.tail]]
        used = engine.decode(tokens, sizes)
        assert used == sizes, f"batches {sizes} decoded as {used}"
        self._sync.append(user)
        stats.prompt_tokens += len(user.tokens) - held
        if engine.state_kind is StateKind.FULL:
            return engine.capture(user.start_pos, user.end_pos)
        return None

    def _abandon(self, reply_id: int) -> None:
        """Tidy up after a reply whose generation failed.

        A reply still "generating" with nothing written is removed, so that
        its user message counts as unanswered (a retry answers it); one with
        text becomes "interrupted", as after a crash. A reply that already
        has its final status stays as it is.
        """
        try:
            reply = node_rows.get_node(self.db, reply_id)
            if reply.status != Status.GENERATING:
                return
            if reply.text or reply.thinking:
                node_rows.update_node(self.db, reply_id, status=Status.INTERRUPTED)
            else:
                node_rows.delete_subtree(self.db, reply_id)
        except (StorageUnavailable, NotFound):
            # The database itself is failing: the reply stays "generating",
            # which the next start marks "interrupted". The first error is
            # the one to report.
            log.warning("Could not tidy up reply %s after a failure", reply_id)

    # --- internals ------------------------------------------------------------------

    def _variables(self, conversation_id: int | None) -> dict[str, Any]:
        # The template variables of the conversation's reasoning choice (None:
        # a conversation not made yet, which has the default).
        switch = self.engine.reasoning_switch if self.engine is not None else None
        if switch is None:
            return {}
        if conversation_id is None:
            return switch.variables(None)
        conversation = self._tree.conversation(
            conversation_id
        ) or conversation_rows.get_conversation(self.db, conversation_id)
        choice = conversation.reasoning
        return switch.variables(choice if choice in switch.choices else None)

    def _ensured_path(self, node_id: int) -> tuple[list[NodeRecord], dict[str, Any]]:
        # The path to a node, its spans made valid for the loaded model, and
        # the template variables of its conversation.
        engine = self._require_engine()
        path = self.path(node_id)
        variables = spans.variables_of(path, self._variables(path[0].conversation_id))
        # Making spans valid writes only the path's nodes (their spans, their
        # stale checkpoints): named, so the tree cache follows (tree_cache.py).
        with self.db.changing(n.id for n in path):
            ensured = spans.ensure_spans(self.db, engine, path, variables)
        return ensured, variables

    def continue_in_new_conversation(
        self,
        node_id: int,
        params: SamplingParams,
        should_stop: StopCheck | None = None,
    ) -> tuple[int, int]:
        """Start a conversation from the model's summary of ``node_id``'s path.

        The way on from a branch that has filled the context: the new
        conversation's system prompt is the old one followed by the summary.
        Returns the new conversation's id and its root's id.
        """
        engine = self._require_engine()
        assert self._sync is not None
        path = node_rows.get_path(self.db, node_id)
        conversation = conversation_rows.get_conversation(
            self.db, path[0].conversation_id
        )
        try:
            text = summary.summarize(engine, path, params, should_stop)
        finally:
            self._sync.forget()  # the summary's run overwrote the context
        if not text:
            raise ServiceError("The model wrote no summary; try again or branch.")
        system = "\n\n".join(
            part
            for part in (
                conversation.system_prompt or "",
                f"Summary of an earlier conversation:\n{text}",
            )
            if part
        )
        return self.new_conversation(system, f"{conversation.title} (continued)")

    def complete_prompt(
        self, prompt: str, params: SamplingParams, streams: Streams = NO_STREAMS
    ) -> PromptCompletion:
        """The model's continuation of a raw ``prompt``, outside every
        conversation (``prompt_completion``): nothing is stored, and the
        context holds no conversation afterwards."""
        engine = self._require_engine()
        _check_text(prompt, "prompt")
        sync = self._sync
        assert sync is not None
        sync.forget()
        try:
            return complete_prompt(engine, prompt, params, streams)
        finally:
            sync.forget()  # the prompt is no node: the next move decodes anew

    def count_tokens(self, text: str) -> list[int]:
        """``text``'s tokens with the loaded model (a file to attach: what it
        will take of the context)."""
        return self._require_engine().tokenize(text)

    def _require_engine(self) -> LlamaEngine:
        if self.engine is None or self._sync is None:
            raise ServiceError("No model is loaded.")
        return self.engine

    def _move_to(
        self, path: list[NodeRecord], then: NodeRecord | None = None
    ) -> SyncStats:
        assert self._sync is not None
        try:
            # A move writes only the path's nodes (checkpoints made anew,
            # batch sizes recorded): named, so the tree cache follows.
            with self.db.changing(n.id for n in path):
                return self._sync.move_to(path, then)
        except Exception:
            # A failed decode leaves the context somewhere unknown; start clean
            # next time rather than trust it.
            self._sync.forget()
            raise

    @contextmanager
    def without_checkpoints(self) -> Iterator[None]:
        """Store what is generated meanwhile without checkpoints: a reply
        nobody comes back to (a client's background task), whose nodes are
        deleted once it is answered. Its messages are nodes as always."""
        self._saving = False
        try:
            yield
        finally:
            self._saving = True

    def _store_checkpoint(self, node: NodeRecord, data: bytes) -> int:
        if not self._saving:
            return 0
        assert self.engine is not None and self.profile_id is not None
        return self._checkpoints.save(
            node, self.profile_id, self.engine.state_kind, data
        )

    def _raise_write_failure(self) -> None:
        """Raise the first checkpoint write that failed since the last report."""
        failure = self._checkpoints.take_failure()
        if failure is None:
            return
        if not isinstance(failure.error, StorageUnavailable):
            raise failure.error  # a bug on the writer thread: report it as one
        more = f" ({failure.more} more failed too)" if failure.more else ""
        raise StorageUnavailable(
            f"The checkpoint of message {failure.node_id} could not be saved"
            f"{more}; no message is lost, it is rebuilt when next visited. "
            f"{failure.error}"
        ) from failure.error
