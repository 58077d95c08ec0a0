"""Files attached to a message: read as text, written into the message, shown
as chips.

An attached file becomes part of the user's message, after what they typed,
as a fenced block under its name::

    What does this function do?

    File: helpers.py (14 characters)
    ```
    def f(x): ...
    ```

so the model reads it, search finds it, an export keeps it, and the node's
tokens and checkpoint cover it like any text: nothing else in Arbor needs to
know about files. ``split`` takes such a message apart again for showing (the
typed words, then a chip per file) and for editing. Text and code files are
read as UTF-8; a PDF's text layer through ``pypdf``. Qt-free.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app.text.quantities import format_bytes

# The most text one file may bring: far beyond any context a local model
# has, and small enough to read and count at once.
MAX_CHARS = 2_000_000
# The most bytes read from a file: a bigger one is refused before reading.
# Decimal, as sizes are shown (app.text.quantities): the message says 20 MB.
MAX_BYTES = 20 * 1000**2

# A block's first lines: its name and length (which make taking a message
# apart exact, whatever the file holds), then its fence.
_HEADER = re.compile(
    r"\n\nFile: (?P<name>[^\n]+) \((?P<chars>\d+) characters\)\n(?P<fence>`{3,})\n"
)


class AttachmentError(Exception):
    """A file that cannot be attached, with a message written for a person."""


@dataclass(frozen=True)
class Attachment:
    """A file's name and its text, as the message carries them."""

    name: str
    text: str

    @property
    def size_text(self) -> str:
        """Its length for a chip, e.g. "12,345 characters"."""
        return f"{len(self.text):,} characters"


def read_attachment(path: Path) -> Attachment:
    """Read ``path`` as an attachment; ``AttachmentError`` says why it cannot be."""
    name = path.name
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise AttachmentError(
                f"{name} is {format_bytes(size)}; files up to "
                f"{format_bytes(MAX_BYTES)} can be attached."
            )
        data = path.read_bytes()
    except OSError as exc:
        raise AttachmentError(f"{name} could not be read: {exc.strerror}.") from exc
    text = _pdf_text(name, data) if data.startswith(b"%PDF-") else _plain(name, data)
    text = text.replace("\r\n", "\n").strip("\n")
    if not text.strip():
        raise AttachmentError(f"{name} holds no text to attach.")
    if len(text) > MAX_CHARS:
        raise AttachmentError(
            f"{name} has {len(text):,} characters of text; at most "
            f"{MAX_CHARS:,} can be attached."
        )
    return Attachment(name, text)


def compose(typed: str, files: list[Attachment] | tuple[Attachment, ...]) -> str:
    """The message text: what was typed, then each file as a fenced block."""
    parts = [typed.strip()]
    for file in files:
        # A fence longer than any run of backticks inside keeps the block whole.
        runs = [len(run) for run in re.findall(r"`+", file.text)]
        fence = "`" * max(3, max(runs, default=0) + 1)
        parts.append(
            f"File: {file.name} ({len(file.text)} characters)\n"
            f"{fence}\n{file.text}\n{fence}"
        )
    return "\n\n".join(part for part in parts if part)


def split(message: str) -> tuple[str, list[Attachment]]:
    """The typed words and the attached files of a message made by ``compose``.

    The files are the blocks that follow one another to the message's end;
    a block-like text the user typed before them stays typed text.
    """
    padded = "\n\n" + message  # every block, the first too, follows "\n\n"
    for first in _HEADER.finditer(padded):
        files = _chain(padded, first.start())
        if files is not None:
            return padded[2 : first.start()], files
    return message, []


def _chain(message: str, at: int) -> list[Attachment] | None:
    """The blocks from ``at`` to the end of ``message``, or None if they are
    not blocks one after another to the end."""
    files: list[Attachment] = []
    while at < len(message):
        header = _HEADER.match(message, at)
        if header is None:
            return None
        body_end = header.end() + int(header["chars"])
        closing = "\n" + header["fence"]
        if not message.startswith(closing, body_end):
            return None
        files.append(Attachment(header["name"], message[header.end() : body_end]))
        at = body_end + len(closing)
    return files


def _plain(name: str, data: bytes) -> str:
    if b"\x00" in data[:8192]:
        raise AttachmentError(
            f"{name} is not a text file. Text and code files and PDFs can be attached."
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Older text files are often Latin-1 (Windows-1252): every byte is a
        # character there, so the text still reads, if some letters differ.
        return data.decode("cp1252", errors="replace")


def _pdf_text(name: str, data: bytes) -> str:
    import io

    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise AttachmentError(f"{name} is a password-protected PDF.")
        pages = [page.extract_text() or "" for page in reader.pages]
    except (PdfReadError, ValueError, KeyError, TypeError) as exc:
        raise AttachmentError(f"{name} is a damaged PDF: {exc}.") from exc
    text = "\n\n".join(page.strip() for page in pages if page.strip())
    if not text:
        raise AttachmentError(
            f"{name} has no text layer (a scanned PDF?): there is no text to attach."
        )
    return text
