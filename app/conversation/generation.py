"""Sampling replies: one pipeline for a single reply and for alternatives.

Every reply follows an opening (its generation prompt) that the service has
decoded; a reply while it is sampled is a ``ReplyBeingSampled``. One step function
samples each stream's next token under the same rules (the turn's end, a
marker or stop string the model wrote, ``max_tokens``, its share of the
context); one loop decodes what a step sampled (on the main sequence for a
single reply, in one batch over the engine's forks for alternatives) and
saves the replies in progress; one finaliser closes each turn, stores its
node and captures its checkpoint. The service decides what to generate; this
module only how.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from app.backend.reasoning import ReasoningSplitter, split_reply, starts_in_thinking
from app.backend.tool_calls import new_call_id
from app.backend.values import PENALTY_LAST_N, SamplingParams, StateKind
from app.conversation import spans
from app.conversation.batches import Batches
from app.conversation.call_catcher import CallCatcher
from app.conversation.logprobs import token_logprobs
from app.conversation.reply_shape import FREE, ReplyShape
from app.conversation.results import Reply, ReplyStats, StopReason
from app.conversation.spans import Placement
from app.conversation.streams import Streams
from app.conversation.turn_markers import ReplyText
from storage import node_rows, tool_use
from storage.db import Database
from storage.records import NodeRecord
from storage.values import Status

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine
    from app.backend.sampling import Sampler
    from app.conversation.context_sync import ContextSync

# How often a reply in progress is written to the database, so that a crash
# or a kill loses at most this much of it.
PARTIAL_SAVE_SECONDS = 0.5

# A reply's final status, from why its generation ended. Truncated: the
# context filled up mid-reply (the turn is still closed and checkpointed, so
# the node is as usable as a complete one; only its text is cut short).
_STATUS_BY_STOP_REASON = {
    StopReason.STOPPED: Status.STOPPED,
    StopReason.CONTEXT_FULL: Status.TRUNCATED,
}


@dataclass(frozen=True)
class Earlier:
    """What a reply that goes on (``continue_reply``) holds already: its
    answer, its reasoning and how many tokens it sampled."""

    text: str = ""
    thinking: str = ""
    tokens: int = 0


NOTHING_EARLIER = Earlier()


@dataclass
class ReplyBeingSampled:
    """One reply while it is sampled; its ``node`` is stored once its first
    token is out."""

    params: SamplingParams
    streams: Streams
    sampler: Sampler
    splitter: ReasoningSplitter
    text: ReplyText
    index: int  # its rank among alternatives generated together (0: alone)
    earlier: Earlier
    shape: ReplyShape = FREE
    # Where its tool calls are kept from its text (None: it makes none).
    catcher: CallCatcher | None = None
    # Each sampled token's log probabilities, when the shape asks for them.
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    node: NodeRecord | None = None
    # Its fork while alternatives are sampled together; None: it is decoded
    # on the main sequence as it is sampled.
    seq: int | None = None
    tokens: list[int] = field(default_factory=list)  # its content tokens
    # Sampled, not decoded: the token reaching max_tokens, a turn's end marker.
    pending: list[int] = field(default_factory=list)
    stop_reason: StopReason = StopReason.MAX_TOKENS
    live: bool = True

    @property
    def answer(self) -> str:
        """The reply's answer so far (after what it held earlier)."""
        return self.earlier.text + self.splitter.answer

    @property
    def thinking(self) -> str:
        """The reply's reasoning so far (after what it held earlier)."""
        return self.earlier.thinking + self.splitter.thinking

    def stop(self, reason: StopReason) -> None:
        """End sampling this reply, for ``reason``."""
        self.stop_reason = reason
        self.live = False

    def drop_from(self, cut: int, is_end_of_turn: Callable[[int], bool]) -> None:
        """Forget the tokens from ``cut`` on, with the one kept undecoded at
        ``max_tokens``; a turn's end marker still closes the turn."""
        if cut < len(self.tokens):
            self.pending = [t for t in self.pending if is_end_of_turn(t)]
        del self.tokens[cut:]


@dataclass(frozen=True)
class ReplyPlan:
    """One reply to generate: how it samples and where it streams."""

    params: SamplingParams
    streams: Streams
    shape: ReplyShape = FREE


