"""Tools in the real window, used as a person would: the tiny model on Qwen
2.5's real template, a real MCP server over stdio whose tool asks first,
the composer's Tools menu, the call's card and its buttons, the result's
card and its Edit; each step's cards shown, not only stored."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.mcp.config import ServerConfig, save_servers
from storage import node_rows
from storage.values import Role
from tests.helpers.mcp_servers import stdio_command, write_server
from tests.ui.conftest import send, wait_idle


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_server(tmp_path_factory.mktemp("mcp"))


def _window(make_window, qwen_model: Path, script: Path):  # type: ignore[no-untyped-def]
    """The window on the tool-capable tiny model with the weather server
    saved (as Settings → Tools saves it) and replies long enough for a call."""
    db = make_window.open_db()
    save_servers(db, [ServerConfig("test", tuple(stdio_command(script, "weather")))])
    db.close()
    window = make_window(qwen_model)
    window.prefs = replace(
        window.prefs, sampling=replace(window.prefs.sampling, max_tokens=160)
    )
    return window


def _shown(window) -> list[str]:  # type: ignore[no-untyped-def]
    """The roles of the cards the transcript shows, in order, each laid out
    with a height (a card made but never shown does not count)."""
    return [c.role for c in window.transcript.cards if c.isVisible() and c.height() > 0]


def test_a_call_asks_runs_and_its_result_is_edited(
    qtbot, make_window, qwen_model, script
):
    window = _window(make_window, qwen_model, script)
    composer = window.composer
    assert composer.tools_button.isEnabled()
    # The menu's third choice: the reply must call a tool.
    composer._tool_actions["required"].trigger()
    assert window.presenter.tool_choice == "required"

    send(qtbot, window, "What is the weather?")
    reply = window.transcript.cards[-1]
    assert reply.role == Role.ASSISTANT and reply.tool_calls is not None
    frame = reply.tool_calls.frames[0]
    assert frame.run_button.isVisible() and frame.run_button.isEnabled()
    arguments = json.loads(frame.arguments_view.toPlainText())
    assert "waits" in window.status.currentMessage() or "asks" in (
        window.status.currentMessage()
    )

    qtbot.mouseClick(frame.run_button, Qt.MouseButton.LeftButton)
    assert window.generating
    # The keyboard is back in the message box, not on the window's first button.
    assert window.focusWidget() is composer.edit
    wait_idle(qtbot, window)
    assert _shown(window)[-3:] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    result_card = window.transcript.cards[-2]
    assert result_card.tool_result.shown_text == f"Sunny in {arguments['city']}"
    # The call no longer waits: its buttons are gone.
    call_frame = window.transcript.cards[-3].tool_calls.frames[0]
    assert not call_frame.run_button.isVisible()
    assert window.status.currentMessage() == ""

    # The list tells the start that offers the tool from the one before.
    tree = window.tree_model
    starts = [tree.index(row, 0).data() for row in range(tree.rowCount())]
    assert starts == ["Start", "Start · 1 tool"]

    # Edit the result: a sibling the model goes on from.
    old_result = result_card.node_id
    window.activateWindow()  # Ctrl+Enter is the window's shortcut
    qtbot.waitUntil(window.isActiveWindow)
    qtbot.mouseClick(result_card.edit_button, Qt.MouseButton.LeftButton)
    assert "tool's result" in composer.banner_label.text()
    assert composer.editing_node == old_result, composer.editing_node
    composer.edit.selectAll()
    send(qtbot, window, "Snow, minus 12 C")
    assert _shown(window)[-3:] == [Role.ASSISTANT, Role.TOOL, Role.ASSISTANT]
    edited = window.transcript.cards[-2]
    assert edited.node_id != old_result
    assert edited.tool_result.shown_text == "Snow, minus 12 C"
    assert node_rows.get_node(window.db, old_result).text.startswith("Sunny in")
