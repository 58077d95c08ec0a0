"""Rendering nodes into token spans with the loaded model's tokenizer and template.

Tokens are the truth: a node's span is rendered once and stored, together with
the text it stands for. Where a new span starts is decided by ``folding``: after
its parent, or further up when the template re-renders earlier turns. A span
is rendered again only when it was made for another tokenizer (a different
model) or never rendered (a conversation created before any model loaded).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from app.backend.chat_format import Message, TemplateError
from app.backend.errors import ContextFullError
from app.conversation import folding, path_texts
from storage import node_rows, tool_use
from storage.db import Database
from storage.records import NodeRecord
from storage.values import Role, Status

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine

# Statuses of a reply whose turn was never closed (its process was killed).
UNCLOSED = (Status.INTERRUPTED, Status.GENERATING)

Variables = Mapping[str, Any] | None


@dataclass(frozen=True)
class Placement:
    """Where a new span goes: after the effective nodes ``base``, with ``text``."""

    base: list[NodeRecord]
    text: str
    tokens: list[int]

    @property
    def start_pos(self) -> int:
        """The span's first position."""
        return self.base[-1].end_pos if self.base else 0


def turns_of(path: Sequence[NodeRecord]) -> list[Message]:
    """The chat messages of a path, without the root."""
    return [message_of(node) for node in path if node.role != Role.ROOT]


def message_of(node: NodeRecord) -> Message:
    """A node's chat message: a reply with its reasoning and its calls, a
    tool result with the call it answers."""
    if node.role == Role.TOOL:
        call_id, name = tool_use.answered_call(node.tool_use)
        return Message(node.role, node.text, tool_call_id=call_id, name=name)
    return Message(
        node.role,
        node.text,
        node.thinking,
        tool_calls=tuple(tool_use.calls_of(node.tool_use)),
    )


def variables_of(path: Sequence[NodeRecord], variables: Variables) -> dict[str, Any]:
    """The template variables of a path: its conversation's ``variables``
    and the tools its start offers."""
    tools = tool_use.tools_of(path[0].tool_use) if path else []
    return {**(variables or {}), **({"tools": tools} if tools else {})}


def system_of(path: Sequence[NodeRecord]) -> str | None:
    """The conversation's system prompt (the root's text), or None."""
    return path[0].text or None


def span_tokens(engine: LlamaEngine, text: str, at_start: bool) -> list[int]:
    """Tokens of a span's text; the context's first span gets BOS if wanted."""
    tokens = engine.tokenize(text)
    bos = engine.bos_token
    if at_start and engine.adds_bos and bos >= 0 and tokens[:1] != [bos]:
        tokens.insert(0, bos)
    return tokens


def closing_tokens(engine: LlamaEngine, marker: int | None, text: str) -> list[int]:
    r"""Tokens of ``text``, the rest of a footer, as they follow ``marker``.

    ``marker`` is the end-of-turn token the model wrote (None: the footer is
    decoded whole). The tokens are those ``text`` has in context, after the
    marker: a marker can swallow the whitespace after it (llama.cpp gives
    Phi-3's markers rstrip, so ``<|end|>\n<|user|>`` is two tokens), where
    ``"\n"`` tokenized alone would be two tokens of its own that no
    rendering of the conversation holds.
    """
    if not text:
        return []
    if marker is not None:
        joined = engine.tokenize(engine.token_text(marker) + text)
        if joined[:1] == [marker]:
            return joined[1:]
    return engine.tokenize(text)


def start_span(
    engine: LlamaEngine, system: str | None, variables: Variables
) -> Placement:
    """The span of a conversation start with the system prompt ``system``
    (see ``ChatFormat.root_text``)."""
    text = engine.chat_format.root_text(system, variables)
    return Placement([], text, span_tokens(engine, text, True))


def place(engine: LlamaEngine, path: Sequence[NodeRecord], target: str) -> Placement:
    """Place a span so that the context after ``path`` reads ``target``.

    The span follows the deepest node whose held text ``target`` starts with
    (``folding.fold``) and whose span it joins cleanly (``_joins_cleanly``);
    where it would not, it starts further up and holds that node's turn too,
    so that the context stays what llama.cpp makes of the whole render.
    """
    return _place(engine, folding.Chain(path), target)


