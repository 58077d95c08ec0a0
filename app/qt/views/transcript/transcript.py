"""``TranscriptView``: the active path, root → active node, as message cards.

While a reply streams, pieces are buffered and drawn at most every
``STREAM_REPAINT_MS``: re-rendering Markdown per token would load the GUI
thread with a fast model for no visible gain. A long reply is drawn part by
part (``MessageCard.stream_text``), so a drawing renders only its last part;
should drawings still cost more, the wait before the next one grows with
them (``repaint_interval``), so that drawing never takes more than about a
quarter of the GUI thread, which must stay free for the user (and whose
Python work competes with the engine thread's for the GIL). A reasoning
model's thinking streams into its own buffer, shown open above the answer
until the answer begins, then folded.

Only what is in sight is made. A card costs about 3 ms (widgets, Markdown,
layout); a 1,000-message path made whole cost 1.2 to 4 s of the GUI thread
every time it was shown (issue 23). So the path is a list of *slots*, one a
message, and a card is made only for the slots within ``BUILD_AHEAD`` view
heights of the view (at least ``AHEAD_MIN_PX``); every run of slots without
a card is one empty *gap* widget exactly as tall as those cards would be,
spacing included, so that the scroll bar spans the whole path. A slot's
height is its card's once made (and remembered after it goes), until then an
estimate from the text's shape and the column's width
(``transcript_layout.py``, beside this file). Cards further than ``KEEP_AHEAD``
view heights from the view go back to the kept cards below (hidden, not rendered
again when they come back), so that scrolling a long path end to end leaves
about as many cards as it began with.

Filling (``_fill``) follows every scroll, resize and new path, on the spot
(before the next paint: no blank gap is drawn): with the layout brought
up to date, it notes what is at the top of the view (the slot and how far
into it: the *anchor*; or the end, when following), makes and drops cards
around where that will be, lays the gaps out again, and puts the anchor back
at the top. An estimate corrected above the view thus changes the scroll
bar's value, not what the reader sees. It repeats while making cards moved
the view onto more slots without one (a few rounds at most).

Cards are reused: showing a path keeps the cards of messages already shown
(the shared part of two branches stays in place), and the cards of messages
that leave the path, or the view, are kept, hidden, for ``KEPT_CARDS`` more
messages, so that switching back to a branch, or scrolling back, renders no
Markdown again. A card is made anew only for a message it does not show yet,
or one whose text changed. The question just sent and the reply streaming are
not slots: their cards are made at once, below the path's, and become the
slots' cards once stored.

The view follows the conversation as chat apps do: it keeps the newest text
in sight on opening a path, on sending and while a reply streams, stops
following as soon as the user scrolls up, and a "Jump to latest" button
brings it back.

A reply that called tools shows its calls below its text, and a tool's
result shows as one (``app/qt/views/transcript/tool_cards.py``). Which calls wait for
the user is the window's to say (``set_waiting_calls``): it is remembered,
and every card placed on a slot, made, kept or adopted, is told it then, so
that a card shown again never offers a call that was answered meanwhile.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.backend.values import ModelInfo
from app.conversation.tool_text import card_text
from app.qt.views.transcript.alternatives import AlternativesRow, ChoiceRow
from app.qt.views.transcript.empty_state import EmptyState
from app.qt.views.transcript.message_body import MessageBody
from app.qt.views.transcript.message_card import MessageCard
from app.qt.views.transcript.transcript_layout import (
    HeightModel,
    Metrics,
    TextShape,
    item_at,
    items_between,
    text_shape,
    tops,
)
from storage import tool_use
from storage.records import NodeSummary
from storage.values import Role

STREAM_REPAINT_MS = 40
# The most of the GUI thread's time that drawing a streaming reply may take.
STREAM_DRAW_SHARE = 0.25
# Readable line length: the column of cards never grows wider than this.
MAX_COLUMN_WIDTH = 860
# The page's margins around the column, and the room between two cards.
PAGE_MARGINS = (24, 16, 24, 16)
CARD_SPACING = 10
# Within this many pixels of the bottom counts as "at the newest text".
FOLLOW_SLACK_PX = 24
# Cards of messages off the path, or far from the view, kept to show again
# (most recently shown kept); a switch between branches, or a scroll back,
# then renders only what it never showed.
KEPT_CARDS = 64
# Cards are made this many view heights above and below the view (and at
# least AHEAD_MIN_PX), and dropped beyond KEEP_AHEAD view heights.
BUILD_AHEAD = 1.0
AHEAD_MIN_PX = 600
KEEP_AHEAD = 3.0
# Rounds of filling at most: one more when the cards made were shorter than
# estimated and uncovered slots without a card.
FILL_ROUNDS = 4
# A view not shown yet has no height of its own: fill as if it had this.
UNSHOWN_VIEW_PX = 600
# Heights of cards no longer made are remembered for this many messages.
HEIGHTS_KEPT = 20_000


def repaint_interval(drawn_ms: float) -> int:
    """Milliseconds to wait before drawing a streaming reply again, after a
    drawing that took ``drawn_ms``: ``STREAM_REPAINT_MS``, or longer where
    drawing would otherwise take more than ``STREAM_DRAW_SHARE`` of the time."""
    return max(STREAM_REPAINT_MS, round(drawn_ms / STREAM_DRAW_SHARE - drawn_ms))


@dataclass(eq=False)
class _Slot:
    """One message of the path: what its card shows, its height, its card."""

    node: NodeSummary
    siblings: list[int]
    thinking: str
    shape: TextShape
    height: int
    # The metrics ``height`` is true for: those of a card measured, or those
    # of the estimate; None until either.
    measured: Metrics | None = None
    card: MessageCard | None = None
    fresh: bool = False  # made since the last measure: its height is news


@dataclass(frozen=True)
class _Anchor:
    """What is at the top of the view: a slot, and how far into it."""

    index: int
    offset: int
    height: int  # the slot's height when noted
    estimated: bool  # no card then: the height may be corrected


# Where a fill puts the view: at the end (following), at the top, or an anchor.
_END = "end"
_TOP = "top"
_Target = _Anchor | str


class _Gap(QWidget):
    """Room for cards not made: as tall as they would be, and empty."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("TranscriptGap")
        self.setFixedHeight(0)


