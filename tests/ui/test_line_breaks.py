"""A single line break in a message is kept (CommonMark's "breaks" option)."""

from __future__ import annotations

from PySide6.QtGui import QColor, QTextDocument

from app.qt.views.transcript.markdown import render_markdown
from app.qt.views.transcript.message_body import MessageBody
from app.qt.views.transcript.streaming_body import StreamingBody
from tests.ui.conftest import wait_idle

LINE = "\u2028"  # how a document holds a line break inside a paragraph
POEM = "Roses are red,\nviolets are blue.\n\nSugar is sweet\nand so are you."
PROSE = "Roses are red, violets are blue.\n\nSugar is sweet and so are you."
CODE_BACKGROUND = QColor("#eef1f4")


def _blocks(markdown: str) -> list[str]:
    """The texts of the blocks a message body shows for ``markdown``."""
    document = QTextDocument()
    document.setHtml(render_markdown(markdown, CODE_BACKGROUND).html)
    texts = []
    block = document.begin()
    while block.isValid():
        texts.append(block.text())
        block = block.next()
    return texts


def test_a_poem_keeps_its_lines_and_its_stanzas(qapp):
    # One paragraph per stanza, a line break (not a new paragraph) per line.
    assert _blocks(POEM) == [
        f"Roses are red,{LINE}violets are blue.",
        f"Sugar is sweet{LINE}and so are you.",
    ]
    assert (
        "Roses are red,<br />violets are blue."
        in render_markdown(POEM, CODE_BACKGROUND).html
    )
    # Emphasis across a line, a quote, a list item: the break is kept there too.
    assert _blocks("*one\ntwo*") == [f"one{LINE}two"]
    assert _blocks("> quoted\n> twice") == [f"quoted{LINE}twice"]
    assert _blocks("- an item\n  on two lines\n- another") == [
        f"an item{LINE}on two lines",
        "another",
    ]


def test_lists_headings_and_paragraphs_render_as_before(qapp):
    # A list is still one item per bullet, a heading still ends its line.
    document = QTextDocument()
    document.setHtml(
        render_markdown("Intro:\n- a\n- b\n\n# Title\nText", CODE_BACKGROUND).html
    )
    block = document.begin()
    kinds = []
    while block.isValid():
        kinds.append(
            (
                block.text(),
                block.textList() is not None,
                block.blockFormat().headingLevel(),
            )
        )
        block = block.next()
    assert kinds == [
        ("Intro:", False, 0),
        ("a", True, 0),
        ("b", True, 0),
        ("Title", False, 1),
        ("Text", False, 0),
    ]
    assert document.begin().next().textList().count() == 2
    assert _blocks("One.\n\nTwo.\n\n\nThree.") == ["One.", "Two.", "Three."]
    # A hard break written out stays a break (Qt makes it a new paragraph).
    assert _blocks("a  \nb") in (["a", "b"], [f"a{LINE}b"])


def test_code_keeps_its_lines_untouched(qapp):
    fenced = "```python\ndef f(x):  \n    return x\\\n```"
    rendered = render_markdown(f"Look:\n{fenced}\nthen\nmore", CODE_BACKGROUND)
    assert rendered.code_blocks == ("def f(x):  \n    return x\\",)
    assert LINE not in "".join(rendered.code_blocks)
    # An indented block, and inline code across a line, stay code.
    blocks = _blocks("Before\nit:\n\n    one\n    two\n\n`a\nb` c")
    assert blocks[0] == f"Before{LINE}it:"
    assert "one" in blocks and "two" in blocks
    assert blocks[-1] == "a b c"
    # A table is still a table.
    table = _blocks("| a | b |\n|---|---|\n| 1 | 2 |")
    assert [t for t in table if t] == ["a", "b", "1", "2"]


def test_message_and_streaming_bodies_show_the_lines_alike(qtbot):
    body, one_line = MessageBody(), MessageBody()
    for widget, text in ((body, POEM), (one_line, PROSE)):
        qtbot.addWidget(widget)
        widget.resize(600, 100)
        widget.set_markdown(text, CODE_BACKGROUND)
        widget.show()
        qtbot.waitExposed(widget)
    # Four lines are taller than two of the same words.
    first = body.document().firstBlock()
    assert first.text() == f"Roses are red,{LINE}violets are blue."
    assert first.layout().lineCount() == 2
    assert body.height() > one_line.height()

    streaming = StreamingBody()
    qtbot.addWidget(streaming)
    for end in range(1, len(POEM) + 1):
        streaming.set_markdown(POEM[:end], CODE_BACKGROUND)
    assert len(streaming.parts) == 1
    assert streaming.parts[0].toHtml() == body.toHtml()


def test_a_sent_poem_shows_its_lines_in_the_transcript(qtbot, make_window):
    window = make_window()
    window.composer.edit.setPlainText(POEM)
    window.send_action.trigger()
    wait_idle(qtbot, window)
    card = window.transcript.cards[0]
    assert card.text == POEM
    assert card.body.document().firstBlock().text() == (
        f"Roses are red,{LINE}violets are blue."
    )


def test_raw_html_in_a_reply_is_shown_as_text_not_read_as_markup(qapp):
    """A small model's stray tag ("</thead>") once swallowed every line
    after it: the reply showed as a blank card."""
    blocks = _blocks('{"time": "14:05"}</thead>\nIt is 14:05 in Tokyo.\n\n<b>bold?</b>')
    shown = "\n".join(blocks)
    assert "</thead>" in shown and "It is 14:05 in Tokyo." in shown
    assert "<b>bold?</b>" in shown
