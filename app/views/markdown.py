"""Markdown to the rich text a ``QLabel`` shows, with readable code blocks.

Qt's own Markdown reader (GitHub dialect) does the parsing; code blocks then
get a tinted background and padding, which the reader does not add.
"""

from __future__ import annotations

from PySide6.QtGui import (
    QColor,
    QFontDatabase,
    QTextBlockFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)


def markdown_to_html(text: str, code_background: QColor) -> str:
    """Render Markdown ``text`` to HTML, code blocks on ``code_background``."""
    document = QTextDocument()
    document.setMarkdown(text, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    block = document.begin()
    while block.isValid():
        if block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeFence) or (
            block.charFormat().fontFixedPitch() and block.text()
        ):
            cursor = QTextCursor(block)
            block_format = QTextBlockFormat(block.blockFormat())
            block_format.setBackground(code_background)
            block_format.setLeftMargin(6)
            block_format.setRightMargin(6)
            cursor.setBlockFormat(block_format)
            char_format = cursor.blockCharFormat()
            char_format.setFontFamilies([fixed.family()])
            cursor.select(QTextCursor.SelectionType.BlockUnderCursor)
            cursor.mergeCharFormat(char_format)
        block = block.next()
    return document.toHtml()
