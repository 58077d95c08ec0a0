"""Tool calls and results as cards in the transcript: a reply's calls with
their tool, server and arguments as sent; Run, Edit arguments and Deny on the
call that waits, through ``TranscriptView``'s signals; a long result folded;
a result's card with Edit and no Regenerate; cards made again or reused
showing the calls' state now. Real widgets, no model."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase

from app.conversation.tool_text import (
    arguments_error,
    fold,
    label_text,
    pretty_arguments,
)
from app.qt.views.chrome.zoom import body_style
from app.qt.views.transcript.message_card import MessageCard
from app.qt.views.transcript.tool_cards import WAITS_NOTE
from app.qt.views.transcript.transcript import TranscriptView
from storage import tool_use
from storage.records import NodeSummary
from storage.values import Role, Status

# Sent as the model wrote it: no spaces, an exponent, a non-ASCII escape.
ARGUMENTS = '{"zone":"Europe/Oslo","at":1e5,"note":"caf\\u00e9","tags":[]}'
CALLS = [
    {"id": "call_1", "name": "get_time", "arguments": ARGUMENTS},
    {"id": "call_2", "name": "search", "arguments": '{"q": "weather"}'},
]
TOOLS = [{"type": "function", "function": {"name": n}} for n in ("get_time", "search")]


def _node(
    node_id: int,
    parent: int | None,
    role: Role,
    text: str,
    use: dict[str, object] | None = None,
    n_tokens: int = 0,
) -> NodeSummary:
    return NodeSummary(
        id=node_id,
        parent_id=parent,
        role=role,
        text=text,
        n_tokens=n_tokens,
        status=Status.COMPLETE,
        checkpoint_bytes=0,
        created_at=datetime.now(UTC),
        tool_use=use,
    )


def _agent_path(result: str = "12:00", n_tokens: int = 0) -> list[NodeSummary]:
    """A start offering two tools (one from the server "time"), a question, a
    reply that calls both, and the first call's result."""
    return [
        _node(
            1,
            None,
            Role.ROOT,
            "Be brief.",
            tool_use.offering(TOOLS, {"get_time": "time"}),
        ),
        _node(2, 1, Role.USER, "What time is it?"),
        _node(3, 2, Role.ASSISTANT, "Let me check.", tool_use.calling(CALLS)),
        _node(
            4,
            3,
            Role.TOOL,
            result,
            tool_use.answering("call_1", "get_time"),
            n_tokens,
        ),
    ]


def _show(view: TranscriptView, nodes: list[NodeSummary]) -> None:
    view.show_path(
        nodes,
        {node.id: [node.id] for node in nodes},
    )


@pytest.fixture
def view(qtbot) -> TranscriptView:  # type: ignore[no-untyped-def]
    transcript = TranscriptView()
    qtbot.addWidget(transcript)
    transcript.resize(760, 900)
    return transcript


def _card(view: TranscriptView, node_id: int) -> MessageCard:
    card = view.card_for(node_id)
    assert card is not None
    return card


# --- words ---------------------------------------------------------------------


def test_arguments_are_laid_out_with_every_value_as_sent():
    shown = pretty_arguments(ARGUMENTS)
    assert shown == (
        "{\n"
        '  "zone": "Europe/Oslo",\n'
        '  "at": 1e5,\n'
        '  "note": "caf\\u00e9",\n'
        '  "tags": []\n'
        "}"
    )
    assert json.loads(shown) == json.loads(ARGUMENTS)
    # Two keys of the same name both show (a dict would keep one).
    assert pretty_arguments('{"a":1,"a":2}') == '{\n  "a": 1,\n  "a": 2\n}'
    # Commas and colons inside strings are text, not structure.
    assert pretty_arguments('{"s":"a, b: {c}"}') == '{\n  "s": "a, b: {c}"\n}'
    assert pretty_arguments("not json, {") == "not json, {"


def test_edited_arguments_must_be_an_object():
    assert arguments_error('{"a": 1}') is None
    assert "Not JSON" in (arguments_error("{a: 1}") or "")
    assert "JSON object" in (arguments_error("[1]") or "")


def test_labels_keep_a_short_text_for_the_tree():
    use = tool_use.calling(CALLS)
    assert label_text(Role.ASSISTANT, "Let me check.", use) == (
        "Let me check. Calls `get_time`, `search`"
    )
    result = label_text(Role.TOOL, "x" * 10_000, tool_use.answering("c", "get_time"))
    assert result.startswith("Result of `get_time`: x") and len(result) < 500


# --- calls ---------------------------------------------------------------------


