"""Markdown to the rich text a message body shows, with highlighted code blocks.

Qt's own Markdown reader (GitHub dialect) does the parsing. A single line
break is kept, as CommonMark's "breaks" option keeps it: a poem's lines stay
lines (``_read``). Code blocks then get a tinted background, padding, a
monospace font, syntax colours from Pygments (a light or a dark style to suit
the palette) and a header line with the language and a "Copy" link
(``copy:N`` names the Nth block).

A streaming reply (its last part, ``app/qt/views/transcript/streaming_body.py``) is
rendered again every few tens of milliseconds on the GUI thread, so each code
block's Pygments tokens are kept: all blocks but the last are the same from
one rendering to the next, and lexing was most of the Python work (a
4,000-character reply with code: 38 ms, 14 with the tokens kept). The result
goes to the body as HTML. Reading it back there (parsing and laying out:
about 25 ms for that reply) is now the larger part; rendering straight into
the body's document instead was tried and dropped, as the HTML irons out what
Qt's Markdown reader leaves behind (links without their underline, an empty
first line in a table that follows a code block).
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.lexers.special import TextLexer
from pygments.style import StyleMeta
from pygments.styles import get_style_by_name
from pygments.token import _TokenType
from pygments.util import ClassNotFound
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)

# A code fence: three or more backticks or tildes, indented by at most three
# spaces, then the info string (the language).
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
# Raw HTML is shown as the text it is, not read as markup: a model's stray
# tag (a lone "</thead>") made Qt drop every line after it, so a long reply
# showed as a blank card.
_FEATURES = QTextDocument.MarkdownFeature(
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub.value
    | QTextDocument.MarkdownFeature.MarkdownNoHTML.value
)
# md4c's MD_FLAG_HARD_SOFT_BREAKS: Qt hands its feature bits to md4c as they
# are (its flags are md4c's), but gives this one no name.
_HARD_SOFT_BREAKS = QTextDocument.MarkdownFeature(0x8000)
_LINE_SEPARATOR = "\u2028"  # a line break inside a block (QChar.LineSeparator)
LIGHT_STYLE = "friendly"
DARK_STYLE = "one-dark"
COPY_SCHEME = "copy"


@dataclass(frozen=True)
class RenderedMarkdown:
    """HTML for a ``QTextBrowser`` and the text of each code block, in order."""

    html: str
    code_blocks: tuple[str, ...]


def render_markdown(text: str, code_background: QColor) -> RenderedMarkdown:
    """Render Markdown ``text``; code blocks on ``code_background``, highlighted.

    The highlighting style is dark when the background is.
    """
    document = _read(text)
    style = get_style_by_name(
        DARK_STYLE if code_background.lightness() < 128 else LIGHT_STYLE
    )
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    code_blocks = []
    for lines, language in _code_blocks(document, text):
        for block in lines:
            _format_code_line(block, code_background, fixed)
        _highlight(lines, language, style)
        code_blocks.append("\n".join(b.text() for b in lines))
        _add_header(lines[0], language, len(code_blocks) - 1, code_background)
    # Inline code (`like this`) keeps Qt's monospace; it only gets the tint.
    block = document.begin()
    while block.isValid():
        if not _is_fenced(block) and block.charFormat().fontFixedPitch():
            _format_code_line(block, code_background, fixed)
        block = block.next()
    return RenderedMarkdown(document.toHtml(), tuple(code_blocks))


def _read(text: str) -> QTextDocument:
    """Markdown ``text`` read into a document, its soft line breaks kept.

    md4c, Qt's Markdown reader, can take every soft break for a hard one
    (``_HARD_SOFT_BREAKS``): it alone knows where a line break is a soft
    break (inside a paragraph, a list item, a quote) and where it is not (in
    code, in a table, before a heading or a list). But Qt makes a hard break a
    new block of the same format: a new paragraph, with a paragraph's spacing,
    or a new bullet in a list. So the text is also read as it is, without
    the flag, and where the first reading split a block of the second into
    several, they are joined again, each line but the last ending in a line
    separator (``<br>`` in HTML).
    """
    document = QTextDocument()
    document.setMarkdown(text, _FEATURES | _HARD_SOFT_BREAKS)
    if "\n" not in text.strip():
        return document  # one line: no break to keep
    plain = QTextDocument()
    plain.setMarkdown(text, _FEATURES)
    joins = _soft_breaks(document, plain)
    if joins is None:
        return plain  # the readings do not match: no breaks rather than wrong ones
    cursor = QTextCursor(document)
    cursor.beginEditBlock()
    for position in reversed(joins):  # from the end: earlier positions stay
        cursor.setPosition(position)
        cursor.deletePreviousChar()  # the block separator: the two blocks join
        cursor.insertText(_LINE_SEPARATOR)
    cursor.endEditBlock()
    return document


def _soft_breaks(broken: QTextDocument, plain: QTextDocument) -> list[int] | None:
    """Where ``broken`` starts a block that ``plain`` has not, or None.

    Each block of ``plain`` is one or more blocks of ``broken`` in turn, with
    a soft break (read as a space) where ``broken`` starts the next; the
    positions are those blocks' starts in ``broken``. None when the blocks
    cannot be matched so.
    """
    joins: list[int] = []
    block = broken.begin()
    paragraph = plain.begin()
    while paragraph.isValid():
        if not block.isValid():
            return None
        wanted, shown = paragraph.text(), block.text()
        block = block.next()
        while shown != wanted and block.isValid() and wanted.startswith(shown + " "):
            joins.append(block.position())
            shown += " " + block.text()
            block = block.next()
        if shown != wanted:
            return None
        paragraph = paragraph.next()
    return None if block.isValid() else joins


def _is_fenced(block: QTextBlock) -> bool:
    return block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence)


def _code_blocks(
    document: QTextDocument, text: str
) -> list[tuple[list[QTextBlock], str]]:
    # Qt keeps each line of a fenced block as its own text block, and gives
    # two blocks of one language that follow each other nothing to tell them
    # apart: the source's fences say where each one ends. Where they cannot
    # be matched with Qt's lines (a fence in a quote, say), consecutive lines
    # of one language are taken as one block, as before.
    lines: list[QTextBlock] = []
    block = document.begin()
    while block.isValid():
        if _is_fenced(block):
            lines.append(block)
        block = block.next()
    groups: list[list[QTextBlock]] = []
    sizes = [size for size in _fence_sizes(text) if size]
    if sum(sizes) == len(lines):
        for size in sizes:
            groups.append(lines[:size])
            lines = lines[size:]
        if not all(_one_block(group) for group in groups):
            lines, groups = [b for group in groups for b in group], []
    for block in lines:
        if groups and _one_block([groups[-1][-1], block]):
            groups[-1].append(block)
        else:
            groups.append([block])
    return [(group, _language(group[0])) for group in groups]


def _one_block(lines: list[QTextBlock]) -> bool:
    """Whether ``lines`` follow each other, all in one language."""
    return all(
        line.next() == following and _language(line) == _language(following)
        for line, following in itertools.pairwise(lines)
    )


def _language(block: QTextBlock) -> str:
    language = block.blockFormat().property(QTextFormat.Property.BlockCodeLanguage)
    return str(language or "")


def _fence_sizes(text: str) -> list[int]:
    """The number of lines in each fenced code block of Markdown ``text``."""
    sizes: list[int] = []
    fence = ""
    for line in text.split("\n"):
        after = fence_after(fence, line)
        if after and not fence:
            sizes.append(0)  # a fence opens
        elif after:
            sizes[-1] += 1  # a line of code
        fence = after
    return sizes


def fence_after(fence: str, line: str) -> str:
    """The code fence open after Markdown ``line`` ("" for none), given the
    one open before it (CommonMark's rules for fenced code blocks)."""
    found = _FENCE.fullmatch(line.rstrip("\r\n"))
    if not fence:
        # A backtick fence's info string holds no backtick.
        if found and not (found[1][0] == "`" and "`" in found[2]):
            return found[1]
        return ""
    closes = (
        found is not None
        and found[1][0] == fence[0]
        and len(found[1]) >= len(fence)
        and not found[2].strip()
    )
    return "" if closes else fence


def _format_code_line(block: QTextBlock, background: QColor, fixed: QFont) -> None:
    cursor = QTextCursor(block)
    block_format = QTextBlockFormat(block.blockFormat())
    block_format.setBackground(background)
    block_format.setLeftMargin(6)
    block_format.setRightMargin(6)
    cursor.setBlockFormat(block_format)
    char_format = QTextCharFormat()
    char_format.setFontFamilies([fixed.family()])
    cursor.select(QTextCursor.SelectionType.BlockUnderCursor)
    cursor.mergeCharFormat(char_format)


def _lexer(language: str) -> Lexer:
    # No guessing for unlabelled blocks: it is slow and often wrong.
    try:
        return get_lexer_by_name(language) if language else TextLexer()
    except ClassNotFound:
        return TextLexer()


@functools.lru_cache(maxsize=64)
def _tokens(language: str, source: str) -> tuple[tuple[object, str], ...]:
    # Kept between renderings of a streaming reply (see the module docstring).
    return tuple(_lexer(language).get_tokens(source))


def _highlight(lines: list[QTextBlock], language: str, style: StyleMeta) -> None:
    source = "\n".join(b.text() for b in lines)
    # Document positions of each character of ``source`` (lines are blocks).
    starts, offset = [], 0
    for block in lines:
        starts.append((offset, block.position()))
        offset += len(block.text()) + 1
    cursor = QTextCursor(lines[0].document())
    line = 0
    position = 0
    for token_type, value in _tokens(language, source):
        # Pygments may add a final newline; positions past the end are skipped.
        end = min(position + len(value), len(source))
        char_format = _token_format(style, token_type)
        start = position
        while char_format is not None and start < end:
            while line + 1 < len(starts) and starts[line + 1][0] <= start:
                line += 1
            line_start, block_position = starts[line]
            line_end = line_start + len(lines[line].text())
            stop = min(end, line_end)
            if stop > start:
                cursor.setPosition(block_position + start - line_start)
                cursor.setPosition(
                    block_position + stop - line_start, QTextCursor.MoveMode.KeepAnchor
                )
                cursor.mergeCharFormat(char_format)
            start = max(stop, line_end + 1)
        position += len(value)


@functools.lru_cache(maxsize=1024)
def _token_format(style: StyleMeta, token_type: _TokenType) -> QTextCharFormat | None:
    spec = style.style_for_token(token_type)
    if not (spec["color"] or spec["bold"] or spec["italic"]):
        return None
    char_format = QTextCharFormat()
    if spec["color"]:
        char_format.setForeground(QColor(f"#{spec['color']}"))
    if spec["bold"]:
        char_format.setFontWeight(QFont.Weight.Bold)
    if spec["italic"]:
        char_format.setFontItalic(True)
    return char_format


def _add_header(
    first_line: QTextBlock, language: str, index: int, background: QColor
) -> None:
    # A line above the code: its language on the left, "Copy" on the right.
    cursor = QTextCursor(first_line)
    cursor.insertBlock()  # the new, empty block takes the first line's place
    cursor.movePosition(QTextCursor.MoveOperation.PreviousBlock)
    header_format = QTextBlockFormat()
    header_format.setBackground(background.darker(108))
    header_format.setLeftMargin(6)
    header_format.setRightMargin(6)
    header_format.setTopMargin(4)
    cursor.setBlockFormat(header_format)
    label = QTextCharFormat()
    label.setFontPointSize(8)
    label.setForeground(QColor("#808080"))
    cursor.insertText(f"{language or 'code'}\u2003", label)
    link = QTextCharFormat(label)
    link.setAnchor(True)
    link.setAnchorHref(f"{COPY_SCHEME}:{index}")
    link.setForeground(QColor("#3b82f6"))
    cursor.insertText("Copy", link)