def _place(engine: LlamaEngine, chain: folding.Chain, target: str) -> Placement:
    # ``place`` after the effective nodes and held texts of ``chain``.
    k, text = chain.fold(target)
    while k >= 0 and not _joins_cleanly(engine, chain.nodes[k], text):
        k, text = chain.fold(target, k)
    return Placement(chain.nodes[: k + 1], text, span_tokens(engine, text, k < 0))


# How much text on each side of a seam ``_joins_cleanly`` tokenizes.
_SEAM_CHARS = 256


def _joins_cleanly(engine: LlamaEngine, node: NodeRecord, text: str) -> bool:
    r"""Whether a span of ``text`` can follow ``node``'s span as tokenized apart.

    It can when the two texts tokenize apart into the tokens of their joined
    text, as they mostly do where a marker token ends the node (a reply's
    ``<|im_end|>\n``). Where the template's markers are plain text in the
    vocabulary, a merge can span the seam (``\n`` ``<`` apart, ``\n<``
    joined), or SentencePiece writes its space prefix before a span that
    continues a line; a span placed there would hold tokens that no
    rendering of the conversation has. (``_clean_cut`` solves the same
    problem between a user turn and the reply's opening, where the cut is
    free to move; here the node's tokens are stored, so the span moves up.)
    """
    if not node.span_text or not text:
        return True
    # A seam's merges are local: the texts near it decide, however long the
    # spans (a re-rendered span can hold many turns).
    held, head = node.span_text[-_SEAM_CHARS:], text[:_SEAM_CHARS]
    return engine.tokenize(held) + engine.tokenize(head) == engine.tokenize(held + head)


def place_user(
    engine: LlamaEngine, path: Sequence[NodeRecord], text: str, variables: Variables
) -> tuple[Placement, str]:
    """Place a user message after ``path``; also return the generation prompt text.

    The user's span and the reply's opening are tokenized apart, so they meet
    where that gives the tokens llama.cpp makes of their joined text
    (``_clean_cut``): the template's split, or a little before it.
    """
    through, with_prompt = engine.chat_format.prompt(
        system_of(path), [*turns_of(path), Message("user", text)], variables
    )
    return _place_user(
        engine, folding.Chain(path), through, with_prompt[len(through) :]
    )


def _place_user(
    engine: LlamaEngine, chain: folding.Chain, through: str, prompt: str
) -> tuple[Placement, str]:
    # ``place_user`` from the rendering through the turn and the prompt after it.
    placement = _place(engine, chain, through)
    cut = _clean_cut(engine, placement.text, prompt)
    if cut == len(placement.text):
        return placement, prompt
    head = placement.text[:cut]
    moved = Placement(
        placement.base, head, span_tokens(engine, head, not placement.base)
    )
    return moved, placement.text[cut:] + prompt


# Two messages without a first character in common: what their spans share
# is the template's.
_PROBES = ("A", "Z")


def message_header(
    engine: LlamaEngine, path: Sequence[NodeRecord], variables: Variables
) -> list[int]:
    """The first tokens of the span of any user message after ``path``: its
    role header, and whatever else of the template comes before the words
    (a system prompt that the template puts in the first turn)."""
    first, second = (place_user(engine, path, probe, variables)[0] for probe in _PROBES)
    if first.start_pos != second.start_pos:
        return []
    shared = 0
    for a, b in zip(first.tokens, second.tokens, strict=False):
        if a != b:
            break
        shared += 1
    return first.tokens[:shared]


def place_reply(
    engine: LlamaEngine, path: Sequence[NodeRecord], variables: Variables
) -> Placement:
    """Place the opening of a reply (the generation prompt) after ``path``."""
    _through, with_prompt = engine.chat_format.prompt(
        system_of(path), turns_of(path), variables
    )
    return place(engine, path, with_prompt)


# How many earlier token boundaries ``_clean_cut`` tries (two tokenizations
# each) before it keeps the template's split.
_CUT_TRIES = 4


