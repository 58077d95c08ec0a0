"""Drawing a streaming reply stays cheap: code blocks are not lexed again, and
the wait between drawings grows with what a drawing costs."""

from __future__ import annotations

import time

from PySide6.QtGui import QColor

from app.qt.views.transcript import markdown
from app.qt.views.transcript.markdown import render_markdown
from app.qt.views.transcript.message_body import MessageBody
from app.qt.views.transcript.thinking import ThinkingSection
from app.qt.views.transcript.transcript import (
    STREAM_DRAW_SHARE,
    STREAM_REPAINT_MS,
    TranscriptView,
    repaint_interval,
)

BLOCK = "Block {n}:\n\n```python\ndef area(r):\n    return 3.14 * r * r  # {n}\n```\n\n"


def test_code_blocks_already_lexed_are_not_lexed_again(qapp, monkeypatch):
    lexed = []
    original = markdown._lexer

    def counting(language):
        lexed.append(language)
        return original(language)

    monkeypatch.setattr(markdown, "_lexer", counting)
    markdown._tokens.cache_clear()
    shown = "Two blocks.\n\n" + BLOCK.format(n=1) + BLOCK.format(n=2)
    first = render_markdown(shown, QColor("#eef1f4"))
    assert len(lexed) == 2
    # The reply grows by a third block: only that one is lexed.
    grown = render_markdown(shown + BLOCK.format(n=3), QColor("#eef1f4"))
    assert len(lexed) == 3
    assert grown.code_blocks[:2] == first.code_blocks
    # Kept tokens highlight as fresh ones do.
    markdown._tokens.cache_clear()
    fresh = render_markdown(shown + BLOCK.format(n=3), QColor("#eef1f4"))
    assert fresh.html == grown.html and len(lexed) == 6


def test_the_wait_between_drawings_grows_with_their_cost():
    assert repaint_interval(0.5) == STREAM_REPAINT_MS
    for drawn in (20.0, 55.0, 160.0):
        wait = repaint_interval(drawn)
        assert wait >= STREAM_REPAINT_MS
        assert drawn / (drawn + wait) <= STREAM_DRAW_SHARE + 0.01


def test_a_slow_drawing_spaces_the_next_ones_and_a_new_reply_starts_fresh(
    qtbot, monkeypatch
):
    transcript = TranscriptView()
    qtbot.addWidget(transcript)
    transcript.show()
    original = MessageBody.set_markdown

    def slow(body, *args, **kwargs):
        time.sleep(0.06)  # as a long reply with code takes to render
        return original(body, *args, **kwargs)

    monkeypatch.setattr(MessageBody, "set_markdown", slow)
    transcript.begin_stream("Show me code.")
    reply = transcript.cards[-1]
    transcript.append_stream(BLOCK.format(n=1))
    qtbot.waitUntil(lambda: "3.14" in reply.body.toPlainText(), timeout=2000)
    assert transcript._repaint_timer.interval() >= repaint_interval(60)

    # Every piece is still drawn, only less often.
    transcript.append_stream("The end.")
    qtbot.waitUntil(lambda: "The end." in reply.body.toPlainText(), timeout=3000)

    transcript.begin_stream("Again.")
    assert transcript._repaint_timer.interval() == STREAM_REPAINT_MS


def test_streaming_reasoning_is_appended_not_set_again(qtbot, monkeypatch):
    section = ThinkingSection()
    qtbot.addWidget(section)
    set_whole = []
    original = MessageBody.setPlainText

    def counted(body, text):
        set_whole.append(text)
        return original(body, text)

    monkeypatch.setattr(MessageBody, "setPlainText", counted)
    text = ""
    for n in range(30):
        text += f"Step {n}: weigh the options.\n" if n % 3 == 2 else f"Step {n}, "
        section.set_text(text)
    assert section.body.toPlainText() == text == section.text
    assert set_whole == ["Step 0, "]  # the first piece; the rest appended
    # Text that does not continue what is shown replaces it.
    section.set_text("Another thought.")
    assert section.body.toPlainText() == "Another thought."
    assert set_whole == ["Step 0, ", "Another thought."]
