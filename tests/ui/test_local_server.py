"""Tools → Local server through the real stack: the window's engine thread
answers an openai client on 127.0.0.1, the status bar says so, the request
log shows it, and the conversation appears in the list."""

from __future__ import annotations

import socket
import threading
from dataclasses import replace
from typing import Any

import openai
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QStyleOptionViewItem

from app import jobs
from app.preferences import LocalServerPrefs
from app.qt.models.conversation_list import BadgeRole, ConversationIdRole
from app.qt.views.chrome.main_window import MainWindow
from storage import conversation_rows, node_rows, setting_rows
from tests.ui.conftest import WAIT_MS, send, wait_idle


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _in_thread(call: Any) -> dict[str, Any]:
    """Run ``call`` off the GUI thread (which must stay free to route the
    server's jobs); the result lands in the returned dict."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except Exception as exc:  # reported by the test's assertions
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def _marks(window: MainWindow) -> dict[int, tuple[str | None, str]]:
    """Each listed conversation's mark, where the list's delegate puts it,
    and its tooltip."""
    view = window.sidebar.list_view
    model = view.model()
    marks: dict[int, tuple[str | None, str]] = {}
    for row in range(model.rowCount()):
        index = model.index(row, 0)
        option = QStyleOptionViewItem()
        option.initFrom(view)
        option.rect = view.visualRect(index)
        assert not option.rect.isEmpty()
        layout = view.itemDelegate().row_layout(option, index)
        if layout.badge is not None:
            # Whole inside its row, after the title, on the title's line.
            assert option.rect.contains(layout.badge)
            assert layout.title.right() < layout.badge.left()
            assert layout.badge.bottom() < layout.subtitle.top()
            assert layout.title.width() > layout.badge.width()
        marks[index.data(ConversationIdRole)] = (
            index.data(BadgeRole) if layout.badge is not None else None,
            index.data(Qt.ItemDataRole.ToolTipRole),
        )
    return marks


def test_the_window_serves_a_client_and_shows_it(qtbot, make_window):
    window = make_window()
    send(qtbot, window, "A message typed in the window.")
    typed = window.conversation_id
    window.local_server_action.trigger()
    dialog = window._local_server_dialog
    assert dialog is not None and dialog.isVisible()
    assert not dialog.copy_button.isEnabled()
    dialog.port_spin.setValue(_free_port())
    dialog.switch_button.click()
    url = dialog.url_edit.text()
    assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
    assert dialog.switch_button.text() == "Stop serving"

    busy_texts: list[str] = []
    window.engine.started.connect(
        lambda job: (
            # The text set, not as painted: the label's width follows at the
            # next layout pass, which a loaded machine may not have run yet.
            busy_texts.append(window.status.busy_label.text())
            if isinstance(job, jobs.ServeRequest)
            else None
        )
    )
    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    messages = [{"role": "user", "content": "Hello from a client."}]
    first = _in_thread(
        lambda: client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=8, temperature=0
        )
    )
    qtbot.waitUntil(lambda: not first["thread"].is_alive(), timeout=WAIT_MS)
    assert "error" not in first, first.get("error")
    reply = first["value"]
    wait_idle(qtbot, window)
    # Read as each job starts, before or after the window's own handler: one
    # of the server's jobs (the reply, then its checkpoints) shows it.
    assert any(text.startswith("Serving a request") for text in busy_texts)

    conversation = reply.model_extra["arbor"]["conversation"]
    titles = {c.id: c.title for c in conversation_rows.list_conversations(window.db)}
    assert titles[conversation] == "Hello from a client."
    # The list marks the client's conversation, not the one typed here.
    marks = _marks(window)
    assert set(marks) == {conversation, typed}
    assert marks[conversation][0] == "API"
    assert marks[conversation][1].startswith("Made through the local server\n")
    assert marks[typed][0] is None and "local server" not in marks[typed][1]
    # The log line crosses from the server's thread as a queued signal: it may
    # still be waiting in the event queue when the client has its answer.
    qtbot.waitUntil(
        lambda: any(
            " 200 " in line for line in dialog.log_view.toPlainText().splitlines()
        ),
        timeout=WAIT_MS,
    )

    # The same client goes on: restored from the tree, nothing reprocessed,
    # though the window's own conversation was in the context between.
    again = _in_thread(
        lambda: client.chat.completions.create(
            model="tiny",
            messages=[
                *messages,
                {"role": "assistant", "content": reply.choices[0].message.content},
                {"role": "user", "content": "And again."},
            ],
            max_tokens=8,
        )
    )
    qtbot.waitUntil(lambda: not again["thread"].is_alive(), timeout=WAIT_MS)
    assert "error" not in again, again.get("error")
    stats = again["value"].model_extra["arbor"]["stats"]
    assert stats["reprocessed_tokens"] == 0
    assert again["value"].usage.prompt_tokens_details.cached_tokens > 0

    # The dialog closed, the server runs on and the window still works; the
    # dialog opened again shows it serving, and its switch stops it.
    wait_idle(qtbot, window)
    dialog.close()
    qtbot.keyClicks(window.composer.edit, "Still here.")
    window.composer.send_button.click()
    assert window.generating or window.engine.busy
    wait_idle(qtbot, window)
    path = node_rows.get_path(window.db, window.active_id)
    assert [n.text for n in path if n.role == "user"][-1] == "Still here."
    assert window.local_server is not None and window.local_server.url == url
    window.local_server_action.trigger()
    assert window._local_server_dialog is dialog and dialog.url_edit.text() == url
    dialog.switch_button.click()
    assert (
        dialog.url_edit.text() == "" and dialog.switch_button.text() == "Start serving"
    )
    refused = _in_thread(lambda: client.models.list())
    refused["thread"].join(30)
    client.close()
    assert isinstance(refused.get("error"), openai.APIConnectionError)


def test_the_address_is_remembered_and_the_server_starts_with_the_window(
    qtbot, make_window
):
    port = _free_port()
    window = make_window()
    window.local_server_action.trigger()
    dialog = window._local_server_dialog
    assert dialog is not None
    dialog.port_spin.setValue(port)
    dialog.key_edit.setText("a secret")
    dialog.switch_button.click()
    assert dialog.url_edit.text() == f"http://127.0.0.1:{port}/v1"
    dialog.at_start_check.click()  # checked
    dialog.switch_button.click()  # stopped
    wait_idle(qtbot, window)  # the preferences are written by the engine thread
    window.close()

    # Arbor started again: serving at once on the remembered port (what
    # ``run_gui`` calls once the window shows), the key not kept.
    again = make_window()
    again.start_local_server_if_asked()
    assert again.local_server is not None
    assert again.local_server.url == f"http://127.0.0.1:{port}/v1"
    assert "Local server at" in again.statusBar().currentMessage()
    again.local_server_action.trigger()
    reopened = again._local_server_dialog
    assert reopened is not None
    assert reopened.port_spin.value() == port and reopened.at_start_check.isChecked()
    assert reopened.key_edit.text() == ""
    stored = setting_rows.get_setting(again.db, "local_server")
    assert "a secret" not in str(stored)
    # The client's connection closed before the server stops: neither side
    # leaves a socket for the garbage collector.
    url = again.local_server.url
    with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as client:
        listed = _in_thread(lambda: client.models.list())
        qtbot.waitUntil(lambda: not listed["thread"].is_alive(), timeout=WAIT_MS)
    again.local_server.stop()
    assert "error" not in listed, listed.get("error")
    assert [m.id for m in listed["value"].data]


def test_a_taken_port_at_start_is_a_status_message(qtbot, make_window):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        window = make_window()
        window.presenter.save_preferences(
            replace(
                window.prefs, local_server=LocalServerPrefs(port=port, at_start=True)
            )
        )
        window.start_local_server_if_asked()
        assert window.local_server is not None and window.local_server.url is None
        assert (
            window.statusBar().currentMessage().startswith("Local server not started:")
        )
