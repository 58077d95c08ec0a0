"""How tall a message card will be, before it is made; where each one begins.

The transcript makes cards only for the messages in and near its view
(``transcript.py``, beside this file); every other message is room of the height
it would take, so that the scroll bar spans the whole path. That height is
estimated here from the message's shape (the length of each source line, its
paragraphs and code blocks), the body's width and its font's line spacing,
then replaced by the card's own height once it is made.

The estimate counts the lines the text wraps to at the width, as if every
character were the font's average width, plus the room paragraphs and code
blocks take. Measured on generated conversations (prose, lists, code), that
alone is within 4 % for half the cards; the two numbers it leaves open (what
a card adds to its text, and how much the real wrapping differs from the
count) are taken from the cards made (``HeightModel.learn``).

Nothing here imports Qt: the widths and font figures come from the caller.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from app.text.attachments import split
from storage.values import Role, Status

# The estimate's figures, in line spacings (fitted on generated conversations):
# a line of text takes a little more than a line spacing (block margins), a
# paragraph break about a third of one, a code block its header and padding.
LINE_FACTOR = 1.09
PARAGRAPH_LINES = 0.37
CODE_BLOCK_LINES = 0.3
# What a card adds to its text before any card is measured: header, margins.
DEFAULT_OVERHEAD_PX = 44
# A reply's folded reasoning, a message's file chips, a status note: room for
# about this many lines each (with the spacing above them).
THINKING_LINES = 1.8
FILES_LINES = 2.2
NOTE_LINES = 2.4
# The learnt correction of the body's estimate stays within these bounds: an
# odd card (a table, an image-sized code block) must not distort the rest.
RATIO_BOUNDS = (0.6, 1.6)


@dataclass(frozen=True, slots=True)
class TextShape:
    """What the height of a message's text depends on, read once from it."""

    line_lengths: tuple[int, ...]  # characters of each non-blank source line
    paragraphs: int  # blank-line breaks between blocks
    code_blocks: int
    extra_lines: float  # reasoning, files, note: room beyond the text


def text_shape(role: str, text: str, thinking: str, status: str) -> TextShape:
    """The shape of a message as a card shows it (a question's files as chips)."""
    extra = 0.0
    if role == Role.USER:
        text, files = split(text)
        if files:
            extra += FILES_LINES
    if thinking:
        extra += THINKING_LINES
    if status == Status.TRUNCATED:
        extra += NOTE_LINES
    return TextShape(
        # A list comprehension: a generator made this the most of the cost.
        line_lengths=tuple([len(line) for line in text.split("\n") if line.strip()]),
        paragraphs=text.count("\n\n"),
        code_blocks=text.count("```") // 2,
        extra_lines=extra,
    )


def body_lines(shape: TextShape, chars_per_line: int) -> float:
    """The text's height in line spacings, wrapped at ``chars_per_line``."""
    wrapped = sum([-(-n // chars_per_line) for n in shape.line_lengths])
    return (
        wrapped * LINE_FACTOR
        + shape.paragraphs * PARAGRAPH_LINES
        + shape.code_blocks * CODE_BLOCK_LINES
    )


@dataclass(frozen=True)
class Metrics:
    """The figures an estimate needs: the body's width and its font's."""

    body_width: int
    line_spacing: int
    char_width: float

    @property
    def chars_per_line(self) -> int:
        """About how many characters a line of the body holds."""
        return max(8, int(self.body_width / max(1.0, self.char_width)))


class HeightModel:
    """Estimates of card heights, corrected by the cards measured.

    ``learn`` is told of made cards: what the card adds to its body (its
    header and margins), and how the body's real height compares with its
    estimate. ``settle`` takes what was learnt into the estimates; the
    transcript calls it when it shows a new path or the width or font
    changed, so that estimates do not shift under the reader while scrolling.
    """

    def __init__(self) -> None:
        self.overhead = DEFAULT_OVERHEAD_PX
        self.ratio = 1.0
        self._measured_body = 0.0
        self._estimated_body = 0.0
        self._last_overhead = DEFAULT_OVERHEAD_PX

    def estimate(self, shape: TextShape, metrics: Metrics) -> int:
        """The height of a card showing a message of ``shape``, in pixels."""
        lines = body_lines(shape, metrics.chars_per_line) * self.ratio
        lines += shape.extra_lines
        body = max(1.0, lines) * metrics.line_spacing + 2
        return self.overhead + math.ceil(body)

    def learn(
        self,
        shape: TextShape,
        metrics: Metrics,
        card_height: int,
        body_height: int,
    ) -> None:
        """Take note of a made card of a plain message (no reasoning, files or
        note): its height and its body's."""
        if shape.extra_lines or not shape.line_lengths:
            return
        self._last_overhead = card_height - body_height
        lines = body_lines(shape, metrics.chars_per_line)
        self._measured_body += max(0, body_height - 2) / max(1, metrics.line_spacing)
        self._estimated_body += lines

    def settle(self) -> None:
        """Use what was learnt from now on."""
        self.overhead = self._last_overhead
        if self._estimated_body > 0:
            low, high = RATIO_BOUNDS
            ratio = self._measured_body / self._estimated_body
            self.ratio = min(high, max(low, ratio))


def tops(first: int, heights: Sequence[int], spacing: int) -> list[int]:
    """Where each of a column's items begins, from ``first``, and where the
    next would (``len(heights) + 1`` values): ``spacing`` between items."""
    return list(itertools.accumulate((h + spacing for h in heights), initial=first))


def items_between(starts: Sequence[int], low: float, high: float) -> range:
    """The indices of the items (begun at ``starts``, from ``tops``) that
    reach into ``[low, high)``."""
    count = len(starts) - 1
    first = max(0, bisect.bisect_right(starts, low) - 1)
    last = min(count, bisect.bisect_left(starts, high))
    return range(min(first, last), last)


def item_at(starts: Sequence[int], y: float) -> int:
    """The index of the item at ``y`` (the last one below its end)."""
    count = len(starts) - 1
    return min(count - 1, max(0, bisect.bisect_right(starts, y) - 1))
