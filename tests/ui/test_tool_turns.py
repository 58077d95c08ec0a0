"""A conversation with tool calls in the real window: the reply that called
shows its calls, each result is a card of its own, the tree lists them, and
the conversation goes on from the last reply (the tiny model's ChatML
template has no tool support: its spans are the generic format's)."""

from __future__ import annotations

from storage import exchange, node_rows, tool_use
from storage.values import Role
from tests.ui.conftest import send, wait_idle

CALL = {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}


def _agent_conversation(db) -> int:  # type: ignore[no-untyped-def]
    """An agent's run as an API client leaves it: a question, a reply that
    called a tool, its result, and the answer."""
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    nodes = [
        {
            "id": 1,
            "parent": None,
            "role": "root",
            "text": "",
            "tool_use": tool_use.offering(tools),
        },
        {"id": 2, "parent": 1, "role": "user", "text": "Weather in Oslo?"},
        {
            "id": 3,
            "parent": 2,
            "role": "assistant",
            "text": "Let me look.",
            "tool_use": tool_use.calling([CALL]),
        },
        {
            "id": 4,
            "parent": 3,
            "role": "tool",
            "text": "Oslo: snow, -3 °C",
            "tool_use": tool_use.answering("call_1", "get_weather"),
        },
        {"id": 5, "parent": 4, "role": "assistant", "text": "It snows in Oslo."},
    ]
    imported = exchange.import_json(
        db,
        {
            "format": exchange.FORMAT,
            "version": exchange.VERSION,
            "title": "Agent run",
            "active": 5,
            "nodes": nodes,
        },
    )
    return imported.conversation_id


def test_calls_and_results_show_and_the_conversation_goes_on(qtbot, make_window):
    window = make_window()
    conversation = _agent_conversation(window.db)
    window.presenter.select_conversation(conversation)
    wait_idle(qtbot, window)

    cards = window.transcript.cards
    assert [c.role for c in cards] == ["user", "assistant", "tool", "assistant"]
    assert "Let me look." in cards[1].text
    call = cards[1].tool_calls.frames[0]
    assert "get_weather" in call.title.text()
    assert '"city": "Oslo"' in call.arguments_view.toPlainText()
    assert "get_weather" in cards[2].tool_result.title.text()
    assert "snow" in cards[2].tool_result.shown_text
    # A result may be edited (a sibling the model goes on from), not
    # regenerated: it is what the tool said.
    assert hasattr(cards[2], "edit_button")
    assert not hasattr(cards[2], "regenerate_button")

    labels = [
        window.tree_model.index(row, 0, parent).data()
        for parent, row in _rows(window.tree_model)
    ]
    assert any(label.startswith("Tool: Result of") for label in labels)

    send(qtbot, window, "And tomorrow?")
    path = node_rows.get_path(window.db, window.active_id)
    assert [n.role for n in path] == [
        Role.ROOT,
        Role.USER,
        Role.ASSISTANT,
        Role.TOOL,
        Role.ASSISTANT,
        Role.USER,
        Role.ASSISTANT,
    ]
    # Every node on the way was rendered and decoded for the model.
    assert all(n.tokens for n in path)
    assert path[2].tool_use == tool_use.calling([CALL])


def _rows(model):  # type: ignore[no-untyped-def]
    """(parent index, row) of every row of the tree model, depth first."""
    from PySide6.QtCore import QModelIndex

    pending = [QModelIndex()]
    while pending:
        parent = pending.pop()
        for row in range(model.rowCount(parent)):
            yield parent, row
            pending.append(model.index(row, 0, parent))