class ReplyPipeline:
    """The replies that follow one decoded opening, from their first token to
    their checkpoints.

    ``opening`` was decoded at position ``start`` of the main sequence, in
    the batch ``first``, and ends there now; ``store_checkpoint`` saves a
    node's checkpoint (returns the bytes written) and ``move_to`` positions
    the engine on a path. ``store_replies`` stores the replies' nodes
    ("generating", in the order of the plans) and returns them; it is called
    once their first tokens are sampled, so that what it waits for comes
    after the first token rather than before it.
    """

    def __init__(
        self,
        engine: LlamaEngine,
        db: Database,
        sync: ContextSync,
        opening: Placement,
        first: Batches,
        start: int,
        store_checkpoint: Callable[[NodeRecord, bytes], int],
        move_to: Callable[[list[NodeRecord]], object],
        store_replies: Callable[[], list[NodeRecord]],
    ) -> None:
        self._engine = engine
        self._db = db
        self._sync = sync
        self._opening = opening
        self._first_batch = first.recorded()
        self._start = start
        self._store_checkpoint = store_checkpoint
        self._move_to = move_to
        self._store_replies = store_replies
        self._first = start + len(opening.tokens)  # where sampled tokens go
        self._limit = engine.n_ctx  # set for the replies sampled (``_sample``)

    def run(
        self,
        replies: list[ReplyPlan],
        stats: ReplyStats,
        forked: bool,
        earlier: Earlier = NOTHING_EARLIER,
        checkpoint_all: bool = True,
    ) -> list[Reply]:
        """Sample ``replies``, close and store each; return them in order.

        ``checkpoint_all`` False: of replies sampled together, only the first
        is decoded again and checkpointed now; the others are stored with
        their spans and no checkpoint, decoded when first visited (an API
        client asking for ``n`` goes on from one, and the window's
        alternatives, which the user switches between, are all made ready,
        unless the user stopped them).

        ``forked``: sample them together on forks of the main sequence, one
        decode per step, each span then decoded again alone (see
        ``ConversationService.regenerate_parallel``); else there is one reply,
        decoded as it is sampled. ``stats`` holds the figures so far (each
        reply gets its own copy); ``earlier`` what a reply that goes on held.
        The main sequence is left holding the first reply.
        """
        engine = self._engine
        context = [t for node in self._sync.loaded for t in node.tokens]
        # The sampler's repeat penalty looks back PENALTY_LAST_N tokens at most.
        history = context[-PENALTY_LAST_N:] + self._opening.tokens
        thinking_first = starts_in_thinking(engine.reasoning_format, self._opening.text)
        started = time.perf_counter()
        with ExitStack() as samplers:
            sampling: list[ReplyBeingSampled] = []
            for index, reply in enumerate(replies):
                splitter = ReasoningSplitter(engine.reasoning_format, thinking_first)
                sampling.append(
                    ReplyBeingSampled(
                        params=reply.params,
                        streams=reply.streams,
                        sampler=samplers.enter_context(
                            engine.sampler(
                                reply.params, history, reply.shape.constraint
                            )
                        ),
                        splitter=splitter,
                        text=ReplyText(
                            engine.chat_format.markers,
                            reply.params.stop,
                            splitter,
                            reply.streams.emit,
                        ),
                        index=index,
                        earlier=earlier,
                        shape=reply.shape,
                        catcher=_catcher(reply.shape),
                    )
                )
            self._sample(sampling, forked)
        stats.generate_ms = (time.perf_counter() - started) * 1000
        done: dict[int, Reply] = {}
        # After a Stop nobody should wait for the alternatives to be decoded
        # again one by one (seconds): they are stored as they are and decoded
        # when first visited, as an API client's are.
        stopped = any(s.stop_reason is StopReason.STOPPED for s in sampling)
        # The last one finished stays in the context: the first.
        for stream in reversed(sampling):
            later = forked and stream.index > 0 and (stopped or not checkpoint_all)
            done[stream.index] = self._finish(
                stream, replace(stats, fallbacks=list(stats.fallbacks)), later
            )
            if stream.index and not later:
                self._sync.drop(_node(stream).id)
        return [done[k] for k in range(len(sampling))]

    def _sample(self, streams: list[ReplyBeingSampled], forked: bool) -> None:
        """Sample every stream until each stops; one decode per step.

        The opening's logits (row -1) give every stream its first token;
        after that, a fork samples from the batch row that carried its last
        token, and the main sequence from its last decode.
        """
        engine = self._engine
        # Each reply gets an equal share of the context left (a unified KV
        # cache holds every sequence's cells in its n_ctx cells), keeping
        # room to close its turn; a fork's re-decode then needs only its own.
        footer = len(engine.tokenize(engine.chat_format.footer))
        left = engine.n_ctx - engine.n_past
        self._limit = engine.n_past + left // len(streams) - footer - 1
        if forked:
            for stream, seq in zip(streams, engine.fork(len(streams)), strict=True):
                stream.seq = seq
        try:
            self._step_until_stopped(streams)
        finally:
            if forked:
                engine.end_fork()
        self._stored(streams)  # stopped before a first token
        for stream in streams:
            if stream.catcher is not None:
                self._push(stream, stream.catcher.release())
            cut = stream.text.finish()
            if cut is not None:  # the reply ends inside a character: before it
                self._cut(stream, cut)

    def _step_until_stopped(self, streams: list[ReplyBeingSampled]) -> None:
        engine = self._engine
        should_stop = streams[0].streams.should_stop  # one for them all
        rows = {s.index: -1 for s in streams}
        live = streams
        first_step = True
        last_save = time.perf_counter()
        while live:
            if should_stop is not None and should_stop():
                for stream in live:
                    stream.stop(StopReason.STOPPED)
                break
            step = [
                (stream, token)
                for stream in live
                if (token := self._next_token(stream, rows[stream.index], first_step))
                is not None
            ]
            if first_step:
                self._stored(streams)
            first_step = False
            if len(step) < len(live):  # some stopped at this step
                live = [s for s, _token in step]
            if not step:
                break
            if step[0][0].seq is None:
                engine.decode([step[0][1]], [1])
            else:
                engine.decode_forks(
                    [(s.seq, token) for s, token in step if s.seq is not None]
                )
                rows = {s.index: row for row, (s, _token) in enumerate(step)}
            if time.perf_counter() - last_save >= PARTIAL_SAVE_SECONDS:
                last_save = time.perf_counter()
                for stream in streams:
                    self._save_partial(stream)

    def _stored(self, streams: list[ReplyBeingSampled]) -> None:
        """Store the replies' nodes, once."""
        if streams[0].node is None:
            for stream, node in zip(streams, self._store_replies(), strict=True):
                stream.node = node

    def _next_token(
        self, stream: ReplyBeingSampled, row: int, first_step: bool
    ) -> int | None:
        """Sample the stream's next token, from batch ``row``; None when it
        stops there.

        A turn's end marker is kept to close the turn; the token reaching
        ``max_tokens`` is kept but not decoded.
        """
        engine = self._engine
        at = engine.n_past if stream.seq is None else engine.fork_pos(stream.seq)
        if at >= self._limit:
            stream.stop(StopReason.CONTEXT_FULL)
            return None
        if first_step and stream.params.temperature == 0 and stream.index:
            # Greedy alternatives would all be the same reply: each starts
            # with the next most likely token instead.
            token = engine.ranked_token(row, stream.index, stream.sampler.allows)
            stream.sampler.accept(token)
        else:
            token = engine.sample(stream.sampler, row)
        if stream.shape.logprobs is not None:
            stream.logprobs.append(
                token_logprobs(engine, row, token, stream.shape.logprobs)
            )
        if engine.is_end_of_generation(token):
            stream.stop(StopReason.END_OF_TURN)
            marker = engine.token_text(token)
            if marker and engine.chat_format.footer.startswith(marker):
                stream.pending.append(token)
            return None
        stream.tokens.append(token)
        catcher = stream.catcher
        if catcher is None:
            cut = self._push(stream, [token])
        else:
            cut = self._push(stream, catcher.take(token, engine.token_text(token)))
        if cut is not None:
            # The model wrote a turn marker or a stop string: the reply ends
            # before it (the format's own footer closes the turn instead, and
            # the turns a base model goes on to invent are never kept).
            self._cut(stream, cut)
            stream.stop(
                StopReason.STOP_STRING
                if stream.text.stopped_by_string
                else StopReason.END_OF_TURN
            )
            return None
        if len(stream.tokens) >= stream.params.max_tokens:
            stream.stop(StopReason.MAX_TOKENS)
            stream.pending.append(token)
            return None
        return token

    def _push(self, stream: ReplyBeingSampled, tokens: list[int]) -> int | None:
        """Show ``tokens`` as the reply's text; where one completes a turn
        marker or a stop string, return the index of the first token to drop
        (the later ones are not shown)."""
        engine = self._engine
        for token in tokens:
            cut = stream.text.push(
                engine.token_bytes(token, special=True), engine.is_special(token)
            )
            if cut is not None:
                return cut
        return None

    def _cut(self, stream: ReplyBeingSampled, cut: int) -> None:
        """Drop the stream's tokens from ``cut`` on, then add the text the
        dropped tokens held before a marker (``"Hi"`` of ``"Hi\\n"`` at the
        stop string ``"\\n"``) as tokens of its own, so that the span ends
        where the stored text does.

        Also for a character the reply ends inside of: the span then holds
        the bytes of the stored text, no more.
        """
        engine = self._engine
        kept = stream.text.kept
        kept_tokens = engine.tokenize(kept) if kept else []
        if stream.seq is not None:
            # Forks serve sampling only: their cells need no cutting, and the
            # text kept is decoded with the rest when the span is, alone.
            stream.drop_from(cut, engine.is_end_of_generation)
            stream.tokens.extend(kept_tokens)
            return
        decoded = engine.n_past - self._first
        if engine.state_kind is StateKind.FULL and cut < decoded:
            # Recurrent state cannot be cut back: only what is not decoded
            # yet goes, and the text kept would come after what stays.
            cut, kept_tokens = decoded, []
        stream.drop_from(cut, engine.is_end_of_generation)
        engine.truncate(self._first + cut)
        if engine.n_past + len(kept_tokens) > self._limit:
            return  # not into the room that closes the turn
        for token in kept_tokens:
            stream.tokens.append(token)
            engine.decode([token], [1])

    def _save_partial(self, stream: ReplyBeingSampled) -> None:
        """Write a reply in progress, so that a crash loses little of it."""
        engine = self._engine
        tokens = stream.tokens
        if _node(stream).status != Status.GENERATING or not tokens:
            return
        header = self._opening.tokens
        span = [*header, *tokens]
        # A fork's cells are never checkpointed: its batch sizes are those of
        # the re-decode its node would get.
        chunks = (
            [*self._first_batch, *[1] * len(tokens)]
            if stream.seq is None
            else engine.batch_sizes(len(span))
        )
        with self._db.changing([_node(stream).id]):
            stream.node = node_rows.update_node(
                self._db,
                _node(stream).id,
                text=stream.answer,
                thinking=stream.thinking,
                tokens=span,
                chunks=chunks,
                span_text=self._opening.text + engine.detokenize(tokens),
            )

    def _finish(
        self, stream: ReplyBeingSampled, stats: ReplyStats, later: bool = False
    ) -> Reply:
        """Close the reply's turn, store its node and its checkpoint (with
        ``later``, a fork's node alone: its span is decoded when visited)."""
        engine = self._engine
        if later:
            decoded, closing, closing_text = self._closing(stream)
            span = [*self._opening.tokens, *decoded, *closing]
            chunks: list[int] = []  # decoded later, in default batches
        else:
            span, chunks, closing_text = self._place_span(stream, stats)
        generated = len(stream.tokens)
        stats.generated_tokens = generated
        if stats.generate_ms > 0:
            stats.tokens_per_second = generated / (stats.generate_ms / 1000)
        stats.stop_reason = reason = stream.stop_reason
        node = _node(stream)
        assert node.generation is not None
        answer, thinking, calls = self._calls(stream)
        with self._db.changing([node.id]):
            node = node_rows.update_node(
                self._db,
                node.id,
                text=answer,
                thinking=thinking,
                tool_use=tool_use.calling(calls),
                tokens=span,
                chunks=chunks,
                span_text=self._opening.text + closing_text,
                status=_STATUS_BY_STOP_REASON.get(reason, Status.COMPLETE),
                generation={
                    **node.generation,
                    "stop_reason": reason.value,
                    "generated_tokens": stream.earlier.tokens + generated,
                    "tokens_per_second": round(stats.tokens_per_second, 2),
                    # The wait before the first token: the prompt read (what
                    # the user waited for), shown with the reply's figures.
                    "prompt_ms": round(stats.prompt_ms, 1),
                },
            )
        stream.node = node
        if not later:
            self._sync.append(node)
            stats.checkpoint_bytes_written += self._store_checkpoint(
                node, engine.capture(node.start_pos, node.end_pos)
            )
        stats.context_tokens = engine.n_past
        stats.n_ctx = engine.n_ctx
        return Reply(
            user_node=None,
            assistant_node=node.id,
            text=node.text,
            stats=stats,
            conversation_id=node.conversation_id,
            thinking=node.thinking,
            tool_calls=tuple(calls),
            # A turn's end marker or the token cut at max_tokens is no content.
            logprobs=tuple(stream.logprobs[: len(stream.tokens)]),
        )

    def _calls(
        self, stream: ReplyBeingSampled
    ) -> tuple[str, str, list[dict[str, str]]]:
        """The reply's answer, its reasoning and the calls it made: read
        from the text the catcher kept aside; a call that does not parse
        (cut at max_tokens, broken JSON) is shown as text instead."""
        catcher, syntax = stream.catcher, stream.shape.tools
        if catcher is None or syntax is None or not catcher.call_tokens:
            return stream.answer, stream.thinking, []
        engine = self._engine
        parsed = syntax.parse(engine.detokenize(catcher.call_tokens))
        # The line break before a call's marker is the call's, not the text's.
        answer, thinking = stream.answer.rstrip(), stream.thinking
        if parsed.content:
            # What the call text holds besides calls, reasoning split off.
            more_thinking, more = split_reply(engine.reasoning_format, parsed.content)
            answer = f"{answer.rstrip()}\n\n{more}".strip() if answer.strip() else more
            thinking = (thinking + more_thinking).strip()
        calls: list[dict[str, str]] = []
        for call in parsed.calls:
            # A model that writes its calls' ids may write one twice: a
            # client matches results to calls by id, so each gets its own.
            taken = any(call.id == made["id"] for made in calls)
            call_id = new_call_id() if taken or not call.id else call.id
            calls.append(
                {"id": call_id, "name": call.name, "arguments": call.arguments}
            )
        return answer, thinking, calls

    def _place_span(
        self, stream: ReplyBeingSampled, stats: ReplyStats
    ) -> tuple[list[int], list[int], str]:
        """Have the reply's whole span in the context, its turn closed; return
        the span, its batch sizes and its text after the opening."""
        engine = self._engine
        header = self._opening.tokens
        decoded, closing, text = self._closing(stream)
        span = [*header, *decoded, *closing]
        if stream.seq is None:
            # Its tokens are in the context as sampled: the closing follows.
            chunks = [*self._first_batch, *[1] * len(decoded)]
            if closing:
                engine.decode(closing, [len(closing)])
                chunks.append(len(closing))
            return span, chunks, text
        # A fork's cells are not those its tokens decoded alone give: the span
        # is decoded again alone, in n_batch batches, so that its checkpoint
        # restores what reprocessing the node gives.
        engine.truncate(self._start)
        if engine.n_past != self._start:  # the engine could not cut there
            self._move_to(self._opening.base)
        started = time.perf_counter()
        chunks = engine.decode(span)
        stats.redecode_ms = (time.perf_counter() - started) * 1000
        return span, chunks, text

    def _closing(self, stream: ReplyBeingSampled) -> tuple[list[int], list[int], str]:
        """Split a sampled reply into what is decoded and what closes the turn.

        Returns the sampled tokens already decoded, the tokens that close the
        turn (what was sampled but not yet decoded, then the template's footer
        minus the end-of-turn marker when the model produced it), and the
        text of both.
        """
        engine = self._engine
        footer_text = engine.chat_format.footer
        pending = stream.pending
        ended_by_model = bool(pending) and engine.is_end_of_generation(pending[-1])
        if ended_by_model:
            footer_text = footer_text[len(engine.token_text(pending[-1])) :]
        marker = pending[-1] if ended_by_model else None
        closing = [*pending, *spans.closing_tokens(engine, marker, footer_text)]
        decoded = stream.tokens if ended_by_model or not pending else stream.tokens[:-1]
        text = engine.detokenize([*decoded, *pending]) + footer_text
        return decoded, closing, text


def _catcher(shape: ReplyShape) -> CallCatcher | None:
    """The catcher of a reply that may call tools (None: it may not)."""
    if shape.tools is None:
        return None
    # A grammar that applies from the first token (no lazy trigger) writes
    # nothing but the calls.
    calling = shape.constraint is not None and not shape.constraint.triggers
    return CallCatcher(shape.tools.trigger, calling)


def _node(stream: ReplyBeingSampled) -> NodeRecord:
    """A stream's node, stored by now (``ReplyPipeline._stored``)."""
    assert stream.node is not None, "a reply's node is stored at its first token"
    return stream.node
