"""Reasoning models in the window: the folded thinking, the switch, the ChatML note.

A tiny model "thinks" when its chat template's generation prompt opens the
thinking block: the random-weight model never closes it, so its whole greedy
reply is reasoning. A template that reads ``enable_thinking`` gives the model
a reasoning switch (off: the generation prompt closes the block at once, so
the whole reply is answer).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.jobs.results import Replied
from app.qt.views.chrome.status_bar import CHATML_NOTE
from app.qt.views.transcript.message_card import MessageCard
from app.qt.views.transcript.thinking import STREAMING_TITLE, thought_title
from app.qt.views.transcript.transcript import TranscriptView
from storage import conversation_rows, node_rows
from tests.helpers.tiny_model import write_tiny_model
from tests.ui.conftest import WAIT_MS, send, slow_down_generation, wait_idle

_HISTORY = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a tiny test model.<|im_end|>\n' }}"
    "{% endif %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\n' }}"
    "{% if message.reasoning_content is defined and message.reasoning_content %}"
    "{{ '<think>\n' + message.reasoning_content + '\n</think>\n\n' }}"
    "{% endif %}"
    "{{ message['content'] + '<|im_end|>\n' }}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] }}"
    "{{ '<|im_end|>\n' }}"
    "{% endif %}"
    "{% endfor %}"
)
# Always thinks: the generation prompt opens the block (no switch).
THINKING_TEMPLATE = (
    _HISTORY
    + "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n' }}"
    + "{% endif %}"
)
# Qwen3's switch: thinking unless ``enable_thinking`` is false.
SWITCH_TEMPLATE = (
    _HISTORY
    + "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    + "{% if enable_thinking is defined and enable_thinking is false %}"
    + "{{ '<think>\n\n</think>\n\n' }}"
    + "{% else %}{{ '<think>\n' }}{% endif %}"
    + "{% endif %}"
)


@pytest.fixture(scope="session")
def thinking_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model that always reasons."""
    folder = tmp_path_factory.mktemp("thinking")
    return write_tiny_model(folder / "thinking.gguf", chat_template=THINKING_TEMPLATE)


@pytest.fixture(scope="session")
def switch_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model whose template has a reasoning switch (``enable_thinking``)."""
    folder = tmp_path_factory.mktemp("switch")
    return write_tiny_model(folder / "switch.gguf", chat_template=SWITCH_TEMPLATE)


@pytest.fixture(scope="session")
def no_template_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model without a chat template."""
    folder = tmp_path_factory.mktemp("no-template")
    return write_tiny_model(folder / "no-template.gguf", chat_template=None)


def _last_reply(results):
    return next(r for r in reversed(results) if isinstance(r, Replied)).reply


def _choose_reasoning(qtbot, window, choice: str | None) -> None:
    """Pick ``choice`` in the reasoning box with the keyboard, as a user would."""
    box = window.composer.reasoning_box
    target = box.findData(choice or "")
    assert target >= 0, f"{choice!r} is not offered"
    box.setFocus()
    key = Qt.Key.Key_Down if target > box.currentIndex() else Qt.Key.Key_Up
    while box.currentIndex() != target:
        qtbot.keyClick(box, key)
    wait_idle(qtbot, window)


# --- thinking in the transcript -------------------------------------------------