def test_a_calling_reply_shows_tool_server_and_exact_arguments(view):
    _show(view, _agent_path())
    card = _card(view, 3)
    assert card.text == "Let me check."  # no calls written into the text
    assert card.tool_calls is not None
    first, second = card.tool_calls.frames
    assert "get_time" in first.title.text()
    assert first.server_label.text() == "on time"
    assert first.arguments_view.toPlainText() == pretty_arguments(ARGUMENTS)
    assert "1e5" in first.arguments_view.toPlainText()
    assert "search" in second.title.text()
    assert second.server_label.isHidden()  # its server is not known
    # Not waiting: no buttons, no note.
    assert first.action_row is None and first.note is None
    assert _card(view, 2).tool_calls is None


def test_arguments_and_results_are_monospace_and_follow_the_zoom(view):
    _show(view, _agent_path())
    arguments = _card(view, 3).tool_calls.frames[0].arguments_view  # type: ignore[union-attr]
    result = _card(view, 4).tool_result.text_view  # type: ignore[union-attr]
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    for text in (arguments, result):
        assert text.font().families() == fixed.families()
    big = QFont(view.font())
    big.setPointSizeF(21)
    view.setStyleSheet(body_style(big))  # as ``TextZoom`` does
    for text in (arguments, result):
        text.ensurePolished()
        assert text.font().pointSizeF() == 21
        assert text.font().families() == fixed.families()


def test_run_and_deny_the_waiting_call_through_the_transcript(view, qtbot):
    _show(view, _agent_path())
    view.set_waiting_calls({3: ["call_1", "call_2"]})
    panel = _card(view, 3).tool_calls
    assert panel is not None
    first, second = panel.frames
    assert first.action_row is not None and not first.action_row.isHidden()
    # Calls run in order: the second waits for the first.
    assert second.action_row is None
    assert second.note is not None and second.note.text() == WAITS_NOTE
    assert not second.note.isHidden()

    with qtbot.waitSignal(view.run_call_requested) as run:
        qtbot.mouseClick(first.run_button, Qt.MouseButton.LeftButton)
    assert run.args == [3, "call_1"]
    with qtbot.waitSignal(view.deny_call_requested) as deny:
        qtbot.mouseClick(first.deny_button, Qt.MouseButton.LeftButton)
    assert deny.args == [3, "call_1"]

    # The first answered: the second runs next.
    view.set_waiting_calls({3: ["call_2"]})
    assert first.action_row.isHidden()
    assert second.action_row is not None and not second.action_row.isHidden()
    assert second.note.isHidden()
    with qtbot.waitSignal(view.run_call_requested) as run:
        qtbot.mouseClick(second.run_button, Qt.MouseButton.LeftButton)
    assert run.args == [3, "call_2"]

    # While a job runs, nothing can be run; the arguments stay selectable.
    view.set_tool_actions_enabled(False)
    assert not second.run_button.isEnabled() and not second.deny_button.isEnabled()
    assert second.arguments_view.isEnabled()
    view.set_actions_enabled(False)  # a reply generating: the same
    assert second.arguments_view.isEnabled()
    view.set_tool_actions_enabled(True)
    assert second.run_button.isEnabled()

    # All answered: no buttons anywhere.
    view.set_waiting_calls({})
    assert first.action_row.isHidden() and second.action_row.isHidden()
    assert second.note.isHidden()


