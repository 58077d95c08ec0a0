"""Files in a message, through the real window and engine: dropped on the
composer, counted in tokens, sent with the message (the model reads them),
shown as chips, refused with their size when they do not fit."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QMessageBox

from app.qt.views.transcript.attachment_chips import AttachmentViewer
from storage import node_rows
from tests.text.test_attachments import write_pdf
from tests.ui.conftest import WAIT_MS, wait_idle


def _drop(window, paths: list[Path]) -> None:
    """Drag ``paths`` onto the composer's editor and drop them, as from a file
    manager (a drag enters first: Qt delivers a drop only after it)."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    viewport = window.composer.edit.viewport()
    action, button = Qt.DropAction.CopyAction, Qt.MouseButton.LeftButton
    modifiers = Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPoint(10, 10), action, mime, button, modifiers)
    QApplication.sendEvent(viewport, enter)
    assert enter.isAccepted()
    drop = QDropEvent(QPointF(10, 10), action, mime, button, modifiers)
    QApplication.sendEvent(viewport, drop)


def _errors() -> list[QMessageBox]:
    return [
        w
        for w in QApplication.topLevelWidgets()
        if isinstance(w, QMessageBox) and w.isVisible()
    ]


def test_a_dropped_file_goes_with_the_message(qtbot, make_window, tmp_path: Path):
    window = make_window()
    notes = tmp_path / "notes.txt"
    notes.write_text("The oak is a tree.\nThe pine is another.\n", encoding="utf-8")
    report = write_pdf(tmp_path / "report.pdf", ["Quarterly figures rose"])
    _drop(window, [notes, report])
    chips = window.composer.attachments
    assert [f.name for f in chips.files] == ["notes.txt", "report.pdf"]
    # Its length, then what it takes once the engine has counted it.
    assert chips.chip_text("notes.txt") == (
        "notes.txt · 39 characters · counting tokens…"
    )
    qtbot.waitUntil(
        lambda: "counting" not in chips.chip_text("report.pdf"), timeout=WAIT_MS
    )
    assert re.fullmatch(
        r"notes\.txt · 39 characters · \d+ tokens", chips.chip_text("notes.txt")
    )
    wait_idle(qtbot, window)
    assert window.composer.edit.toPlainText() == ""  # not pasted as paths

    qtbot.keyClicks(window.composer.edit, "What do these say?")
    window.send_action.trigger()
    wait_idle(qtbot, window)
    assert chips.files == [] and window.composer.text == ""

    question = node_rows.get_node(window.db, window.active_id).parent_id
    stored = node_rows.get_node(window.db, question)
    # The model read the files: they are in the message's text and tokens.
    assert stored.text.startswith("What do these say?\n\nFile: notes.txt")
    assert "The pine is another." in stored.text
    assert "Quarterly figures rose" in stored.text
    assert len(stored.tokens) > 30
    # The transcript shows the words, and a chip per file.
    card = window.transcript.cards[-2]
    assert card.body.toPlainText().strip() == "What do these say?"
    assert card.attachments is not None
    assert [f.name for f in card.attachments.files] == ["notes.txt", "report.pdf"]
    assert card.attachments.isVisibleTo(card)
    # The same measure as in the composer (a message's tokens are not per file).
    assert card.attachments.chip_text("notes.txt") == "notes.txt · 39 characters"
    # The conversation is named after the words, not the files.
    assert window.windowTitle().startswith("What do these say?")

    # Editing the message brings its files back as chips.
    window.edit_message(question)
    assert window.composer.text == "What do these say?"
    assert [f.name for f in chips.files] == ["notes.txt", "report.pdf"]


def test_a_file_that_does_not_fit_is_refused_with_its_size(
    qtbot, make_window, tmp_path: Path, monkeypatch
):
    window = make_window()
    window.apply_preferences(
        replace(window.prefs, backend=replace(window.prefs.backend, n_ctx=256))
    )
    wait_idle(qtbot, window)
    shown: list[tuple[str, str]] = []
    monkeypatch.setattr(
        "app.qt.views.chrome.main_window.show_error",
        lambda _parent, title, text: shown.append((title, text)),
    )
    big = tmp_path / "big.txt"
    big.write_text("word " * 2000, encoding="utf-8")
    _drop(window, [big])
    qtbot.waitUntil(lambda: bool(shown), timeout=WAIT_MS)
    wait_idle(qtbot, window)
    ((title, text),) = shown
    assert title == "Could not attach the file"
    assert text.startswith("big.txt takes ") and " tokens, but the context" in text
    assert window.composer.attachments.files == []


def test_a_file_that_is_not_text_is_refused_at_once(
    qtbot, make_window, tmp_path: Path, monkeypatch
):
    window = make_window()
    shown: list[str] = []
    monkeypatch.setattr(
        "app.qt.views.chrome.main_window.show_error",
        lambda _parent, _title, text: shown.append(text),
    )
    blob = tmp_path / "photo.jpg"
    blob.write_bytes(b"\xff\xd8\xff\x00\x00binary")
    _drop(window, [blob])
    assert shown == [
        "photo.jpg is not a text file. Text and code files and PDFs can be attached."
    ]
    assert window.composer.attachments.files == []
    assert not _errors()


def _viewers() -> list[AttachmentViewer]:
    return [
        w
        for w in QApplication.topLevelWidgets()
        if isinstance(w, AttachmentViewer) and w.isVisible()
    ]


def test_clicking_a_chip_shows_the_file(qtbot, make_window, tmp_path: Path):
    window = make_window()
    notes = tmp_path / "notes.txt"
    text = "The oak is a tree.\nThe pine is another."
    notes.write_text(text + "\n", encoding="utf-8")
    _drop(window, [notes])
    chips = window.composer.attachments
    qtbot.waitUntil(
        lambda: "counting" not in chips.chip_text("notes.txt"), timeout=WAIT_MS
    )
    wait_idle(qtbot, window)
    # In the composer: the whole text, read-only, with what it takes.
    qtbot.mouseClick(chips.chip("notes.txt"), Qt.MouseButton.LeftButton)
    (viewer,) = _viewers()
    assert viewer.windowTitle() == "notes.txt"
    assert viewer.text.toPlainText() == text and viewer.text.isReadOnly()
    assert re.fullmatch(
        r"notes\.txt · 39 characters · \d+ tokens", viewer.figure.text()
    )
    viewer.close()
    qtbot.waitUntil(lambda: not _viewers())
    assert [f.name for f in chips.files] == ["notes.txt"]  # opening keeps it

    qtbot.keyClicks(window.composer.edit, "Read this.")
    window.send_action.trigger()
    wait_idle(qtbot, window)
    # On the sent message, by the mouse and by the keyboard.
    card = window.transcript.cards[-2]
    assert card.attachments is not None
    chip = card.attachments.chip("notes.txt")
    qtbot.mouseClick(chip, Qt.MouseButton.LeftButton)
    (viewer,) = _viewers()
    assert viewer.text.toPlainText() == text
    assert viewer.figure.text() == "notes.txt · 39 characters"
    viewer.close()
    qtbot.waitUntil(lambda: not _viewers())
    chip.setFocus()
    qtbot.keyClick(chip, Qt.Key.Key_Return)
    (viewer,) = _viewers()
    assert viewer.text.toPlainText() == text
    viewer.close()