def test_a_reply_that_thinks_shows_its_reasoning_folded(
    qtbot, make_window, thinking_model
):
    window = make_window(model=thinking_model)
    assert window.model_info.chat_format == "gguf"
    assert not window.status.chat_format_label.isVisibleTo(window)
    slow_down_generation(window, 0.01)  # lets the transcript draw mid-stream
    results, pieces, answer_pieces, seen = [], [], [], []
    window.engine.finished.connect(results.append)
    window.engine.thinking_received.connect(pieces.append)
    window.engine.token_received.connect(answer_pieces.append)

    def look(_piece: str) -> None:
        card = window.transcript.streaming_card
        if card is not None and card.thinking_section is not None:
            section = card.thinking_section
            seen.append((section.expanded, section.toggle.text(), section.text))

    window.engine.thinking_received.connect(look)
    send(qtbot, window, "Why is the sky blue?")

    reply = _last_reply(results)
    assert reply.thinking, "the tiny model did not think"
    assert "".join(pieces) == reply.thinking
    assert "".join(answer_pieces) == reply.text
    # While it streamed, the section was open under "Thinking…", filling up.
    assert seen, "the thinking was never drawn while it streamed"
    assert all(expanded and title == STREAMING_TITLE for expanded, title, _ in seen)
    assert 0 < len(seen[0][2]) <= len(seen[-1][2])

    node = node_rows.get_node(window.db, window.active_id)
    assert node.thinking == reply.thinking and node.text == reply.text
    card = window.transcript.cards[-1]
    assert card.node_id == node.id
    section = card.thinking_section
    assert section is not None
    assert section.text == reply.thinking
    # Qt's plain text turns the random model's odd whitespace (\r, \x0c, ...)
    # into line breaks; the words are the same.
    assert section.body.toPlainText().split() == reply.thinking.split()
    assert not section.expanded and not section.body.isVisibleTo(window)
    assert section.toggle.text() == thought_title(reply.thinking)
    assert card.text == reply.text
    assert reply.thinking.strip() not in card.body.toPlainText()
    # The tree lists the answer, never the reasoning.
    tree_text = window.tree_model.index_of(node.id).data()
    assert reply.thinking.strip()[:20] not in tree_text

    # Click to read it, Space (keyboard) to fold it again.
    qtbot.mouseClick(section.toggle, Qt.MouseButton.LeftButton)
    assert section.expanded and section.body.isVisibleTo(window)
    section.toggle.setFocus()
    qtbot.keyClick(section.toggle, Qt.Key.Key_Space)
    assert not section.expanded

    # Copy copies the answer only.
    QGuiApplication.clipboard().setText("something else")
    qtbot.mouseClick(card.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == reply.text

    # Shown again later (another conversation, then back): still folded.
    conversation = window.conversation_id
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, window)
    window.show_conversation(conversation)
    wait_idle(qtbot, window)
    card = window.transcript.cards[-1]
    assert card.thinking == reply.thinking and not card.thinking_section.expanded


def test_replies_without_thinking_show_no_section(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "hello")
    assert node_rows.get_node(window.db, window.active_id).thinking == ""
    assert all(card.thinking_section is None for card in window.transcript.cards)
    # The tiny ChatML model has no reasoning switch.
    assert window.model_info.reasoning_choices == ()
    assert not window.composer.reasoning_box.isVisibleTo(window)


def test_the_thinking_folds_as_soon_as_the_answer_begins(qtbot):
    transcript = TranscriptView()
    qtbot.addWidget(transcript)
    transcript.show()
    transcript.begin_stream("What is a tree?")
    card = transcript.streaming_card
    for piece in ("The user asks ", "about trees. ", "Keep it short."):
        transcript.append_thinking(piece)
    qtbot.waitUntil(lambda: card.thinking_section is not None, timeout=WAIT_MS)
    section = card.thinking_section
    qtbot.waitUntil(lambda: section.text.endswith("short."), timeout=WAIT_MS)
    assert section.expanded and section.toggle.text() == STREAMING_TITLE
    assert not card.body.isVisibleTo(transcript)  # no "…" under the open thinking

    transcript.append_stream("A tree is ")
    transcript.append_stream("a plant.")
    qtbot.waitUntil(lambda: card.text == "A tree is a plant.", timeout=WAIT_MS)
    assert not section.expanded
    assert section.toggle.text() == "Thought for 8 words"
    assert card.body.isVisibleTo(transcript)
    assert "user asks" not in card.body.toPlainText()
    assert transcript.streamed_thinking == "The user asks about trees. Keep it short."


