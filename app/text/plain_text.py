"""Markdown reduced to the plain words a one-line label shows.

Tree labels, tooltips and conversation titles show a message's words, not its
markup: "Assistant: ```py" tells nothing, "Assistant: def area(r): …" does.
Qt-free: the conversation service makes titles with it, the views labels.
"""

from __future__ import annotations

import re

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^\s*(```|~~~)[^\n]*$", re.MULTILINE), ""),  # code fences
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),  # images: their alt text
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),  # links: their text
    (re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE), ""),  # headings
    (re.compile(r"^\s{0,3}>\s?", re.MULTILINE), ""),  # block quotes
    (re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(?=\S)", re.MULTILINE), ""),  # list marks
    (re.compile(r"^\s*(?:[-*_]\s*){3,}$", re.MULTILINE), ""),  # rules
    (re.compile(r"^\s*\|?\s*:?-{3,}.*$", re.MULTILINE), ""),  # table rules
    (re.compile(r"\s*\|\s*"), " "),  # table cells
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # bold
    (re.compile(r"(?<![\w*])([*_])(?=\S)(.+?)(?<=\S)\1(?![\w*])"), r"\2"),  # italic
    (re.compile(r"~~(?=\S)(.+?)(?<=\S)~~"), r"\1"),  # strikethrough
    (re.compile(r"`+([^`]*)`+"), r"\1"),  # inline code
)


def plain_text(markdown: str) -> str:
    """``markdown`` without its markup; line breaks are kept."""
    text = markdown
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def snippet(markdown: str, limit: int) -> str:
    """One line of ``markdown``'s words, shortened to ``limit`` characters."""
    return shorten(" ".join(plain_text(markdown).split()), limit)
