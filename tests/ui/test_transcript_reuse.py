"""The transcript reuses its message cards: a branch switch renders only what
it never showed, and cards of messages off the path are kept within a bound."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from PySide6.QtCore import QCoreApplication, QEvent, Qt

from app.conversation.tree_snapshot import TreeSnapshot
from app.qt.views.transcript import transcript as transcript_module
from app.qt.views.transcript.message_body import MessageBody
from app.qt.views.transcript.message_card import MessageCard
from app.qt.views.transcript.transcript import TranscriptView
from storage.records import NodeSummary
from tests.ui.conftest import send, wait_idle


class _RenderCount:
    """Counts Markdown renders of message bodies (and still renders them)."""

    def __init__(self, monkeypatch) -> None:
        self.count = 0
        original = MessageBody.set_markdown

        def counted(body, *args, **kwargs):
            self.count += 1
            return original(body, *args, **kwargs)

        monkeypatch.setattr(MessageBody, "set_markdown", counted)


def _node(node_id: int, parent: int | None, role: str, text: str) -> NodeSummary:
    return NodeSummary(
        id=node_id,
        parent_id=parent,
        role=role,
        text=text,
        n_tokens=len(text.split()),
        status="complete",
        checkpoint_bytes=0,
        created_at=datetime.now(UTC),
    )


def _show(transcript: TranscriptView, snapshot: TreeSnapshot, node_id: int) -> None:
    path = snapshot.path(node_id)
    transcript.show_path(
        snapshot.transcript(node_id), {n: snapshot.siblings(n) for n in path}
    )


def _live_cards(transcript: TranscriptView) -> list[MessageCard]:
    # Cards deleted later are gone once the deferred deletions run.
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return transcript.findChildren(MessageCard)


def test_switching_between_sibling_replies_renders_nothing_again(
    qtbot, make_window, monkeypatch
):
    window = make_window()
    send(qtbot, window, "one")
    send(qtbot, window, "two")
    first_reply = window.active_id
    first_card = window.transcript.cards[-1]
    qtbot.mouseClick(first_card.regenerate_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    second_reply = window.active_id
    assert second_reply != first_reply
    shared = window.transcript.cards[:-1]
    second_card = window.transcript.cards[-1]
    renders = _RenderCount(monkeypatch)

    qtbot.mouseClick(second_card.previous_button, Qt.MouseButton.LeftButton)
    assert window.active_id == first_reply
    cards = window.transcript.cards
    assert all(a is b for a, b in zip(cards[:-1], shared, strict=True))
    # The first reply's card, kept since the regeneration began, now with the
    # navigator its new sibling calls for.
    assert cards[-1] is first_card
    assert first_card.isVisible() and second_card.isHidden()
    assert first_card.sibling_label.text() == "1/2"
    assert not first_card.previous_button.isEnabled()
    wait_idle(qtbot, window)

    qtbot.mouseClick(first_card.next_button, Qt.MouseButton.LeftButton)
    assert window.active_id == second_reply
    assert window.transcript.cards[-1] is second_card
    assert second_card.sibling_label.text() == "2/2"
    assert renders.count == 0
    wait_idle(qtbot, window)


def test_a_message_whose_text_changed_gets_a_new_card(qtbot):
    transcript = TranscriptView()
    qtbot.addWidget(transcript)
    before = TreeSnapshot(1, [_node(1, None, "root", ""), _node(2, 1, "user", "hi")])
    _show(transcript, before, 2)
    old = transcript.cards[0]

    after = TreeSnapshot(1, [_node(1, None, "root", ""), _node(2, 1, "user", "hello")])
    _show(transcript, after, 2)

    assert transcript.cards[0] is not old and transcript.cards[0].text == "hello"
    assert _live_cards(transcript) == [transcript.cards[0]]


def test_cards_kept_off_the_path_are_bounded(qtbot, monkeypatch):
    monkeypatch.setattr(transcript_module, "KEPT_CARDS", 3)
    transcript = TranscriptView()
    qtbot.addWidget(transcript)
    # A root with six answers side by side, each shown in turn.
    nodes = [_node(1, None, "root", "")]
    nodes += [_node(n, 1, "user", f"message {n}") for n in range(2, 8)]
    snapshot = TreeSnapshot(1, nodes)
    for node_id in range(2, 8):
        _show(transcript, snapshot, node_id)

    shown = transcript.cards
    assert [card.node_id for card in shown] == [7]
    assert shown[0].sibling_label.text() == "6/6"
    # The one shown and the three most recently shown before it.
    assert sorted(card.node_id for card in _live_cards(transcript)) == [4, 5, 6, 7]

    renders = _RenderCount(monkeypatch)
    _show(transcript, snapshot, 5)
    _show(transcript, snapshot, 2)
    assert renders.count == 1  # message 5 was kept, message 2 was not


def test_a_navigator_made_later_belongs_to_its_card(qtbot):
    card = MessageCard("assistant", "an answer", 3, [3])
    qtbot.addWidget(card)
    assert not hasattr(card, "sibling_label")  # no siblings, no navigator
    card.set_siblings([3, 9])
    assert card.sibling_label.window() is card
    assert card.sibling_label.text() == "1/2" and card.next_button.isEnabled()
    card.set_siblings([3])  # the sibling was deleted
    assert card.sibling_label.isHidden() and card.next_button.isHidden()
    # Made with siblings, before the card is shown: no window of its own.
    other = MessageCard("assistant", "another", 9, [3, 9])
    qtbot.addWidget(other)
    assert other.previous_button.window() is other
    assert not other.previous_button.isWindow()


def test_the_cards_that_streamed_become_those_of_the_stored_messages(qtbot):
    transcript = TranscriptView()
    qtbot.addWidget(transcript)
    nodes = [_node(1, None, "root", ""), _node(2, 1, "user", "hi")]
    nodes += [_node(3, 2, "assistant", "and now?")]  # like the question below
    before = TreeSnapshot(1, nodes)
    _show(transcript, before, 2)  # the answer to "hi" is not shown
    transcript.begin_stream("and now?")
    question, reply = transcript.cards[-2:]
    transcript.append_stream("an answer")  # the last pieces are not drawn yet
    assert reply.node_id is None and reply.property("streaming")

    nodes += [_node(4, 3, "user", "and now?"), _node(5, 4, "assistant", "an answer")]
    _show(transcript, TreeSnapshot(1, nodes), 5)

    # The messages the two cards streamed, not one shown for the first time
    # above them, get them.
    assert transcript.cards[-3].node_id == 3 and transcript.cards[-3] is not reply
    assert transcript.cards[-2:] == [question, reply]
    assert (question.node_id, reply.node_id) == (4, 5)
    assert reply.text == "an answer" and not reply.property("streaming")
    assert reply.body.toPlainText().strip() == "an answer"
    assert question.edit_button.isEnabled() and reply.regenerate_button.isEnabled()
    # Their buttons ask for what they show, as a new card's would.
    asked = []
    transcript.regenerate_requested.connect(asked.append)
    qtbot.mouseClick(reply.regenerate_button, Qt.MouseButton.LeftButton)
    assert asked == [5]
    live = sorted(card.node_id for card in _live_cards(transcript))
    assert live == [2, 3, 4, 5]  # no card left over


def test_a_streamed_reply_that_was_stopped_gets_a_card_with_its_badge(qtbot):
    transcript = TranscriptView()
    qtbot.addWidget(transcript)
    before = TreeSnapshot(1, [_node(1, None, "root", ""), _node(2, 1, "user", "hi")])
    _show(transcript, before, 2)
    transcript.begin_stream(None)
    streamed = transcript.cards[-1]
    transcript.append_stream("half an")

    stopped = replace(_node(3, 2, "assistant", "half an"), status="stopped")
    _show(transcript, TreeSnapshot(1, [*before.nodes.values(), stopped]), 3)

    card = transcript.cards[-1]
    assert card is not streamed and (card.node_id, card.status) == (3, "stopped")
    assert _live_cards(transcript) == transcript.cards
