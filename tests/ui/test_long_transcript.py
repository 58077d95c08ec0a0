"""A long path: the transcript makes cards for what is in and near its view
only, and scrolling, following, a reply and the window behave as on a short one."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QPoint, Qt
from PySide6.QtWidgets import QApplication

import app.qt.gui
from app.conversation.tree_snapshot import TreeSnapshot
from app.qt.views.transcript import transcript as transcript_module
from app.qt.views.transcript.message_body import MessageBody
from app.qt.views.transcript.message_card import MessageCard
from app.qt.views.transcript.transcript import TranscriptView
from storage.conversation_rows import NewNode, insert_conversation
from storage.records import NodeSummary
from storage.values import Role
from tests.ui.conftest import wait_idle

PROSE = (
    "the tree grows slowly in a cold climate and its roots go deep into the soil "
    "where water stays through the summer months while leaves fall"
)


def _texts(count: int, seed: int = 3) -> list[tuple[str, str]]:
    """Questions and answers in turn, the answers of a few paragraphs and
    sometimes a list or a code block: cards of unlike heights."""
    rng = random.Random(seed)
    vocabulary = PROSE.split()

    def words(n: int) -> str:
        return " ".join(rng.choice(vocabulary) for _ in range(n))

    texts = []
    for i in range(count):
        if i % 2 == 0:
            texts.append(("user", f"Question {i}: {words(rng.randint(4, 30))}?"))
            continue
        parts = [f"Answer {i}."]
        parts += [words(rng.randint(10, 90)) for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.3:
            parts.append("\n".join(f"- {words(6)}" for _ in range(4)))
        if rng.random() < 0.2:
            parts.append("```python\n" + "\n".join(["x = 1"] * 6) + "\n```")
        texts.append(("assistant", "\n\n".join(parts)))
    return texts


def _snapshot(count: int) -> TreeSnapshot:
    """One path: a root without a system prompt, then ``count`` messages
    (node ids 2 to ``count + 1``)."""
    now = datetime.now(UTC)
    nodes = [_node(1, None, "root", "", now)]
    for i, (role, text) in enumerate(_texts(count), start=2):
        nodes.append(_node(i, i - 1, role, text, now))
    return TreeSnapshot(1, nodes)


def _node(
    node_id: int, parent: int | None, role: str, text: str, now: datetime
) -> NodeSummary:
    return NodeSummary(
        id=node_id,
        parent_id=parent,
        role=role,
        text=text,
        n_tokens=len(text.split()),
        status="complete",
        checkpoint_bytes=0,
        created_at=now,
    )


def _show(transcript: TranscriptView, snapshot: TreeSnapshot, node_id: int) -> None:
    path = snapshot.path(node_id)
    transcript.show_path(
        snapshot.transcript(node_id), {n: snapshot.siblings(n) for n in path}
    )


def _settle(qtbot) -> None:
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(10)


def _live_cards(transcript: TranscriptView) -> list[MessageCard]:
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return transcript.findChildren(MessageCard)


def _in_view(transcript: TranscriptView, card: MessageCard) -> bool:
    """Whether some of ``card`` shows in the transcript's view."""
    y = card.mapTo(transcript.viewport(), QPoint(0, 0)).y()
    return (
        card.isVisible()
        and y < transcript.viewport().height()
        and y + card.height() > 0
    )


@pytest.fixture
def transcript(qtbot) -> TranscriptView:
    view = TranscriptView()
    qtbot.addWidget(view)
    view.resize(900, 700)
    view.show()
    qtbot.waitExposed(view)
    return view


def test_a_long_path_shows_with_few_cards_made(qtbot, transcript):
    snapshot = _snapshot(1000)
    _show(transcript, snapshot, 1001)
    _settle(qtbot)

    assert transcript.message_count == 1000
    assert len(_live_cards(transcript)) < 40
    bar = transcript.verticalScrollBar()
    assert transcript.following and bar.value() == bar.maximum()
    last = transcript.cards[-1]
    assert last.node_id == 1001 and _in_view(transcript, last)
    assert last.body.toPlainText().startswith("Answer 999.")
    # Made for the view and a little more, in path order, the last ones.
    ids = [card.node_id for card in transcript.cards]
    assert ids == list(range(ids[0], 1002))


