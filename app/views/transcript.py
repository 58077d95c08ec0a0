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

Cards are reused: showing a path keeps the cards of messages already shown
(the shared part of two branches stays in place), and the cards of messages
that leave the path are kept, hidden, for ``KEPT_CARDS`` more messages, so
that switching back to a branch renders no Markdown again. A card is made
anew only for a message it does not show yet, or one whose text changed.

The view follows the conversation as chat apps do: it keeps the newest text
in sight on opening a path, on sending and while a reply streams, stops
following as soon as the user scrolls up, and a "Jump to latest" button
brings it back.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Mapping

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.models.tree_snapshot import PathEntry
from app.values import ModelInfo
from app.views.alternatives import AlternativesRow, ChoiceRow
from app.views.empty_state import EmptyState
from app.views.message_card import MessageCard
from storage.repository import NodeSummary

STREAM_REPAINT_MS = 40
# The most of the GUI thread's time that drawing a streaming reply may take.
STREAM_DRAW_SHARE = 0.25
# Readable line length: the column of cards never grows wider than this.
MAX_COLUMN_WIDTH = 860
# Within this many pixels of the bottom counts as "at the newest text".
FOLLOW_SLACK_PX = 24
# Cards of messages off the path kept to show again (most recently shown first
# kept); a switch between branches then renders only what it never showed.
KEPT_CARDS = 64


def repaint_interval(drawn_ms: float) -> int:
    """Milliseconds to wait before drawing a streaming reply again, after a
    drawing that took ``drawn_ms``: ``STREAM_REPAINT_MS``, or longer where
    drawing would otherwise take more than ``STREAM_DRAW_SHARE`` of the time."""
    return max(STREAM_REPAINT_MS, round(drawn_ms / STREAM_DRAW_SHARE - drawn_ms))