def _clean_cut(engine: LlamaEngine, head: str, tail: str) -> int:
    r"""How much of ``head`` a span can end with, ``tail`` starting the next one.

    The cut is clean when tokenizing the two pieces apart gives the tokens of
    ``head + tail``: a marker token on either side makes it so, but where
    plain text meets (a template's markup not in the vocabulary, e.g.
    ChatML's on a model without ``<|im_end|>``) a merge can span the cut:
    ``>`` ``\n<`` joined, ``>\n`` ``<`` apart. Then the cut moves back to the
    latest token boundary of the joined text where the pieces agree, so the
    context holds what llama.cpp makes of the whole render. Returns
    ``len(head)`` when that cut is clean or none of the last few is.
    """
    if not head or not tail:
        return len(head)
    whole = head + tail
    joined = engine.tokenize(whole)
    if engine.tokenize(head) + engine.tokenize(tail) == joined:
        return len(head)
    data = whole.encode("utf-8")
    head_size = len(head.encode("utf-8"))
    # Token boundaries counted back from the end: a tokenizer that writes a
    # space before the text (SentencePiece's prefix) shifts only the start.
    end = len(data)
    tries = 0
    for count in reversed(range(1, len(joined))):
        end -= len(engine.token_bytes(joined[count], special=True))
        if end <= 0 or tries >= _CUT_TRIES:
            break
        if end > head_size or (data[end] & 0xC0) == 0x80:  # inside a character
            continue
        tries += 1
        cut = len(data[:end].decode("utf-8"))
        if (
            engine.tokenize(whole[:cut]) == joined[:count]
            and engine.tokenize(whole[cut:]) == joined[count:]
        ):
            return cut
    return len(head)


def ensure_spans(
    db: Database, engine: LlamaEngine, path: list[NodeRecord], variables: Variables
) -> list[NodeRecord]:
    """Return ``path`` with every span valid for ``engine``, fixing what is not.

    A span never rendered or made by another tokenizer is rendered again from
    its message; a reply cut off by a killed process is closed. A node whose
    span is fine but whose anchor above it changed length keeps its tokens
    and only moves. Either way its stale checkpoints are dropped. Spans made
    before their text was recorded get it from their tokens.

    The path is fixed top down in memory and written in one transaction at
    the end (also when a node fails: what was fixed above it is kept, as a
    node-by-node write would have kept it). Where many spans are rendered,
    the template's texts come from windows of the path (``path_texts``), so
    that a first visit costs what its nodes cost, not their square.
    """
    stale = sum(node.vocab_id != engine.vocab_id for node in path)
    if stale:
        check_fits(engine, path, variables)
    texts = _Texts(engine, path, variables, whole=stale >= _WHOLE_PATH_SPANS)
    chain = folding.Chain()
    result: list[NodeRecord] = []
    # (end before, end now) of each node fixed so far, to move the nodes below.
    ends: list[tuple[int, int]] = []
    changes: dict[int, dict[str, Any]] = {}
    dropped: list[int] = []  # nodes whose checkpoints no longer fit their span
    try:
        for index, node in enumerate(path):
            old_end = node.end_pos
            start = _anchor(node.start_pos, ends, is_root=not result)
            same_vocab = node.vocab_id == engine.vocab_id
            fields: dict[str, Any] = {}
            if same_vocab and start is not None and node.status in UNCLOSED:
                fields = _close_unfinished(engine, node, start)
            elif not same_vocab or start is None or node.status in UNCLOSED:
                fields = _rerender(engine, chain, node, texts, index, variables)
            else:
                if node.span_text is None:
                    fields["span_text"] = _recorded_text(engine, node, not result)
                if node.start_pos != start:
                    fields["start_pos"] = start
            if fields:
                if "start_pos" in fields:
                    dropped.append(node.id)
                changes[node.id] = fields
                node = _changed(node, fields)
            result.append(node)
            chain.push(node)
            ends.append((old_end, node.end_pos))
    except BaseException:
        _write(db, changes, dropped)
        raise
    written = _write(db, changes, dropped)
    return [written.get(node.id, node) for node in result]


# Spans to render before a path's texts are taken from windows of it:
# ``path_texts.whole_path`` renders six nodes in full to check itself, so
# fewer spans cost no more rendered one by one.
_WHOLE_PATH_SPANS = 16


class _Texts:
    """The template's text for each node of a path that is rendered again."""

    def __init__(
        self,
        engine: LlamaEngine,
        path: Sequence[NodeRecord],
        variables: Variables,
        whole: bool,
    ) -> None:
        self._fmt = engine.chat_format
        self._path = path
        self._variables = variables
        self._whole: path_texts.PathTexts | None = None
        # A user turn's reasoning would be rendered above it but not as its
        # own last turn (``place_user`` renders only its text): none has one.
        if whole and all(n.role != Role.USER or not n.thinking for n in path):
            self._whole = path_texts.whole_path(
                self._fmt, system_of(path), turns_of(path), variables
            )

    def at(self, index: int) -> path_texts.Target:
        """The target of ``path[index]`` (not the root)."""
        if self._whole is not None:
            return self._whole[index - 1]
        node = self._path[index]
        above = self._path[:index]
        turn = (
            Message("user", node.text) if node.role == Role.USER else message_of(node)
        )
        return path_texts.exact(
            self._fmt, system_of(above), [*turns_of(above), turn], self._variables
        )