def test_the_scroll_range_is_plausible_and_scrolling_through_makes_few(
    qtbot, transcript
):
    snapshot = _snapshot(160)
    _show(transcript, snapshot, 161)
    _settle(qtbot)
    bar = transcript.verticalScrollBar()
    estimated = bar.maximum()
    assert estimated > 160 * 50  # every message has room, not just those made

    # Page from the top to the end: every card is made once on the way.
    bar.setValue(0)
    most = 0
    while bar.value() < bar.maximum():
        bar.setValue(bar.value() + bar.pageStep())
        _settle(qtbot)
        most = max(most, len(_live_cards(transcript)))
        # Nothing in view is left without its card.
        made = [card for card in transcript.cards if _in_view(transcript, card)]
        assert made, "a blank view"
    measured = bar.maximum()  # every height now a card's own
    assert abs(estimated - measured) < 0.25 * measured
    # Those left behind go to the bounded store of cards kept.
    assert most < 40 + transcript_module.KEPT_CARDS


def test_scrolling_up_moves_what_is_read_by_the_scroll_only(qtbot, transcript):
    snapshot = _snapshot(400)
    _show(transcript, snapshot, 401)
    _settle(qtbot)
    bar = transcript.verticalScrollBar()
    view = transcript.viewport()
    step = bar.pageStep() // 2
    for _ in range(25):
        before = next(c for c in transcript.cards if _in_view(transcript, c))
        y = before.mapTo(view, QPoint(0, 0)).y()
        bar.setValue(bar.value() - step)  # the user scrolls up half a page
        _settle(qtbot)
        # Cards made above it (their estimates corrected) did not move it:
        # it went down exactly as far as the view went up.
        assert before.mapTo(view, QPoint(0, 0)).y() == y + step
        assert [c for c in transcript.cards if _in_view(transcript, c)]
    assert not transcript.following


def test_scrolling_back_renders_nothing_again(qtbot, transcript, monkeypatch):
    snapshot = _snapshot(400)
    _show(transcript, snapshot, 401)
    _settle(qtbot)
    bar = transcript.verticalScrollBar()
    for _ in range(6):  # far enough up that the last cards are dropped
        bar.setValue(bar.value() - bar.pageStep())
        _settle(qtbot)
    assert transcript.card_for(401) is None
    renders = []
    original = MessageBody.set_markdown
    monkeypatch.setattr(
        MessageBody,
        "set_markdown",
        lambda body, *args: renders.append(body) or original(body, *args),
    )
    while bar.value() < bar.maximum():
        bar.setValue(bar.value() + bar.pageStep())
        _settle(qtbot)
    assert _in_view(transcript, transcript.card_for(401))
    assert renders == []  # the cards dropped on the way up were kept


def test_a_message_far_up_is_made_and_shown_at_the_top(qtbot, transcript):
    snapshot = _snapshot(1000)
    _show(transcript, snapshot, 1001)
    _settle(qtbot)
    assert transcript.card_for(13) is None  # far above: not made

    card = transcript.show_message(13)  # the 12th message
    _settle(qtbot)
    assert card is transcript.card_for(13)
    assert card is not None and card.body.toPlainText().startswith("Answer 11.")
    assert card.mapTo(transcript.viewport(), QPoint(0, 0)).y() == 0
    assert not transcript.following and transcript._jump_button.isVisible()
    assert len(_live_cards(transcript)) < 40 + transcript_module.KEPT_CARDS

    # "Jump to latest" goes back to the end, its cards made again.
    qtbot.mouseClick(transcript._jump_button, Qt.MouseButton.LeftButton)
    _settle(qtbot)
    bar = transcript.verticalScrollBar()
    assert transcript.following and bar.value() == bar.maximum()
    assert _in_view(transcript, transcript.card_for(1001))


