"""How a span is decoded: the batches a node records as its ``chunks``.

Decoding a span again in the batch sizes it was first decoded in gives the
same cells bit for bit (the kernels llama.cpp runs depend on a batch's
size), and checkpoints further down the tree rely on that
(``context_sync``). Most spans are decoded in batches of their own tokens,
and ``chunks`` is then just their sizes.

Two spans share a batch where that saves a ``llama_decode`` call before the
first token of a reply: a new user message and its reply's opening are
decoded in one call instead of two (``tools/serve_bench.py``; on two CPU
cores a call costs about 9 ms besides its tokens). Both nodes record that
batch at its whole size, and how far it reaches into the other span:

* a first entry ``-k``: the first batch began with the last ``k`` tokens of
  the span before this one;
* a last entry ``-t``: the last batch went on into the first ``t`` tokens of
  the span after this one.

A 9-token message whose last 6 tokens went with a 3-token opening records
``[3, 9, -3]``, its reply ``[-6, 9, 1, 1, ...]`` (then a token at a time).

To decode such a span again alone, the batch is made whole: the span before
supplies the lead (its cells are computed again, bit for bit what they were,
since they were computed in that very batch), and the tail is filled with
copies of the span's last token, then cut off. A batch's rows are computed
independently and causal attention hides later rows from earlier ones, so
what the filler holds does not change the span's cells; its size does
(byte for byte on the CPU and on lavapipe's Vulkan, where plain batches give
other cells: ``tests/conversation/test_shared_batches.py``,
``tests/system/test_gpu_soft.py``).

A new message under a conversation's start also decodes its role header
(``<|im_start|>user\\n``: what every message there begins with) as a batch of
its own. Every conversation with that system prompt then computes the same
cells there, so the next one keeps them (``ContextSync.move_to``) instead of
decoding them again, as llama-server keeps a common prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.backend.errors import BackendError
from app.backend.values import StateKind
from storage.records import NodeRecord

if TYPE_CHECKING:
    from app.backend.engine import LlamaEngine


@dataclass(frozen=True)
class Batches:
    """A node's batches: their whole sizes, and the tokens of the spans
    before (``lead``) and after (``tail``) that the first and last held."""

    sizes: tuple[int, ...]
    lead: int = 0
    tail: int = 0

    @classmethod
    def of(cls, chunks: Sequence[int]) -> Batches:
        """Read a node's ``chunks``."""
        sizes = list(chunks)
        lead = -sizes.pop(0) if sizes and sizes[0] < 0 else 0
        tail = -sizes.pop() if sizes and sizes[-1] < 0 else 0
        return cls(tuple(sizes), lead, tail)

    def recorded(self) -> list[int]:
        """What the node stores as its ``chunks``."""
        return [
            *([-self.lead] if self.lead else []),
            *self.sizes,
            *([-self.tail] if self.tail else []),
        ]

    def describe(self, n_tokens: int) -> bool:
        """Whether these batches are how a span of ``n_tokens`` tokens can
        have been decoded (an old or damaged record may not add up)."""
        return (
            bool(self.sizes)
            and min(self.sizes) > 0
            and sum(self.sizes) - self.lead - self.tail == n_tokens
            and self.lead < self.sizes[0]
            and self.tail < self.sizes[-1]
            and (len(self.sizes) > 1 or self.lead + self.tail < self.sizes[0])
        )

    @property
    def first_own(self) -> int:
        """How many of the span's own tokens its first batch held (for a
        reply: its opening)."""
        own = self.sizes[0] - self.lead
        return own - self.tail if len(self.sizes) == 1 else own

    def opening_after(self, n_opening: int) -> Batches:
        """The first batch of a reply whose opening of ``n_opening`` tokens
        follows this span: shared with this span's last batch where it
        went on into it, else one batch of its own."""
        if self.tail:
            last = self.sizes[-1]
            return Batches((last,), lead=last - self.tail)
        return Batches((n_opening,))


def for_message(n_tokens: int, header: int, opening: int, n_batch: int) -> Batches:
    """The batches of a new message of ``n_tokens`` tokens, followed by its
    reply's opening of ``opening`` tokens.

    ``header`` tokens (0: none) go first in a batch of their own; the rest
    in batches of at most ``n_batch``, the last of which takes the opening
    too when it fits (``opening_after`` then gives the reply's record).
    """
    header = header if 0 < header < n_tokens and header <= n_batch else 0
    rest = n_tokens - header
    sizes = [min(n_batch, rest - i) for i in range(0, rest, n_batch)]
    head = [header] if header else []
    if 0 < opening <= n_batch - sizes[-1]:
        sizes[-1] += opening
        return Batches((*head, *sizes), tail=opening)
    return Batches((*head, *sizes))


def redecode(engine: LlamaEngine, node: NodeRecord, before: NodeRecord | None) -> bool:
    """Decode ``node``'s span at the end of the context in the batches it
    records, so that its cells are bit for bit what they were; ``before``
    is the span the context ends with (the one a lead comes from).

    Returns False, having decoded nothing, where the record cannot be
    replayed: none kept, one that does not add up, or a lead that the
    context cannot give (the caller then decodes in fresh batches).
    """
    batches = Batches.of(node.chunks)
    if not node.tokens or not batches.describe(len(node.tokens)):
        return False
    shared = batches.lead or batches.tail
    if shared and engine.state_kind is StateKind.FULL:
        return False  # a recurrent state cannot be cut back to a position
    tokens = list(node.tokens)
    if batches.lead:
        if (
            before is None
            or before.end_pos != node.start_pos
            or engine.n_past != node.start_pos
            or len(before.tokens) < batches.lead
        ):
            return False
        _cut(engine, node.start_pos - batches.lead)
        tokens = [*before.tokens[-batches.lead :], *tokens]
    tokens += tokens[-1:] * batches.tail
    engine.decode(tokens, batches.sizes)
    _cut(engine, node.end_pos)
    return True


def _cut(engine: LlamaEngine, pos: int) -> None:
    # ``truncate`` empties a context it cannot cut exactly: then nothing held
    # is what the caller believes, and the move that asked fails (the next
    # one starts from the root).
    engine.truncate(pos)
    if engine.n_past != pos:
        raise BackendError(f"The context could not be cut back to position {pos}.")
