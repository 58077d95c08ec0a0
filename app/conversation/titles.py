"""A conversation's title from its first message: shown by the window as soon
as the message is sent, stored by the service with the message."""

from __future__ import annotations

from app.text.attachments import split
from app.text.plain_text import plain_text

TITLE_LENGTH = 48


def title_from(text: str) -> str:
    """A conversation title from its first message: its first line of words (no
    Markdown), cut at a word; a message that is only files: their names."""
    typed, files = split(text)
    words = plain_text(typed).strip() or ", ".join(file.name for file in files)
    line = words.splitlines()[0].strip() if words else ""
    if len(line) <= TITLE_LENGTH:
        return line
    cut = line[:TITLE_LENGTH].rsplit(" ", 1)[0] or line[:TITLE_LENGTH]
    return cut.rstrip(" ,.;:") + "…"