def test_a_finished_card_keeps_thinking_and_answer_apart(qtbot):
    card = MessageCard(
        "assistant", "**Yes.**", node_id=7, thinking="Let me check.\nIt is yes."
    )
    qtbot.addWidget(card)
    card.show()
    section = card.thinking_section
    assert section is not None and not section.expanded
    assert section.toggle.text() == "Thought for 6 words"
    assert card.body.toPlainText() == "Yes."
    assert card.layout().indexOf(section) < card.layout().indexOf(card.body)
    QGuiApplication.clipboard().setText("")
    qtbot.mouseClick(card.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == "**Yes.**"
    assert MessageCard("assistant", "plain", node_id=8).thinking_section is None


# --- the reasoning switch -----------------------------------------------------------


def test_the_reasoning_switch_is_stored_per_conversation_and_used(
    qtbot, make_window, switch_model
):
    window = make_window(model=switch_model)
    choices = window.model_info.reasoning_choices
    assert "off" in choices, choices
    box = window.composer.reasoning_box
    assert box.isVisibleTo(window) and box.isEnabled()
    assert [box.itemData(i) for i in range(box.count())] == ["", *choices]
    assert box.currentIndex() == 0  # the template's default
    assert box.currentText().startswith("Default")
    results = []
    window.engine.finished.connect(results.append)

    # Default: the template thinks.
    send(qtbot, window, "first")
    assert _last_reply(results).thinking
    assert window.transcript.cards[-1].thinking_section is not None

    _choose_reasoning(qtbot, window, "off")
    conversation = window.conversation_id
    assert (
        conversation_rows.get_conversation(window.db, conversation).reasoning == "off"
    )
    assert window.composer.reasoning == "off"
    send(qtbot, window, "second")
    reply = _last_reply(results)
    assert reply.thinking == "" and reply.text
    assert window.transcript.cards[-1].thinking_section is None
    # The earlier reply keeps its reasoning.
    assert window.transcript.cards[1].thinking_section is not None

    # A new conversation starts at the default; the first keeps its choice.
    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, window)
    assert window.conversation_id != conversation
    assert window.composer.reasoning is None and box.currentIndex() == 0
    window.show_conversation(conversation)
    wait_idle(qtbot, window)
    assert window.composer.reasoning == "off"
    window.close()

    again = make_window(model=switch_model)
    assert again.conversation_id == conversation
    assert again.composer.reasoning == "off"
    assert again.composer.reasoning_box.currentText() == "Off"
    _choose_reasoning(qtbot, again, None)
    assert conversation_rows.get_conversation(again.db, conversation).reasoning is None


def test_the_switch_is_disabled_while_a_reply_streams(qtbot, make_window, switch_model):
    window = make_window(model=switch_model)
    slow_down_generation(window, 0.01)
    qtbot.keyClicks(window.composer.edit, "hi")
    with qtbot.waitSignal(window.engine.thinking_received, timeout=WAIT_MS):
        qtbot.keyClick(
            window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
        )
    assert not window.composer.reasoning_box.isEnabled()
    wait_idle(qtbot, window)
    assert window.composer.reasoning_box.isEnabled()


# --- the chat format note -----------------------------------------------------------


def test_a_model_without_a_chat_template_shows_the_chatml_note(
    qtbot, make_window, no_template_model
):
    window = make_window(model=no_template_model)
    assert window.model_info.chat_format == "chatml"
    label = window.status.chat_format_label
    assert label.isVisibleTo(window)
    assert label.text() == CHATML_NOTE and "ChatML" in label.text()
    assert "worse" in label.toolTip()
    assert not window.composer.reasoning_box.isVisibleTo(window)
    send(qtbot, window, "hello")  # and it still chats

    window.load_model(make_window.tiny_model)  # a model with its own template
    wait_idle(qtbot, window)
    assert window.model_info.chat_format == "gguf"
    assert not label.isVisibleTo(window)
