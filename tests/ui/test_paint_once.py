"""Opening a conversation paints the window once: the tree list's and the
transcript's scroll bars come or go, and the list's columns fit, before the
first paint, not after it (each late change painted the whole list again:
15 to 30 ms of GUI-thread time for a long path, every time one is opened)."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import QCoreApplication, QEvent, QObject
from PySide6.QtWidgets import QApplication

import app.qt.gui
from tools.window_timing import insert_path


class _Events(QObject):
    """Counts the events of some types that some objects receive."""

    def __init__(self, watched: dict[str, QObject]) -> None:
        super().__init__()
        self._names = {id(obj): name for name, obj in watched.items()}
        self.seen: list[str] = []

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        name = self._names.get(id(watched))
        if name is not None and event.type() in (
            QEvent.Type.Paint,
            QEvent.Type.Hide,
            QEvent.Type.Show,
        ):
            self.seen.append(f"{name} {event.type().name}")
        return False

    def count(self, what: str) -> int:
        return self.seen.count(what)


def _run_events(seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        QApplication.processEvents()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        time.sleep(0.01)


@pytest.fixture
def window_with_paths(make_window, monkeypatch):
    # No model: nothing loads, and a conversation stays readable.
    monkeypatch.setattr(app.qt.gui, "remembered_or_starter_model", lambda _path: None)
    db = make_window.open_db()
    short, long = insert_path(db, 12), insert_path(db, 300)
    db.close()
    window = make_window(model=None)
    window.resize(1280, 800)
    _run_events(0.3)
    return window, short, long


def test_opening_a_conversation_paints_the_tree_list_once(qtbot, window_with_paths):
    window, short, long = window_with_paths
    tree = window.tree_panel.view
    events = _Events({"list": tree.viewport(), "bar": tree.verticalScrollBar()})
    QApplication.instance().installEventFilter(events)
    try:
        for conversation, needs_bar in ((long, True), (short, False), (long, True)):
            events.seen.clear()
            window.show_conversation(conversation)
            # Laid out before the event loop runs: the bar as it will stay.
            assert tree.verticalScrollBar().isVisibleTo(tree) is needs_bar
            _run_events(0.4)
            assert events.count("list Paint") == 1, events.seen
    finally:
        QApplication.instance().removeEventFilter(events)


def test_a_longer_path_keeps_the_transcript_scroll_bar(qtbot, window_with_paths):
    window, short, long = window_with_paths
    transcript = window.transcript
    bar = transcript.verticalScrollBar()
    window.show_conversation(short)
    _run_events(0.3)
    assert bar.isVisible()  # the short path needs one too
    events = _Events({"bar": bar})
    QApplication.instance().installEventFilter(events)
    try:
        window.show_conversation(long)
        _run_events(0.3)
        window.show_conversation(short)
        _run_events(0.3)
    finally:
        QApplication.instance().removeEventFilter(events)
    # The old path's cards put away, the page did not shrink to nothing
    # (hiding the bar and resizing the view) before the new path's grew.
    assert events.count("bar Hide") == 0, events.seen