def test_a_reply_streams_below_a_long_path_and_becomes_its_card(qtbot, transcript):
    snapshot = _snapshot(600)
    _show(transcript, snapshot, 601)
    transcript.begin_stream("and now?")
    question, reply = transcript.cards[-2:]
    transcript.append_stream("a streamed answer")
    qtbot.waitUntil(lambda: "a streamed answer" in reply.body.toPlainText())
    _settle(qtbot)
    assert _in_view(transcript, reply) and transcript.following

    # The user reads far up meanwhile; the reply's cards stay made.
    transcript.verticalScrollBar().setValue(0)
    _settle(qtbot)
    assert transcript.cards[-2:] == [question, reply]
    assert not _in_view(transcript, reply)

    now = datetime.now(UTC)
    nodes = [*snapshot.nodes.values()]
    nodes += [_node(602, 601, "user", "and now?", now)]
    nodes += [_node(603, 602, "assistant", "a streamed answer", now)]
    _show(transcript, TreeSnapshot(1, nodes), 603)  # follows: a new message
    _settle(qtbot)
    assert transcript.cards[-2:] == [question, reply]
    assert (question.node_id, reply.node_id) == (602, 603)
    assert _in_view(transcript, reply)


def test_replies_to_pick_from_stand_in_for_the_last_card(qtbot, transcript):
    snapshot = _snapshot(500)
    _show(transcript, snapshot, 501)
    _settle(qtbot)
    transcript.offer_choice([(501, "one"), (777, "two")])
    _settle(qtbot)
    assert transcript.choices is not None and transcript.choices.isVisible()
    assert transcript.card_for(501).isHidden()
    bar = transcript.verticalScrollBar()
    bar.setValue(0)
    _settle(qtbot)
    bar.setValue(bar.maximum())
    _settle(qtbot)
    assert transcript.choices.isVisible() and transcript.card_for(501).isHidden()

    _show(transcript, snapshot, 501)  # kept the first: the path is shown again
    _settle(qtbot)
    assert transcript.choices is None
    assert _in_view(transcript, transcript.card_for(501))


def test_a_narrower_view_keeps_the_reading_place(qtbot, transcript):
    snapshot = _snapshot(300)
    _show(transcript, snapshot, 301)
    _settle(qtbot)
    card = transcript.show_message(150)
    _settle(qtbot)
    assert card is not None
    transcript.resize(620, 700)  # the text wraps to more lines everywhere
    _settle(qtbot)
    view = transcript.viewport()
    assert transcript.card_for(150) is card
    assert card.mapTo(view, QPoint(0, 0)).y() == 0
    assert [c for c in transcript.cards if _in_view(transcript, c)]


def test_the_window_opens_a_long_conversation_with_few_cards(
    qtbot, make_window, monkeypatch
):
    # No model: a conversation stays readable, and no engine work competes.
    monkeypatch.setattr(app.qt.gui, "remembered_or_starter_model", lambda _path: None)
    db = make_window.open_db()
    nodes = [NewNode(key=0, parent_key=None, role=Role.ROOT, text="")]
    for i, (role, text) in enumerate(_texts(1000), start=1):
        nodes.append(NewNode(key=i, parent_key=i - 1, role=Role(role), text=text))
    record, ids = insert_conversation(
        db,
        title="long",
        system_prompt=None,
        reasoning=None,
        created_at=None,
        nodes=nodes,
        active_key=1000,
    )
    db.close()
    window = make_window(model=None)
    window.resize(1100, 800)
    assert window.conversation_id == record.id
    _settle(qtbot)
    transcript = window.transcript
    assert transcript.message_count == 1000
    assert len(_live_cards(transcript)) < 40
    assert _in_view(transcript, transcript.card_for(ids[1000]))

    # Reading in the middle, the text made larger: the place is kept.
    card = transcript.show_message(ids[500])
    assert card is not None
    page, bar = transcript.widget(), transcript.verticalScrollBar()
    bar.setValue(card.mapTo(page, QPoint(0, 0)).y() + card.height() // 2)
    window.zoom_in_action.trigger()
    window.zoom_in_action.trigger()
    _settle(qtbot)
    top = card.mapTo(page, QPoint(0, 0)).y()
    assert abs(bar.value() - (top + card.height() // 2)) < 30
    assert [c for c in transcript.cards if _in_view(transcript, c)]
    window.actual_size_action.trigger()

    # A message far up chosen (in the tree): the path ends there, in view.
    window.activate(ids[40])
    wait_idle(qtbot, window)
    _settle(qtbot)
    assert transcript.message_count == 40
    card = transcript.card_for(ids[40])
    assert card is not None and _in_view(transcript, card)
    assert card.body.toPlainText().startswith("Answer 39.")
