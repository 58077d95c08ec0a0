"""A long reply streams part by part: each drawing renders only what changed,
and the stored reply is shown in one body again."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication

from app.qt.views.transcript.message_body import MessageBody
from app.qt.views.transcript.streaming_body import PART_CHARS, split_parts
from app.qt.views.transcript.transcript import TranscriptView

PARAGRAPH = "A sentence that says something about trees and their branches. " * 4
CODE = "```python\n" + "def grow(tree):\n\n    return tree  # a blank line above\n" * 6


def _paragraphs(first: int, count: int) -> str:
    return "".join(f"{n}: {PARAGRAPH}\n\n" for n in range(first, first + count))


LONG_REPLY = _paragraphs(0, 12) + CODE + "```\n\n" + _paragraphs(12, 12)


def test_parts_are_cut_at_blank_lines_outside_code_and_join_to_the_text():
    parts = split_parts(LONG_REPLY)
    assert "".join(parts) == LONG_REPLY
    assert len(parts) >= 3
    for part in parts[:-1]:
        assert len(part) >= PART_CHARS and part.endswith("\n\n")
        # No part ends inside the code block (it has blank lines of its own).
        assert part.count("```") % 2 == 0


def test_complete_parts_stay_the_same_as_the_text_grows():
    settled: list[str] = []
    for end in range(0, len(LONG_REPLY), 37):
        parts = split_parts(LONG_REPLY[:end])
        # What was complete is still complete, unchanged.
        assert parts[: len(settled)] == settled
        settled = parts[:-1]
    assert settled


def test_a_list_item_or_an_unfinished_line_is_not_cut_from_what_comes_before():
    text = PARAGRAPH * 6 + "\n\n"
    assert len(split_parts(text + "2. the second item\n")) == 1
    assert len(split_parts(text + "    indented\n")) == 1
    assert len(split_parts(text + "A new paragraph, still being writ")) == 1
    assert len(split_parts(text + "A new paragraph.\n")) == 2


def test_a_long_streaming_reply_renders_only_its_last_parts_and_ends_in_one_body(
    qtbot, monkeypatch
):
    rendered: list[str] = []
    original = MessageBody.set_markdown

    def counted(body, text, *args):
        rendered.append(text)
        return original(body, text, *args)

    monkeypatch.setattr(MessageBody, "set_markdown", counted)
    transcript = TranscriptView()
    qtbot.addWidget(transcript)
    transcript.resize(800, 600)
    transcript.show()
    transcript.begin_stream("Tell me about trees.")
    reply = transcript.cards[-1]
    for end in range(0, len(LONG_REPLY), 200):
        transcript.append_stream(LONG_REPLY[end : end + 200])
        transcript._on_repaint_timer_timeout()  # one drawing per piece

    parts = reply.streaming_parts
    assert parts is not None and not reply.body.isVisibleTo(reply)
    assert len(parts.parts) == len(split_parts(LONG_REPLY)) >= 3
    # Each complete part was rendered once it was complete, and never again.
    for part in split_parts(LONG_REPLY)[:-1]:
        assert rendered.count(part) == 1
    assert "def grow" in parts.parts[1].toPlainText() + parts.parts[2].toPlainText()

    QCoreApplication.processEvents()  # laid out at the transcript's width
    streamed_height = parts.sizeHint().height()

    # Stored: one body with the whole text, the parts gone.
    rendered.clear()
    reply.attach(7, [7], LONG_REPLY, "")
    assert reply.streaming_parts is None and reply.body.isVisibleTo(reply)
    assert rendered == [LONG_REPLY]
    assert reply.body.toPlainText().count("def grow") == 6
    QCoreApplication.processEvents()
    # The parts were spaced as the one body spaces its paragraphs: the reply
    # does not jump when it is stored.
    assert abs(reply.body.height() - streamed_height) <= 2 * len(parts.parts)


def test_a_longer_fence_holding_shorter_ones_is_not_cut():
    nested = "````markdown\n" + "```\n\nan example\n\n```\n" * 150 + "````\n\n"
    parts = split_parts(_paragraphs(0, 6) + nested + _paragraphs(6, 6))
    assert len(parts) >= 2
    for part in parts[:-1]:
        assert part.count("````") % 2 == 0  # each outer fence closed in its part