class TranscriptView(QScrollArea):
    """The messages of the active path and, while generating, the reply so far.

    Signals
    -------
    sibling_requested(int), edit_requested(int), regenerate_requested(int),
    continue_requested(int),
    alternatives_requested(int, int), branch_requested(int)
        Forwarded from the message cards.
    run_call_requested(int, str), deny_call_requested(int, str),
    run_edited_call_requested(int, str, str)
        A waiting call's Run, Deny or Run edited (node id, call id, and the
        edited arguments), forwarded from the cards.
    example_chosen(str)
        An example prompt of the empty state was clicked (see ``EmptyState``).
    """

    sibling_requested = Signal(int)
    edit_requested = Signal(int)
    regenerate_requested = Signal(int)
    continue_requested = Signal(int)
    alternatives_requested = Signal(int, int)
    branch_requested = Signal(int)
    run_call_requested = Signal(int, str)
    deny_call_requested = Signal(int, str)
    run_edited_call_requested = Signal(int, str, str)
    example_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Transcript")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        page = QWidget()
        page.setObjectName("TranscriptPage")
        # A centred column of readable width; cards fill the column.
        row = QHBoxLayout(page)
        row.setContentsMargins(*PAGE_MARGINS)
        column = QWidget()
        column.setMaximumWidth(MAX_COLUMN_WIDTH)  # narrower once sized (resizeEvent)
        row.addStretch(0)
        row.addWidget(column, 1)
        row.addStretch(0)
        self._column = column
        self._layout = QVBoxLayout(column)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(CARD_SPACING)
        self._layout.addStretch(1)
        self.setWidget(page)
        # The path's messages, root first; the cards of a question just sent
        # and of the reply streaming, below them.
        self._slots: list[_Slot] = []
        self._unsaved: list[MessageCard] = []
        # What the column's layout holds before the rows below the cards
        # (alternatives, choices, empty state), in order: cards and gaps.
        self._in_layout: list[QWidget] = []
        self._gaps: list[_Gap] = []
        # Cards of messages that left the path or the view, by node id, least
        # recent first.
        self._kept: OrderedDict[int, MessageCard] = OrderedDict()
        # Heights of cards measured, by node id, with what they showed and
        # the metrics they were measured at: a card gone is still as tall.
        self._heights: dict[int, tuple[str, str, str, Metrics, int]] = {}
        # The shapes read from the messages' texts, by node id, with what
        # they were read from: a path shown again is not read again.
        self._shapes: dict[int, tuple[str, str, str, TextShape]] = {}
        self._model = HeightModel()
        self._metrics: Metrics | None = None  # those of the slots' estimates
        # Replies to pick from stand in for the path's last card.
        self._hide_last = False
        self._filling = False
        # Where the last fill left the view: kept while the user does not
        # scroll, when the layout moves under it.
        self._last_anchor: _Anchor | None = None
        self._last_value = 0
        # The bodies' font as the transcript's style sheet sets it (zoom),
        # for estimates: a body never shown, in no layout.
        self._probe = MessageBody(self)
        self._probe.hide()
        self._fill_timer = QTimer(self)
        self._fill_timer.setSingleShot(True)
        self._fill_timer.setInterval(0)
        self._fill_timer.timeout.connect(self._on_fill_timer_timeout)
        self._actions_enabled = True
        # Tool use: the calls that wait for the user, by reply; whether their
        # buttons are on; the server of each tool the path's start offers.
        self._waiting: dict[int, tuple[str, ...]] = {}
        self._tool_actions_enabled = True
        self._servers: dict[str, str] = {}
        # Whether the view keeps the newest text in sight (see the top).
        self.following = True
        self.streaming_card: MessageCard | None = None
        self.alternatives: AlternativesRow | None = None
        # Replies made together, finished, side by side to pick from.
        self.choices: ChoiceRow | None = None
        self._stream_parts: list[str] = []
        self._thinking_parts: list[str] = []
        self._repaint_timer = QTimer(self)
        self._repaint_timer.setSingleShot(True)
        self._repaint_timer.setInterval(STREAM_REPAINT_MS)
        self._repaint_timer.timeout.connect(self._on_repaint_timer_timeout)
        # Shown until the first message, in the room below the cards (see
        # ``_show_empty_state``).
        self.empty_state = EmptyState()
        self.empty_state.example_chosen.connect(self.example_chosen)
        self._show_empty_state(True)
        self._build_follow_mode()

    # --- showing ------------------------------------------------------------------

    @property
    def cards(self) -> list[MessageCard]:
        """The cards made, in order: the path's in and near the view (all of
        them for a short path), then a question just sent and the reply."""
        made = [slot.card for slot in self._slots if slot.card is not None]
        return made + self._unsaved

    @property
    def message_count(self) -> int:
        """How many messages the path shows, with a card made or not."""
        return len(self._slots)

    def show_path(
        self,
        nodes: list[NodeSummary],
        siblings: dict[int, list[int]],
        thinking: Mapping[int, str] | None = None,
        follow: bool = True,
    ) -> None:
        """Show ``nodes``, the path's messages (root first).

        ``siblings`` maps nodes to sibling ids; ``thinking`` maps replies
        that reasoned to their reasoning (shown folded above the answer).
        ``follow`` False keeps the scroll position of a user reading higher up
        (the same path shown again, e.g. when its reply is complete).
        """
        self._end_reply()
        thinking = thinking or {}
        place = None if follow or self.following else self._place()
        # Looked up once per path, not once per message (long paths, every switch).
        shown = {s.card.node_id: s.card for s in self._slots if s.card is not None}
        # The question and the reply that streamed, now stored at the path's
        # end: their cards become those of their nodes, not made again.
        unsaved, self._unsaved = self._unsaved, []
        stored_at = len(nodes) - len(unsaved)
        self._model.settle()
        metrics = self._metrics = self._current_metrics()
        self._servers = tool_use.servers_of(nodes[0].tool_use) if nodes else {}
        slots = []
        for at, node in enumerate(nodes):
            if (
                node.role == Role.ROOT
                and not node.text.strip()
                and len(siblings[node.id]) < 2
            ):
                continue  # no system prompt, and no other start to switch to
            slot = self._slot(node, siblings[node.id], thinking.get(node.id, ""))
            slot.height = self._height_unmade(slot, metrics)
            card = shown.pop(node.id, None)
            if card is not None and not card.shows(
                node.role, node.text, node.status, slot.thinking
            ):
                self._discard(card)  # its message changed: a new card shows it
                card = None
            if card is None and at >= stored_at:
                card = self._adopt(node, slot.siblings, slot.thinking, unsaved)
                slot.fresh = card is not None
            if card is not None:
                slot.card = card
                self._dress(slot)
            slots.append(slot)
        for card in shown.values():
            self._put_away(card)  # off the path now
        for card in unsaved:
            self._discard(card)  # stored otherwise (e.g. stopped: its badge)
        self._slots = slots
        self._last_anchor = None
        empty = all(slot.node.role == Role.ROOT for slot in slots)
        self._show_empty_state(empty)
        target: _Target
        if empty:
            target = _TOP  # its title first: nothing to follow yet
            self.following = False
        elif place is None:
            target = _END
            self.following = True
        else:
            target = self._anchor_for(*place)
        self._show_jump_button(not self.following and not empty)
        self._fill(target, relayout=True)

    def begin_stream(self, pending_user_text: str | None) -> None:
        """Add the user's message (if new) and an empty reply that tokens fill."""
        if pending_user_text is not None:
            self._add_unsaved(MessageCard(Role.USER, pending_user_text))
        self.streaming_card = MessageCard(Role.ASSISTANT, "")
        self._repaint_timer.setInterval(STREAM_REPAINT_MS)
        self._stream_parts = []
        self._thinking_parts = []
        self._add_unsaved(self.streaming_card)
        self.empty_state.hide()
        self._scroll_to_end()

    def begin_alternatives(self, n: int) -> None:
        """Add a row of ``n`` empty replies that stream side by side."""
        self.alternatives = AlternativesRow(n)
        self._layout.insertWidget(self._layout.count() - 1, self.alternatives)
        self.alternatives.show()
        self.empty_state.hide()
        self._scroll_to_end()

    def offer_choice(self, replies: list[tuple[int, str]]) -> None:
        """Show ``replies`` (node id, text) side by side in place of the path's
        last card, each with "Keep this one"."""
        self._end_choice()
        if len(replies) < 2 or not self._slots:
            return
        self.choices = ChoiceRow(replies)
        self.choices.chosen.connect(self._on_choices_chosen)
        self._hide_last = True
        self._relayout()
        self._layout.insertWidget(self._layout.count() - 1, self.choices)
        self.choices.show()

    def append_alternative(self, index: int, piece: str) -> None:
        """Add a piece of alternative ``index``'s answer (``begin_alternatives``)."""
        if self.alternatives is not None:
            self.alternatives.append(index, piece)

    def append_stream(self, piece: str) -> None:
        """Add a piece of the streaming reply (drawn on the next repaint tick)."""
        self._stream_parts.append(piece)
        if not self._repaint_timer.isActive():
            self._repaint_timer.start()

    def append_thinking(self, piece: str) -> None:
        """Add a piece of the streaming reply's reasoning."""
        self._thinking_parts.append(piece)
        if not self._repaint_timer.isActive():
            self._repaint_timer.start()

    def show_reply_progress(self, note: str) -> None:
        """Say in the streaming reply what it waits for (until it has text)."""
        if self.streaming_card is not None and not self._stream_parts:
            self.streaming_card.show_waiting(note)

    @property
    def streamed_text(self) -> str:
        """The reply text (the answer) received so far."""
        return "".join(self._stream_parts)

    @property
    def streamed_thinking(self) -> str:
        """The reply's reasoning received so far."""
        return "".join(self._thinking_parts)

    def set_actions_enabled(self, enabled: bool) -> None:
        """Enable or disable the cards' buttons (disabled while generating)."""
        self._actions_enabled = enabled
        for card in self.cards:
            self._enable_actions(card, enabled)

    def set_waiting_calls(self, waiting: Mapping[int, Sequence[str]]) -> None:
        """Say which calls wait for the user: reply node id -> call ids (every
        other call shows no buttons). Kept for the cards made later."""
        self._waiting = {node_id: tuple(ids) for node_id, ids in waiting.items()}
        for card in self.cards:
            if card.node_id is not None:
                card.set_waiting_calls(self._waiting.get(card.node_id, ()))

    def set_tool_actions_enabled(self, enabled: bool) -> None:
        """Enable or disable the waiting calls' buttons (off while a job runs)."""
        self._tool_actions_enabled = enabled
        for card in self.cards:
            card.set_tool_actions_enabled(enabled)

    def set_model(self, info: ModelInfo | None) -> None:
        """Say in the empty state which model answers (None: none is loaded)."""
        self.empty_state.set_model(info)

    def card_for(self, node_id: int) -> MessageCard | None:
        """The card showing ``node_id``, if one is made (see ``show_message``)."""
        return next((c for c in self.cards if c.node_id == node_id), None)

    def show_message(self, node_id: int) -> MessageCard | None:
        """Scroll to the top of ``node_id``'s message on the path, its card made;
        None if the path does not hold it."""
        index = next(
            (i for i, slot in enumerate(self._slots) if slot.node.id == node_id), None
        )
        if index is None:
            return None
        self.following = False
        self._fill(_Anchor(index, 0, self._slots[index].height, estimated=False))
        self._on_scroll_value_changed(self.verticalScrollBar().value())
        return self._slots[index].card

    # --- follow mode ---------------------------------------------------------------

    def _build_follow_mode(self) -> None:
        self.following = True
        self._moving = False  # our own scrolling is not the user's
        bar = self.verticalScrollBar()
        # Cards grow after they are added (text wraps, Markdown lays out): the
        # range changes late, so following reacts to it rather than to adds.
        bar.rangeChanged.connect(self._on_scroll_range_changed)
        bar.valueChanged.connect(self._on_scroll_value_changed)
        self._jump_button: QToolButton = QToolButton(self.viewport())
        self._jump_button.setObjectName("JumpToLatest")
        self._jump_button.setText("↓ Jump to latest")
        self._jump_button.setToolTip("Scroll to the newest message and follow it")
        self._jump_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self._jump_button.clicked.connect(self._scroll_to_end)
        self._jump_button.hide()
        self.viewport().installEventFilter(self)

    def is_at_end(self) -> bool:
        """Whether the newest text is in sight."""
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - FOLLOW_SLACK_PX

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Keep the column as wide as ``_column_width`` says."""
        self._column.setMaximumWidth(self._column_width())
        super().resizeEvent(event)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Keep the jump button in the viewport's bottom-right corner, and the
        cards made those in view when its size changes."""
        if watched is self.viewport() and event.type() == QEvent.Type.Resize:
            self._place_jump_button()
            # Not now: the page is laid out at the new size after this.
            self._fill_timer.start()
        return super().eventFilter(watched, event)

    def _place_jump_button(self) -> None:
        button, area = self._jump_button, self.viewport().rect()
        button.adjustSize()
        button.move(
            area.right() - button.width() - 16, area.bottom() - button.height() - 12
        )

    @Slot(int, int)
    def _on_scroll_range_changed(self, _minimum: int, _maximum: int) -> None:
        if self.following:
            self._move_to_bottom()
        if not self._filling:
            self._fill_timer.start()  # cards grew or shrank: more may be in view

    @Slot(int)
    def _on_scroll_value_changed(self, _value: int) -> None:
        if self._filling:
            return
        if self._moving:
            # Following, as the layout grew: the cards near the end are made
            # already, and the layout may be in the middle of its work.
            self._fill_timer.start()
            return
        # The user scrolled: follow again only once they are back at the end.
        self.following = self.is_at_end()
        visible = not self.following and bool(self._slots or self._unsaved)
        self._show_jump_button(visible and self.empty_state.isHidden())
        # Before the view is painted at its new place: no blank gap is drawn.
        self._fill()

    def _show_jump_button(self, visible: bool) -> None:
        if visible and self._jump_button.isHidden():
            self._place_jump_button()
            self._jump_button.raise_()
        self._jump_button.setVisible(visible)

    # --- making the cards in view ---------------------------------------------------

    @Slot()
    def _on_fill_timer_timeout(self) -> None:
        bar = self.verticalScrollBar()
        target = None
        if not self.following and bar.value() == self._last_value:
            # The user did not scroll since: what they read stays in place,
            # whatever grew or shrank above it.
            target = self._last_anchor
        self._fill(target)

    def _fill(self, target: _Target | None = None, relayout: bool = False) -> None:
        """Make the cards in and near the view at ``target`` (None: where the
        view is now), drop those far from it, and put the view there (see the
        top of the module)."""
        if self._filling:
            return
        self._filling = True
        try:
            self._fill_timer.stop()
            if relayout and self._slots:
                # The new path's column first: laid out with the old one's
                # cards gone, the page would shrink, hide the scroll bar and
                # resize the view (a second fill and paint) before it grows.
                self._relayout()
            self._flush_layout()
            if not self._slots:
                if relayout:
                    self._relayout()
                self._scroll_to(_TOP if target is None else target)
                return
            self._measure()
            if target is None:
                at = self.verticalScrollBar().value()
                target = _END if self.following else self._anchor_at(at)
            changed = self._estimate() or relayout
            for _ in range(FILL_ROUNDS):
                changed = self._make_around(self._view_top(target)) or changed
                if not changed:
                    break
                changed = False
                self._relayout()
                self._flush_layout()
                self._measure()
            self._scroll_to(target)
            self._last_anchor = target if isinstance(target, _Anchor) else None
            if target == _TOP:
                self._last_anchor = self._anchor_at(0)
            self._last_value = self.verticalScrollBar().value()
        finally:
            self._filling = False

    @staticmethod
    def _flush_layout() -> None:
        """Run the layouts waiting (cards placed, page sized, scroll range set).

        A layout that runs asks its parent's to run after it: a few rounds.
        """
        for _ in range(3):
            QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)

    def _view_height(self) -> int:
        height = self.viewport().height()
        return height if self.isVisible() else max(height, UNSHOWN_VIEW_PX)

    def _column_width(self) -> int:
        """The column's width: that of the view with its scroll bar shown,
        whether the bar shows or not (CSS's ``scrollbar-gutter: stable``)."""
        # A path long enough to scroll would otherwise narrow the column by
        # the bar's width: every card wrapped again, every estimate made again.
        left, _top, right, _bottom = PAGE_MARGINS
        room = self.width() - 2 * self.frameWidth()
        room -= self.verticalScrollBar().sizeHint().width()
        return max(1, min(MAX_COLUMN_WIDTH, room - left - right))

    def _current_metrics(self) -> Metrics:
        """The figures of the estimates now: the bodies' width and font."""
        self._probe.ensurePolished()  # the style sheet's font, changed or not
        font = self._probe.fontMetrics()
        # The card's margins (14 each side) and frame.
        return Metrics(
            self._column_width() - 30, font.lineSpacing(), font.averageCharWidth()
        )

    def _slot(self, node: NodeSummary, siblings: list[int], thinking: str) -> _Slot:
        known = self._shapes.get(node.id)
        if known is not None and known[:3] == (node.text, node.status, thinking):
            shape = known[3]
        else:
            text = node.text
            if node.tool_use:  # a result folded, calls below the text
                text = card_text(node.role, text, node.tool_use)
            shape = text_shape(node.role, text, thinking, node.status)
            if len(self._shapes) >= HEIGHTS_KEPT:
                self._shapes.clear()  # a bound, as for the heights
            self._shapes[node.id] = (node.text, node.status, thinking, shape)
        return _Slot(node, siblings, thinking, shape, height=0)

    def _height_unmade(self, slot: _Slot, metrics: Metrics) -> int:
        """The height of a slot without a card: its card's when it had one (at
        these metrics), else the estimate."""
        known = self._heights.get(slot.node.id)
        node = slot.node
        if known is not None and known[:4] == (
            node.text,
            node.status,
            slot.thinking,
            metrics,
        ):
            return known[4]
        return self._model.estimate(slot.shape, metrics)

    def _measure(self) -> None:
        """Take the heights of the cards made (the layout has placed them)."""
        metrics = self._current_metrics()
        for slot in self._slots:
            card = slot.card
            if card is None or card.isHidden():
                continue
            height = card.height()
            if slot.fresh:
                slot.fresh = False
                # Calls below the text are no part of what is learnt.
                if not card.body.isHidden() and card.tool_calls is None:
                    self._model.learn(slot.shape, metrics, height, card.body.height())
            slot.height = height
            node = slot.node
            self._heights[node.id] = (
                node.text,
                node.status,
                slot.thinking,
                metrics,
                height,
            )
        if len(self._heights) > HEIGHTS_KEPT:
            self._heights.clear()  # a bound; the cards made are measured again

    def _estimate(self) -> bool:
        """Estimate the slots without a card again if the width or the font
        changed; whether any did."""
        metrics = self._current_metrics()
        if metrics == self._metrics:
            return False
        self._metrics = metrics
        self._model.settle()
        for slot in self._slots:
            if slot.card is None:
                slot.height = self._height_unmade(slot, metrics)
        return True

    def _starts(self) -> list[int]:
        """Where each slot begins on the page, and where the next would."""
        return tops(
            PAGE_MARGINS[1], [slot.height for slot in self._slots], CARD_SPACING
        )

    def _anchor_at(self, y: int) -> _Anchor:
        starts = self._starts()
        index = item_at(starts, y)
        slot = self._slots[index]
        return _Anchor(index, y - starts[index], slot.height, slot.card is None)

    def _place(self) -> tuple[int, int, int, bool] | None:
        """The message at the top of the view and how far into it (the layout
        brought up to date first), to keep there on a new path."""
        if not self._slots:
            return None
        self._flush_layout()
        self._measure()
        anchor = self._anchor_at(self.verticalScrollBar().value())
        node_id = self._slots[anchor.index].node.id
        return node_id, anchor.offset, anchor.height, anchor.estimated

    def _anchor_for(
        self, node_id: int, offset: int, height: int, estimated: bool
    ) -> _Target:
        """``_place`` on the new path: the same message, else the same place."""
        for index, slot in enumerate(self._slots):
            if slot.node.id == node_id:
                return _Anchor(index, offset, height, estimated)
        return self._anchor_at(self.verticalScrollBar().value())

    def _view_top(self, target: _Target) -> int:
        """Where on the page the view begins at ``target``."""
        if target == _TOP:
            return 0
        starts = self._starts()
        if target == _END:
            below = sum(card.height() for card in self._unsaved)
            return max(0, starts[-1] + below - self._view_height())
        assert isinstance(target, _Anchor)
        index = min(target.index, len(self._slots) - 1)
        height = self._slots[index].height
        offset = target.offset
        if height != target.height and target.estimated:
            if 0 <= offset < target.height:
                # An estimate corrected: as far into the card made, in share.
                offset = round(offset * height / max(1, target.height))
            elif offset >= target.height:
                offset += height - target.height  # the spacing below it
        return starts[index] + offset

    def _scroll_to(self, target: _Target) -> None:
        bar = self.verticalScrollBar()
        if target == _END:
            value = bar.maximum()
        else:
            value = self._view_top(target) if self._slots else 0
        if value != bar.value():
            moving, self._moving = self._moving, True
            try:
                bar.setValue(value)
            finally:
                self._moving = moving

    def _make_around(self, top: int) -> bool:
        """Make the cards within reach of a view from ``top``, drop those out
        of reach; whether any were."""
        view = self._view_height()
        ahead = max(AHEAD_MIN_PX, round(view * BUILD_AHEAD))
        keep = max(ahead, round(view * KEEP_AHEAD))
        starts = self._starts()
        wanted = items_between(starts, top - ahead, top + view + ahead)
        kept = items_between(starts, top - keep, top + view + keep)
        changed = False
        for index in wanted:
            slot = self._slots[index]
            if slot.card is None:
                self._make_card(slot)
                changed = True
        focus = QApplication.focusWidget()
        last = len(self._slots) - 1
        for index, slot in enumerate(self._slots):
            card = slot.card
            if card is None or index in kept:
                continue
            if self._hide_last and index == last:
                continue  # hidden by the replies to pick from, which need it
            if focus is not None and card.isAncestorOf(focus):
                continue  # the user is at it (a selection, a button)
            slot.card = None
            self._put_away(card)
            changed = True
        return changed

    def _make_card(self, slot: _Slot) -> None:
        """Give ``slot`` its card: the one kept if it shows the message, else
        a new one."""
        node = slot.node
        card = self._kept.pop(node.id, None)
        if card is not None and not card.shows(
            node.role, node.text, node.status, slot.thinking
        ):
            self._discard(card)
            card = None
        if card is None:
            card = MessageCard(
                node.role,
                node.text,
                node.id,
                slot.siblings,
                node.status,
                slot.thinking,
                tool_use=node.tool_use,
                n_tokens=node.n_tokens,
            )
            self._connect(card)
            # At the column's width from the start: its text is laid out once.
            card.resize(self._column_width(), slot.height)
        slot.card = card
        self._dress(slot)
        self._enable_actions(card, self._actions_enabled)
        slot.fresh = True

    def _dress(self, slot: _Slot) -> None:
        """Bring the card placed on ``slot`` up to date with what may change
        while its message does not: siblings, figures, waiting calls."""
        card, node = slot.card, slot.node
        assert card is not None
        card.set_siblings(slot.siblings)
        card.show_generation(node.generation)  # figures, badges
        card.show_tool_use(node.tool_use, node.n_tokens, self._servers)
        card.set_waiting_calls(self._waiting.get(node.id, ()))
        card.set_tool_actions_enabled(self._tool_actions_enabled)

    def _relayout(self) -> None:
        """Put the cards made and a gap for each run of slots without one in
        the column, keeping what stays the same in place."""
        wanted: list[QWidget] = []
        gaps = 0
        run: int | None = None
        last = len(self._slots) - 1
        for index, slot in enumerate(self._slots):
            if self._hide_last and index == last:
                if slot.card is not None:
                    wanted.append(slot.card)  # hidden, in its place
                continue
            if slot.card is None:
                run = slot.height if run is None else run + CARD_SPACING + slot.height
                continue
            if run is not None:
                wanted.append(self._gap(gaps, run))
                gaps, run = gaps + 1, None
            wanted.append(slot.card)
        if run is not None:
            wanted.append(self._gap(gaps, run))
            gaps += 1
        wanted += self._unsaved
        current = self._in_layout
        same = 0
        while same < min(len(current), len(wanted)) and current[same] is wanted[same]:
            same += 1
        for widget in current[same:]:
            self._layout.removeWidget(widget)
        for at, widget in enumerate(wanted[same:], start=same):
            self._layout.insertWidget(at, widget)
            # A layout shows a new child only once the event loop runs again;
            # showing it now keeps the transcript's state exact when it returns.
            widget.show()
        for gap in self._gaps[gaps:]:
            gap.hide()
        if self._slots and self._slots[-1].card is not None:
            self._slots[-1].card.setVisible(not self._hide_last)
        self._in_layout = wanted

    def _gap(self, index: int, height: int) -> _Gap:
        while len(self._gaps) <= index:
            self._gaps.append(_Gap(self._column))
        gap = self._gaps[index]
        if gap.minimumHeight() != height:
            gap.setFixedHeight(height)
        return gap

    def _add_unsaved(self, card: MessageCard) -> None:
        """Add the card of a message not stored yet below the path's."""
        self._layout.insertWidget(len(self._in_layout), card)
        card.show()
        self._unsaved.append(card)
        self._in_layout.append(card)

    # --- internals ----------------------------------------------------------------

    @classmethod
    def _enable_actions(cls, card: MessageCard, enabled: bool) -> None:
        # Copying and folding the thinking change nothing: always allowed.
        # The tool panels' own buttons follow ``set_tool_actions_enabled``;
        # their text stays selectable and a result stays foldable.
        allowed = (
            card.body,
            card.thinking_section,
            card.attachments,
            card.tool_calls,
            card.tool_result,
            getattr(card, "copy_button", None),
        )
        for button in card.findChildren(
            QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly
        ):
            if button not in allowed:
                button.setEnabled(enabled)
        if card.node_id is not None:
            cls._restore_navigator_limits(card, enabled)

    @staticmethod
    def _restore_navigator_limits(card: MessageCard, enabled: bool) -> None:
        # The navigator's ends stay disabled: there is no sibling past them.
        position, count = card.sibling_position
        if count > 1:
            card.previous_button.setEnabled(enabled and position > 1)
            card.next_button.setEnabled(enabled and position < count)

    def _show_empty_state(self, shown: bool) -> None:
        """Show the empty state (below a system prompt's card), or hide it."""
        if shown:
            self._layout.removeWidget(self.empty_state)  # if there: moved last
            self._layout.insertWidget(self._layout.count() - 1, self.empty_state, 1)
        # Shown, it takes all the room below the cards, to centre itself in;
        # hidden, the stretch below the cards has it back (cards stay on top).
        self._layout.setStretch(self._layout.count() - 1, 0 if shown else 1)
        self.empty_state.setVisible(shown)

    def _connect(self, card: MessageCard) -> None:
        """Pass on what is asked of a card of a stored message."""
        card.sibling_requested.connect(self.sibling_requested)
        card.edit_requested.connect(self.edit_requested)
        card.run_call_requested.connect(self.run_call_requested)
        card.deny_call_requested.connect(self.deny_call_requested)
        card.run_edited_call_requested.connect(self.run_edited_call_requested)
        card.regenerate_requested.connect(self.regenerate_requested)
        card.continue_requested.connect(self.continue_requested)
        card.alternatives_requested.connect(self.alternatives_requested)
        card.branch_requested.connect(self.branch_requested)

    def _adopt(
        self,
        node: NodeSummary,
        siblings: list[int],
        thinking: str,
        unsaved: list[MessageCard],
    ) -> MessageCard | None:
        """The unsaved card that becomes ``node``'s card, if one can: same role
        and status (their badges are made with the card), and for a question the
        same text (a reply's may still lack its last streamed pieces)."""
        for card in unsaved:
            if card.role != node.role or card.status != node.status:
                continue
            if node.role == Role.USER and card.text != node.text:
                continue
            if card.thinking_section is not None and not thinking:
                continue  # a new card shows no reasoning at all
            unsaved.remove(card)
            card.attach(node.id, siblings, node.text, thinking)
            self._connect(card)
            self._enable_actions(card, self._actions_enabled)
            return card
        return None

    def _put_away(self, card: MessageCard) -> None:
        """A card leaves the path or the view: kept hidden to show again, or
        discarded."""
        card.hide()
        if card.node_id is None:  # a reply that streamed, or its pending question
            self._discard(card)
            return
        self._kept[card.node_id] = card
        self._kept.move_to_end(card.node_id)
        while len(self._kept) > KEPT_CARDS:
            self._discard(self._kept.popitem(last=False)[1])

    @staticmethod
    def _discard(card: MessageCard) -> None:
        # Hidden now, deleted later: the card may be the sender of the signal
        # that led here (a click on its navigator).
        card.hide()
        card.deleteLater()

    def _end_choice(self) -> None:
        """Take the replies to pick from away; the path's last card is back."""
        if self.choices is None:
            return
        self._layout.removeWidget(self.choices)
        self.choices.hide()
        self.choices.deleteLater()
        self.choices = None
        self._hide_last = False
        self._relayout()

    @Slot(int)
    def _on_choices_chosen(self, node_id: int) -> None:
        # The reply kept becomes the path's (a branch switch, as a click on
        # its node); the first is the path's already.
        self._end_choice()
        self.branch_requested.emit(node_id)

    def _end_reply(self) -> None:
        """Forget the reply that streamed (its cards leave with the path)."""
        self._end_choice()
        self._repaint_timer.stop()
        self.streaming_card = None
        self._stream_parts = []
        self._thinking_parts = []
        if self.alternatives is not None:
            self._layout.removeWidget(self.alternatives)
            self.alternatives.hide()
            self.alternatives.deleteLater()
            self.alternatives = None

    def _scroll_to_end(self) -> None:
        """Follow the newest text again, now and as the layout grows."""
        self.following = True
        self._jump_button.hide()
        self._fill(_END)

    def _move_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        moving, self._moving = self._moving, True
        try:
            bar.setValue(bar.maximum())
        finally:
            self._moving = moving

    @Slot()
    def _on_repaint_timer_timeout(self) -> None:
        if self.streaming_card is None:
            return
        started = time.perf_counter()
        answer = self.streamed_text
        if self._thinking_parts:
            # Open while the model thinks; folded as soon as it answers.
            self.streaming_card.set_thinking(
                self.streamed_thinking, streaming=not answer
            )
        self.streaming_card.stream_text(answer)
        drawn_ms = (time.perf_counter() - started) * 1000
        self._repaint_timer.setInterval(repaint_interval(drawn_ms))