def test_edited_arguments_are_checked_inline_then_sent(view, qtbot):
    _show(view, _agent_path())
    view.set_waiting_calls({3: ["call_1"]})
    panel = _card(view, 3).tool_calls
    assert panel is not None
    frame = panel.frames[0]
    qtbot.mouseClick(frame.edit_button, Qt.MouseButton.LeftButton)
    assert frame.editing and frame.arguments_view.isHidden()
    assert frame.action_row is not None and frame.action_row.isHidden()
    assert frame.arguments_edit.toPlainText() == pretty_arguments(ARGUMENTS)

    for wrong, said in (("{zone: Oslo}", "Not JSON"), ('["Oslo"]', "JSON object")):
        frame.arguments_edit.setPlainText(wrong)
        with qtbot.assertNotEmitted(view.run_edited_call_requested):
            qtbot.mouseClick(frame.run_edited_button, Qt.MouseButton.LeftButton)
        assert said in frame.invalid_label.text()
        assert not frame.invalid_label.isHidden()
        assert frame.editing  # the text stays to be mended

    edited = '{"zone": "Europe/Paris"}'
    frame.arguments_edit.setPlainText(edited)
    assert frame.invalid_label.isHidden()  # said of the text before
    with qtbot.waitSignal(view.run_edited_call_requested) as sent:
        qtbot.mouseClick(frame.run_edited_button, Qt.MouseButton.LeftButton)
    assert sent.args == [3, "call_1", edited]
    assert not frame.editing

    # Cancel puts the arguments as sent back, with the buttons.
    qtbot.mouseClick(frame.edit_button, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(frame.cancel_button, Qt.MouseButton.LeftButton)
    assert not frame.editing and not frame.action_row.isHidden()
    assert not frame.arguments_view.isHidden()


# --- results -------------------------------------------------------------------


def test_a_long_result_is_folded_until_shown_whole(view, qtbot):
    line = "0123456789 " * 9 + "\n"
    text = line * (1_000_000 // len(line))
    _show(view, _agent_path(text, n_tokens=1234))
    card = _card(view, 4)
    result = card.tool_result
    assert result is not None and card.body.isHidden()
    assert "get_time" in result.title.text()
    assert result.size_label.text() == "1,234 tokens"
    assert result.error_badge.isHidden()
    assert result.folded
    assert len(result.shown_text) < 2000
    assert result.shown_text.startswith(fold(text)[0])
    lines = text.count("\n")  # every line ends with a line break
    assert result.fold_toggle.text() == f"Show all ({lines:,} lines)"

    qtbot.mouseClick(result.fold_toggle, Qt.MouseButton.LeftButton)
    assert not result.folded
    assert result.shown_text == text
    qtbot.mouseClick(result.fold_toggle, Qt.MouseButton.LeftButton)
    assert result.folded and len(result.shown_text) < 2000


def test_a_short_result_shows_whole_and_an_error_is_marked(view):
    _show(view, _agent_path("Error: no such zone"))
    result = _card(view, 4).tool_result
    assert result is not None
    assert result.shown_text == "Error: no such zone"
    assert result.fold_toggle.isHidden() and not result.folded
    assert not result.error_badge.isHidden()
    assert result.size_label.text() == "19 characters"  # no tokens counted yet


def test_a_result_card_offers_edit_and_not_regenerate(view, qtbot):
    _show(view, _agent_path())
    card = _card(view, 4)
    assert not hasattr(card, "regenerate_button")
    assert hasattr(card, "edit_button")
    with qtbot.waitSignal(view.edit_requested) as edit:
        qtbot.mouseClick(card.edit_button, Qt.MouseButton.LeftButton)
    assert edit.args == [4]
    view.set_actions_enabled(False)
    assert not card.edit_button.isEnabled()
    assert card.tool_result is not None and card.tool_result.isEnabled()


# --- cards reused and made later -------------------------------------------------


def test_a_card_shown_again_shows_the_calls_state_now(view):
    path = _agent_path()[:3]
    other = [*path[:2], _node(5, 2, Role.ASSISTANT, "It is noon.")]
    _show(view, path)
    view.set_waiting_calls({3: ["call_1"]})
    card = _card(view, 3)
    assert card.tool_calls is not None
    assert card.tool_calls.frames[0].action_row is not None

    _show(view, other)  # the calling reply's card is put away
    assert _card(view, 5).tool_calls is None  # no stale panel on the sibling
    view.set_waiting_calls({})  # answered meanwhile (say, from another window)
    _show(view, path)
    again = _card(view, 3)
    assert again is card  # kept, not made again
    frame = again.tool_calls.frames[0]  # type: ignore[union-attr]
    assert frame.action_row is not None and frame.action_row.isHidden()

    view.set_waiting_calls({3: ["call_1"]})
    view.set_tool_actions_enabled(False)
    _show(view, other)
    _show(view, path)
    assert not frame.action_row.isHidden() and not frame.run_button.isEnabled()


def test_a_call_far_up_a_long_path_waits_once_its_card_is_made(view, qtbot):
    path = _agent_path()[:3]
    for n in range(200):
        node_id = 10 + n
        role = Role.USER if n % 2 == 0 else Role.ASSISTANT
        path.append(_node(node_id, path[-1].id, role, f"Message {n}. " * 20))
    view.show()
    qtbot.waitExposed(view)
    _show(view, path)
    assert view.card_for(3) is None  # out of reach of the view at the end
    view.set_waiting_calls({3: ["call_1"]})
    card = view.show_message(3)
    assert card is not None and card.tool_calls is not None
    frame = card.tool_calls.frames[0]
    assert frame.action_row is not None and not frame.action_row.isHidden()
    with qtbot.waitSignal(view.run_call_requested) as run:
        qtbot.mouseClick(frame.run_button, Qt.MouseButton.LeftButton)
    assert run.args == [3, "call_1"]
