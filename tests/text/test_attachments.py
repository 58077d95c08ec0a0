"""Files attached to a message: read (text, code, PDF through pypdf), written
into the message and taken apart again exactly, whatever they hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.conversation.titles import title_from
from app.text.attachments import (
    Attachment,
    AttachmentError,
    compose,
    read_attachment,
    split,
)


def write_pdf(path: Path, page_texts: list[str]) -> Path:
    """A small real PDF whose pages show ``page_texts`` (Helvetica), with a
    correct cross-reference table."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        None,  # the page tree, once the pages are numbered
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    kids = []
    for text in page_texts:
        stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode() if text else b""
        objects.append(
            b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream)
        )
        content = len(objects)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % content
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(kids),
        len(kids),
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    path.write_bytes(bytes(out))
    return path


def test_a_message_with_files_comes_apart_exactly():
    files = [
        Attachment("helpers.py", "def f():\n    return '```'\n"),
        # Text that looks like a block header, and a fence, inside a file.
        Attachment("notes.md", "File: x.txt (3 characters)\n```\nabc\n```"),
    ]
    # A block-like text typed before other words stays typed text.
    typed = "File: typed.txt (1 characters)\n```\nz\n```\n\nWhat do these do?"
    message = compose(typed, files)
    assert split(message) == (typed, files)
    assert split(compose("", files)) == ("", files)
    assert split("no files here") == ("no files here", [])
    # The model reads each file under its name, in a fence longer than any
    # run of backticks inside.
    assert "File: helpers.py (26 characters)\n````\n" in message


def test_a_title_from_a_message_of_files_names_them():
    assert title_from(compose("", [Attachment("report.pdf", "text")])) == "report.pdf"
    assert title_from(compose("Summarize", [Attachment("a.txt", "x")])) == "Summarize"


def test_text_and_code_files_are_read(tmp_path: Path):
    code = tmp_path / "main.py"
    code.write_text("print('hi')\r\n", encoding="utf-8")
    assert read_attachment(code) == Attachment("main.py", "print('hi')")
    old = tmp_path / "old.txt"
    old.write_bytes("caf\xe9 cr\xe8me".encode("cp1252"))
    assert read_attachment(old).text == "café crème"


def test_a_pdf_gives_its_text_layer(tmp_path: Path):
    pdf = write_pdf(tmp_path / "report.pdf", ["Hello from page one", "And page two"])
    file = read_attachment(pdf)
    assert file.name == "report.pdf"
    assert "Hello from page one" in file.text and "And page two" in file.text


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("blob.bin", b"\x00\x01\x02binary", "is not a text file"),
        ("empty.txt", b"\n\n", "holds no text"),
        ("scan.pdf", None, "has no text layer"),
        ("broken.pdf", b"%PDF-1.4\nthis is not a PDF at all", "damaged PDF"),
    ],
)
def test_files_that_cannot_be_attached_say_why(tmp_path: Path, name, data, reason):
    path = tmp_path / name
    if data is None:
        write_pdf(path, [""])
    else:
        path.write_bytes(data)
    with pytest.raises(AttachmentError, match=reason) as caught:
        read_attachment(path)
    assert name in str(caught.value)


def test_a_missing_file_says_so(tmp_path: Path):
    with pytest.raises(AttachmentError, match=r"gone\.txt could not be read"):
        read_attachment(tmp_path / "gone.txt")
