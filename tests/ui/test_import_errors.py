"""File → Import conversation… through the real window: a file that is not an
Arbor export gets one plain-worded error naming it, and nothing is imported;
an export comes in as a copy whose title says so."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtWidgets import QApplication, QMessageBox

from app.qt.views.chrome import exchange_actions
from storage import conversation_rows
from tests.ui.conftest import WAIT_MS, wait_idle

# Words of Python's json module that must not reach the user.
PYTHON_WORDS = ("Expecting", "char ", "Extra data", "Unterminated", "delimiter")

# name -> (content, words the message must hold besides the name)
BAD_FILES: dict[str, tuple[bytes, tuple[str, ...]]] = {
    "notes.txt": (
        b"Shopping: eggs, milk.\n",
        ("is not a conversation exported by Arbor", "it is not JSON"),
    ),
    "chat-from-elsewhere.json": (
        json.dumps({"format": "someone-else", "messages": []}).encode(),
        ("is not a conversation exported by Arbor", "not in Arbor's format"),
    ),
    "a-list.json": (b"[1, 2, 3]", ("not in Arbor's format",)),
    "from-a-newer-arbor.json": (
        json.dumps(
            {
                "format": "arbor-conversation",
                "version": 7,
                "nodes": [{"id": 1, "parent": None, "role": "root", "text": ""}],
            }
        ).encode(),
        ("newer Arbor", "Update Arbor"),
    ),
    "empty.json": (b"", ("it is empty",)),
    "model.gguf": (b"GGUF\x03\x00\x00\x00" + bytes(range(256)), ("not a text file",)),
}


def _error_boxes() -> list[QMessageBox]:
    return [
        w
        for w in QApplication.topLevelWidgets()
        if isinstance(w, QMessageBox)
        and w.objectName() == "ErrorMessage"
        and w.isVisible()
    ]


def _import(monkeypatch, window, path: Path) -> None:
    monkeypatch.setattr(exchange_actions, "ask_import_path", lambda _parent: path)
    window.import_action.trigger()


def test_a_file_that_is_not_an_export_is_named_and_explained(
    qtbot, make_window, tmp_path: Path, monkeypatch
):
    window = make_window()
    conversations = len(conversation_rows.list_conversations(window.db))
    shown = window.conversation_id
    for name, (content, words) in BAD_FILES.items():
        path = tmp_path / name
        path.write_bytes(content)
        _import(monkeypatch, window, path)
        wait_idle(qtbot, window)  # were it handed to the worker, it would be done
        boxes = _error_boxes()
        assert len(boxes) == 1, name
        box = boxes[0]
        message = f"{box.text()}\n{box.informativeText()}"
        assert not any(word in message for word in PYTHON_WORDS), message
        assert name in message, message
        for word in words:
            assert word in message, (name, message)
        assert box.text() == "Could not import the conversation"
        box.close()
        qtbot.waitUntil(lambda: not _error_boxes())
        # Nothing imported: no conversation, and the one shown is still shown.
        assert len(conversation_rows.list_conversations(window.db)) == conversations
        assert window.conversation_id == shown


def test_an_imported_copy_says_it_is_one(
    qtbot, make_window, tmp_path: Path, monkeypatch
):
    window = make_window()
    original = window.conversation_id
    conversation_rows.rename_conversation(window.db, original, "Oak trees")
    exported = tmp_path / "oak.json"
    monkeypatch.setattr(
        exchange_actions, "ask_export_path", lambda _p, _s: (exported, "json")
    )
    window.export_action.trigger()

    _import(monkeypatch, window, exported)
    qtbot.waitUntil(lambda: window.conversation_id != original, timeout=WAIT_MS)
    copy = window.conversation_id
    wait_idle(qtbot, window)
    assert (
        conversation_rows.get_conversation(window.db, copy).title
        == "Oak trees (imported)"
    )
    assert window.windowTitle() == "Oak trees (imported) — Arbor"
    # The copy's own export comes back under the same title, not "(imported)" twice.
    again = tmp_path / "oak-copy.json"
    monkeypatch.setattr(
        exchange_actions, "ask_export_path", lambda _p, _s: (again, "json")
    )
    window.export_action.trigger()
    _import(monkeypatch, window, again)
    qtbot.waitUntil(lambda: window.conversation_id != copy, timeout=WAIT_MS)
    wait_idle(qtbot, window)
    assert window.windowTitle() == "Oak trees (imported) — Arbor"
