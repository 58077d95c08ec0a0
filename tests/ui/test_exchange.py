"""File → Export and File → Import through the real window (file dialogs answered)."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from app.qt.models.conversation_tree import SAVED_MARK
from app.qt.views.chrome import exchange_actions
from storage import checkpoint_rows, conversation_rows, node_rows, tree_reads
from tests.ui.conftest import WAIT_MS, send, wait_idle


def _answer_export(monkeypatch, path: Path, fmt: str) -> None:
    monkeypatch.setattr(
        exchange_actions, "ask_export_path", lambda _parent, _suggested: (path, fmt)
    )


def _answer_import(monkeypatch, path: Path | None) -> None:
    monkeypatch.setattr(exchange_actions, "ask_import_path", lambda _parent: path)


def _tree(db, conversation_id: int) -> list[tuple[str, str, int | None]]:
    """(role, text, parent's index) of every node: the structure and the text."""
    nodes = tree_reads.tree(db, conversation_id)
    index = {node.id: i for i, node in enumerate(nodes)}
    return [
        (n.role, n.text, None if n.parent_id is None else index[n.parent_id])
        for n in nodes
    ]


def test_export_then_import_gives_an_equal_conversation(
    qtbot, make_window, tmp_path: Path, monkeypatch
):
    window = make_window()
    send(qtbot, window, "first question")
    send(qtbot, window, "second question")
    original = window.conversation_id

    markdown = tmp_path / "chat.md"
    _answer_export(monkeypatch, markdown, "markdown")
    window.export_action.trigger()
    text = markdown.read_text(encoding="utf-8")
    assert text.startswith("# first question\n")
    assert "## You\n\nfirst question" in text and "## Assistant" in text
    assert text.index("first question\n\n## Assistant") < text.index("second")

    exported = tmp_path / "chat.json"
    _answer_export(monkeypatch, exported, "json")
    window.export_action.trigger()
    assert json.loads(exported.read_text(encoding="utf-8"))["format"] == (
        "arbor-conversation"
    )

    _answer_import(monkeypatch, exported)
    window.import_action.trigger()
    # The worker imports it; then it is shown.
    qtbot.waitUntil(lambda: window.conversation_id != original, timeout=WAIT_MS)
    imported = window.conversation_id
    assert imported != original
    assert _tree(window.db, imported) == _tree(window.db, original)
    # In the sidebar, selected, its transcript on screen.
    assert window.sidebar.current_conversation() == imported
    assert window.list_model.rowCount() == 2
    assert window.transcript.cards[0].text == "first question"
    # Visiting it renders and checkpoints its path; then it goes on.
    wait_idle(qtbot, window)
    path = node_rows.get_path(window.db, window.active_id)
    assert all(node.tokens for node in path)
    sizes = {n.id: n.checkpoint_bytes for n in tree_reads.tree(window.db, imported)}
    assert all(sizes[n.id] > 0 for n in path[1:])
    # Its start is the original's span: it restores from that start's
    # checkpoint, and stores none of its own.
    assert sizes[path[0].id] == 0
    profile = window.presenter.model.profile_id
    twin = checkpoint_rows.twin_root(window.db, path[0].id, profile)
    assert twin is not None
    # The tree says so: saved (✓), shared, the twin's size.
    start = {n.id: n for n in tree_reads.tree(window.db, imported)}[path[0].id]
    own = {n.id: n for n in tree_reads.tree(window.db, original)}[twin]
    assert start.shared_checkpoint_bytes == own.checkpoint_bytes > 0
    model = window.tree_model
    saved = model.index_of(path[0].id, 2)
    assert model.data(saved) == SAVED_MARK
    assert "shared" in model.data(saved, Qt.ItemDataRole.ToolTipRole)
    send(qtbot, window, "third question")
    assert window.transcript.cards[-2].text == "third question"


def test_a_bad_file_shows_one_error_and_imports_nothing(
    qtbot, make_window, tmp_path: Path, monkeypatch
):
    window = make_window()
    before = window.list_model.rowCount()
    shown = window.conversation_id
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"format": "someone-else", "messages": []}))
    _answer_import(monkeypatch, bad)
    window.import_action.trigger()
    wait_idle(qtbot, window)  # refused as it is read; the worker is never asked
    boxes = [
        w
        for w in QApplication.topLevelWidgets()
        if isinstance(w, QMessageBox) and w.isVisible()
    ]
    assert len(boxes) == 1
    assert boxes[0].text() == "Could not import the conversation"
    assert "other.json is not a conversation exported by Arbor" in (
        boxes[0].informativeText()
    )
    boxes[0].close()
    assert window.list_model.rowCount() == before
    assert window.conversation_id == shown
    assert len(conversation_rows.list_conversations(window.db)) == before

    _answer_import(monkeypatch, None)  # cancelled: nothing happens
    window.import_action.trigger()
    assert window.conversation_id == shown