class TranscriptView(QScrollArea):
    """The messages of the active path and, while generating, the reply so far.

    Signals
    -------
    sibling_requested(int), edit_requested(int), regenerate_requested(int),
    continue_requested(int),
    alternatives_requested(int, int), branch_requested(int)
        Forwarded from the message cards.
    example_chosen(str)
        An example prompt of the empty state was clicked (see ``EmptyState``).
    """

    sibling_requested = Signal(int)
    edit_requested = Signal(int)
    regenerate_requested = Signal(int)
    continue_requested = Signal(int)
    alternatives_requested = Signal(int, int)
    branch_requested = Signal(int)
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
        row.setContentsMargins(24, 16, 24, 16)
        column = QWidget()
        column.setMaximumWidth(MAX_COLUMN_WIDTH)
        row.addStretch(0)
        row.addWidget(column, 1)
        row.addStretch(0)
        self._layout = QVBoxLayout(column)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._layout.setSpacing(10)
        self._layout.addStretch(1)
        self.setWidget(page)
        self.cards: list[MessageCard] = []
        # Cards of messages that left the path, by node id, least recent first.
        self._kept: OrderedDict[int, MessageCard] = OrderedDict()
        self._actions_enabled = True
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

    def show_path(
        self,
        entries: list[PathEntry],
        siblings: dict[int, list[int]],
        thinking: Mapping[int, str] | None = None,
        follow: bool = True,
    ) -> None:
        """Show ``entries`` (root first).

        ``siblings`` maps nodes to sibling ids; ``thinking`` maps replies
        that reasoned to their reasoning (shown folded above the answer).
        ``follow`` False keeps the scroll position of a user reading higher up
        (the same path shown again, e.g. when its reply is complete).
        """
        self._end_reply()
        thinking = thinking or {}
        # Looked up once per path, not once per message (long paths, every switch).
        shown = {card.node_id: card for card in self.cards}
        # The question and the reply that streamed, now stored at the path's
        # end: their cards become those of their nodes, not made again.
        unsaved = [card for card in self.cards if card.node_id is None]
        stored_at = len(entries) - len(unsaved)
        # No system prompt: nothing worth a card.
        carded = [
            (at, entry)
            for at, entry in enumerate(entries)
            if entry.node.role != "root" or entry.node.text.strip()
        ]
        wanted = []
        for at, entry in carded:
            card = self._card_for_node(
                entry.node,
                siblings[entry.node.id],
                thinking.get(entry.node.id, ""),
                shown,
                unsaved if at >= stored_at else [],
            )
            card.show_generation(entry.node.generation)  # figures, badges
            wanted.append(card)
        # The cards the two paths share at the top stay where they are; the
        # rest leave the layout, and the new path's rest is added below them.
        same = 0
        while (
            same < min(len(wanted), len(self.cards))
            and wanted[same] is self.cards[same]
        ):
            same += 1
        on_path = {card.node_id for card in wanted}
        staying = set(wanted)
        for card in self.cards[same:]:
            self._layout.removeWidget(card)
            if card in staying:
                continue  # shown again further down
            if card.node_id in on_path:
                self._discard(card)  # its message changed: a new card shows it
            else:
                self._put_away(card)
        self.cards = self.cards[:same]
        for card in wanted[same:]:
            self._add_card(card)
        empty = all(card.role == "root" for card in self.cards)
        self._show_empty_state(empty)
        if empty:
            self._scroll_to_top()  # its title first: nothing to follow yet
        elif follow or self.following:
            self._scroll_to_end()

    def begin_stream(self, pending_user_text: str | None) -> None:
        """Add the user's message (if new) and an empty reply that tokens fill."""
        if pending_user_text is not None:
            self._add_card(MessageCard("user", pending_user_text))
        self.streaming_card = MessageCard("assistant", "")
        self._repaint_timer.setInterval(STREAM_REPAINT_MS)
        self._stream_parts = []
        self._thinking_parts = []
        self._add_card(self.streaming_card)
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
        if len(replies) < 2 or not self.cards:
            return
        self.choices = ChoiceRow(replies)
        self.choices.chosen.connect(self._on_choices_chosen)
        self.cards[-1].hide()
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

    def set_model(self, info: ModelInfo | None) -> None:
        """Say in the empty state which model answers (None: none is loaded)."""
        self.empty_state.set_model(info)

    def card_for(self, node_id: int) -> MessageCard | None:
        """The card showing ``node_id``, if shown."""
        return next((c for c in self.cards if c.node_id == node_id), None)

    # --- follow mode ---------------------------------------------------------------

    def _build_follow_mode(self) -> None:
        self.following = True
        self._moving = False  # our own scrolling is not the user's
        bar = self.verticalScrollBar()
        # Cards grow after they are added (text wraps, Markdown lays out): the
        # range changes late, so following reacts to it rather than to adds.
        bar.rangeChanged.connect(self._on_scroll_range_changed)
        bar.valueChanged.connect(self._on_scroll_value_changed)
        self._jump_button = QToolButton(self.viewport())
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

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Keep the jump button in the viewport's bottom-right corner."""
        if watched is self.viewport() and event.type() == QEvent.Type.Resize:
            self._place_jump_button()
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

    @Slot(int)
    def _on_scroll_value_changed(self, _value: int) -> None:
        if self._moving:
            return
        # The user scrolled: follow again only once they are back at the end.
        self.following = self.is_at_end()
        visible = not self.following and bool(self.cards)
        visible = visible and self.empty_state.isHidden()
        if visible and self._jump_button.isHidden():
            self._place_jump_button()
            self._jump_button.raise_()
        self._jump_button.setVisible(visible)

    # --- internals ----------------------------------------------------------------

    @classmethod
    def _enable_actions(cls, card: MessageCard, enabled: bool) -> None:
        # Copying and folding the thinking change nothing: always allowed.
        allowed = (
            card.body,
            card.thinking_section,
            card.attachments,
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

    def _add_card(self, card: MessageCard) -> None:
        if card.node_id is not None:
            self._enable_actions(card, self._actions_enabled)
        self._layout.insertWidget(self._layout.count() - 1, card)
        # A layout shows a new child only once the event loop runs again;
        # showing it now keeps the transcript's state exact when it returns.
        card.show()
        self.cards.append(card)

    def _card_for_node(
        self,
        node: NodeSummary,
        siblings: list[int],
        thinking: str,
        shown: dict[int | None, MessageCard],
        unsaved: list[MessageCard],
    ) -> MessageCard:
        """The one shown (``shown``, by node id) or kept if it shows the same
        text, else the first of the ``unsaved`` cards (shown before their
        messages were stored) that can show it, else a new one."""
        card = shown.get(node.id) or self._kept.pop(node.id, None)
        if card is None:
            card = self._adopt(node, siblings, thinking, unsaved)
            if card is not None:
                return card
        if card is not None and card.shows(node.role, node.text, node.status, thinking):
            card.set_siblings(siblings)
            return card
        if card is not None and shown.get(node.id) is not card:
            self._discard(card)  # a card shown now goes when it leaves the path
        card = MessageCard(
            node.role, node.text, node.id, siblings, node.status, thinking
        )
        self._connect(card)
        return card

    def _connect(self, card: MessageCard) -> None:
        """Pass on what is asked of a card of a stored message."""
        card.sibling_requested.connect(self.sibling_requested)
        card.edit_requested.connect(self.edit_requested)
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
            if node.role == "user" and card.text != node.text:
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
        """A card leaves the path: kept hidden to show again, or discarded."""
        card.hide()
        if card.node_id is None:  # a reply that streamed, or its pending question
            self._discard(card)
            return
        self._kept[card.node_id] = card
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
        if self.cards:
            self.cards[-1].show()

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
        self._move_to_bottom()

    def _scroll_to_top(self) -> None:
        """Show the top and stay there (the empty state: nothing streams)."""
        self.following = False
        self._jump_button.hide()
        self._moving = True
        try:
            self.verticalScrollBar().setValue(0)
        finally:
            self._moving = False

    def _move_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        self._moving = True
        try:
            bar.setValue(bar.maximum())
        finally:
            self._moving = False

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