def _changed(node: NodeRecord, fields: dict[str, Any]) -> NodeRecord:
    # The record as ``update_node`` would return it once written.
    values = dict(fields)
    if "tokens" in values:
        values["tokens"] = tuple(values["tokens"])
    if "chunks" in values:
        values["chunks"] = tuple(values["chunks"])
    if "status" in values:
        values["status"] = Status(values["status"])
    return replace(node, **values)


def _write(
    db: Database, changes: dict[int, dict[str, Any]], dropped: list[int]
) -> dict[int, NodeRecord]:
    if not changes:
        return {}
    return node_rows.update_nodes(db, changes, drop_checkpoints=dropped)


def check_fits(
    engine: LlamaEngine, path: Sequence[NodeRecord], variables: Variables
) -> None:
    """Raise ``ContextFullError`` before any span is rendered when ``path``
    cannot fit the context.

    Rendering a path node by node renders the template once per node, over
    every turn above it; an imported path of thousands of turns would spend
    minutes on that before its last span found no room. One rendering of the
    whole path, tokenized, tells at once. It may count a few tokens more or
    fewer than the spans will (tokens merge across turns when tokenized
    whole), so it refuses only what is over the context.
    """
    try:
        text = engine.chat_format.history(system_of(path), turns_of(path), variables)
    except TemplateError:  # a template that refuses this shape of path: the
        return  # spans' own rendering says what is wrong
    needed = len(span_tokens(engine, text, True))
    if needed > engine.n_ctx:
        raise ContextFullError(
            f"This branch needs about {needed:,} tokens but the context holds "
            f"{engine.n_ctx:,}. Start a new branch higher up, or raise the "
            "context size in the settings."
        )


def _anchor(start: int, ends: list[tuple[int, int]], is_root: bool) -> int | None:
    # A span starts at 0 or where a node above ended; find that node's end now.
    if is_root or start == 0:
        return 0 if start == 0 else None
    for old, new in reversed(ends):
        if old == start:
            return new
    return None


def _recorded_text(engine: LlamaEngine, node: NodeRecord, is_root: bool) -> str:
    tokens = list(node.tokens)
    if is_root and engine.adds_bos and tokens[:1] == [engine.bos_token]:
        # A BOS that Arbor added is not part of the template's text.
        text = engine.detokenize(tokens[1:])
        if span_tokens(engine, text, True) == tokens:
            return text
    return engine.detokenize(tokens)


def _rerender(
    engine: LlamaEngine,
    chain: folding.Chain,
    node: NodeRecord,
    texts: _Texts,
    index: int,
    variables: Variables,
) -> dict[str, Any]:
    # A span rendered anew after the nodes of ``chain``: the fields to write.
    if node.role == Role.ROOT:
        placement = start_span(engine, node.text or None, variables)
    else:
        target = texts.at(index)
        if isinstance(target, path_texts.UserText):
            placement, _prompt = _place_user(
                engine, chain, target.through, target.prompt
            )
        else:
            placement = _place(engine, chain, target)
    return {
        "tokens": placement.tokens,
        "start_pos": placement.start_pos,
        "span_text": placement.text,
        "vocab_id": engine.vocab_id,
        "chunks": [],
        # The template closes the turn it renders: an unfinished reply is
        # closed now, as a stopped one (else a later visit closes it again).
        "status": Status.STOPPED if node.status in UNCLOSED else node.status,
    }


def _close_unfinished(
    engine: LlamaEngine, node: NodeRecord, start: int
) -> dict[str, Any]:
    # A reply cut off by a killed process: keep its sampled ids and close the
    # turn, as a stopped reply would have been closed.
    footer = engine.chat_format.footer
    footer_tokens = engine.tokenize(footer)
    recorded = node.span_text
    if recorded is None:
        recorded = engine.detokenize(node.tokens)
    chunks = list(node.chunks)
    if footer_tokens:
        chunks.append(len(footer_tokens))
    return {
        "tokens": [*node.tokens, *footer_tokens],
        "start_pos": start,
        "span_text": recorded + footer,
        "status": Status.STOPPED,
        "chunks": chunks,
    }
