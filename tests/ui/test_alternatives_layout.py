"""Replies side by side start at the top of their row (issue 41): a short
reply beside a long one is read across from its first words, not centred."""

from __future__ import annotations

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.qt.views.transcript.alternatives import AlternativesRow, ChoiceRow
from app.qt.views.transcript.message_card import MessageCard

SHORT = "Blue."
LONG = "\n\n".join(
    f"Paragraph {n}: a colour, and why it is the one." for n in range(12)
)


def _text_top(card: MessageCard, row: QWidget) -> int:
    """Where the text of ``card`` begins in ``row``."""
    return card.body.mapTo(row, QPoint(0, 0)).y()


def _shown(qtbot, row: QWidget) -> QWidget:
    """``row`` in a window of its own, laid out at a readable width."""
    holder = QWidget()
    layout = QVBoxLayout(holder)
    layout.addWidget(row)
    qtbot.addWidget(holder)
    holder.resize(900, 700)
    holder.show()
    qtbot.waitExposed(holder)
    return holder


def test_streaming_alternatives_start_at_the_top(qtbot):
    row = AlternativesRow(3)
    _holder = _shown(qtbot, row)
    row.append(0, SHORT)
    row.append(1, LONG)
    row.append(2, SHORT + " Or green.")
    long = row.cards[1]
    qtbot.waitUntil(lambda: long.text == LONG and long.body.height() > 200)
    tops = [_text_top(card, row) for card in row.cards]
    assert tops == [tops[0]] * 3 and tops[0] < 60, tops
    assert [card.y() for card in row.cards] == [0, 0, 0]


def test_replies_to_choose_from_start_at_the_top_with_their_buttons_under_them(
    qtbot,
):
    row = ChoiceRow([(1, SHORT), (2, LONG)])
    _holder = _shown(qtbot, row)
    short, long = row.cards
    qtbot.waitUntil(lambda: long.body.height() > 200)
    assert _text_top(short, row) == _text_top(long, row) < 60
    assert short.y() == long.y() == 0
    # Each "Keep this one" right under its own reply.
    for card, button in zip(row.cards, row.buttons, strict=True):
        gap = button.y() - card.geometry().bottom()
        assert 0 < gap < 20, gap
