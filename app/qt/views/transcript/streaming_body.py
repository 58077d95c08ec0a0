"""``StreamingBody``: a long reply's text while it streams, drawn part by part.

The transcript draws a streaming reply again every few tens of milliseconds.
One body rendered whole each time costs in proportion to the whole reply
(8,000 characters of code-heavy Markdown: about 55 ms a drawing, all of it on
the GUI thread). Here the reply is cut, at blank lines outside code blocks,
into parts of at least ``PART_CHARS`` characters: a part that is complete
never changes again, so each drawing renders only the last part, which is
still growing, and any part just completed.

Once the reply is stored its card shows it in one body again (one rendering,
``MessageCard.attach``): text can then be selected across parts, and the
Markdown reader sees the whole (a list or a reference link that spans two
parts is drawn right).
"""

from __future__ import annotations

import re

from PySide6.QtGui import QColor
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.qt.views.transcript.markdown import fence_after
from app.qt.views.transcript.message_body import MessageBody

# A part is cut off no sooner than this: fewer, larger parts, each rendered once.
PART_CHARS = 1500
# Lines after a blank line that may still belong to the block before it: a
# list item (loose lists), an indented continuation, a table row.
_CONTINUES = re.compile(r"([-*+]|\d+[.)])(\s|$)|\s|\|")


def split_parts(text: str) -> list[str]:
    """``text`` cut into parts at blank lines outside code blocks.

    Every part but the last holds at least ``PART_CHARS`` characters and ends
    with a blank line; the last part is the rest (the one still growing).
    Joined, the parts are ``text``. A cut depends only on the text before the
    line that follows it, so the complete parts of a growing text stay the same.
    """
    parts: list[str] = []
    start = 0
    fence = ""  # the code fence open, if any
    at = 0
    previous_blank = False
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break  # a line still being written: nothing is cut after it
        if (
            not fence
            and previous_blank
            and at - start >= PART_CHARS
            and not _CONTINUES.match(line)
        ):
            parts.append(text[start:at])
            start = at
        fence = fence_after(fence, line)
        previous_blank = not fence and not line.strip()
        at += len(line)
    parts.append(text[start:])
    return parts


class StreamingBody(QWidget):
    """A column of ``MessageBody`` parts showing one streaming reply."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(0)
        self.parts: list[MessageBody] = []
        self._shown: list[str] = []

    def set_markdown(self, text: str, code_background: QColor) -> None:
        """Show ``text``, rendering only the parts that changed."""
        # Complete parts stay complete as the text grows (``split_parts``):
        # only what follows them is cut again, not the whole reply each time.
        complete = self._shown[:-1]
        settled = sum(map(len, complete))
        if not text.startswith("".join(complete)):
            complete, settled = [], 0
        wanted = complete + split_parts(text[settled:])
        for index, part in enumerate(wanted):
            if index == len(self.parts):
                body = MessageBody()
                self._layout.addWidget(body)
                self.parts.append(body)
                self._shown.append("")
            if self._shown[index] != part:
                self.parts[index].set_markdown(part, code_background)
                self._shown[index] = part
                if index:
                    self._layout.setSpacing(self._gap(index))
        for body in self.parts[len(wanted) :]:
            body.hide()
            body.deleteLater()
        del self.parts[len(wanted) :]
        del self._shown[len(wanted) :]

    def _gap(self, index: int) -> int:
        """The space between part ``index`` and the one before it.

        In one document, two blocks are set apart by the larger of their
        margins; a document's first and last block have none outside. So the
        column puts back what one body would have shown between the two."""
        before = self.parts[index - 1].document().lastBlock().blockFormat()
        after = self.parts[index].document().firstBlock().blockFormat()
        return round(max(before.bottomMargin(), after.topMargin()))
