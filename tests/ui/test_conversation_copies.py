"""Copies of a conversation in the list (issue 41): an imported copy and a
second import of the same file keep their marks, "(imported)" and "(2)", in
sight when the list is too narrow for their titles."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QRect
from PySide6.QtGui import QPainter, QPixmap
from PySide6.QtWidgets import QStyleOptionViewItem

from app.qt.models.conversation_list import CopyNumberRole
from app.qt.views.chrome import exchange_actions
from tests.ui.conftest import WAIT_MS, send, wait_idle

QUESTION = "Planning the vegetable garden for next spring with raised beds"


def _drawn_titles(window, width: int) -> list[str]:
    """The titles the list's delegate draws in rows ``width`` pixels wide,
    top to bottom (the first text it draws in each row)."""
    view = window.sidebar.list_view
    delegate = view.itemDelegate()
    model = view.model()
    titles: list[str] = []
    drawn: list[str] = []
    original = QPainter.drawText

    def record(painter: QPainter, *args: object) -> None:
        drawn.extend(a for a in args if isinstance(a, str))
        original(painter, *args)

    QPainter.drawText = record  # type: ignore[method-assign]
    try:
        for row in range(model.rowCount()):
            index = model.index(row, 0)
            option = QStyleOptionViewItem()
            option.font = view.font()
            option.fontMetrics = view.fontMetrics()
            option.palette = view.palette()
            option.widget = view
            height = delegate.sizeHint(option, index).height()
            option.rect = QRect(0, 0, width, height)
            pixmap = QPixmap(width, height)
            painter = QPainter(pixmap)
            drawn.clear()
            delegate.paint(painter, option, index)
            painter.end()
            titles.append(drawn[0])
    finally:
        QPainter.drawText = original  # type: ignore[method-assign]
    return titles


def test_imported_copies_stay_apart_when_their_titles_are_cut(
    qtbot, make_window, tmp_path: Path, monkeypatch
):
    window = make_window()
    send(qtbot, window, QUESTION)
    exported = tmp_path / "garden.json"
    monkeypatch.setattr(
        exchange_actions,
        "ask_export_path",
        lambda _parent, _suggested: (exported, "json"),
    )
    window.export_action.trigger()
    monkeypatch.setattr(exchange_actions, "ask_import_path", lambda _parent: exported)
    for count in (2, 3):
        shown = window.conversation_id
        window.import_action.trigger()
        qtbot.waitUntil(lambda s=shown: window.conversation_id != s, timeout=WAIT_MS)
        qtbot.waitUntil(
            lambda c=count: window.list_model.rowCount() == c, timeout=WAIT_MS
        )
        wait_idle(qtbot, window)

    model = window.list_model
    rows = {
        model.record(row).id: model.index(row, 0) for row in range(model.rowCount())
    }
    original, first, second = sorted(rows)
    title = model.record(model.row_of(first)).title
    assert title.endswith(" (imported)")
    assert model.record(model.row_of(second)).title == title  # the same title
    assert rows[original].data(CopyNumberRole) is None
    assert rows[first].data(CopyNumberRole) is None  # the first of its title
    assert rows[second].data(CopyNumberRole) == 2

    wide = _drawn_titles(window, 1000)
    narrow = _drawn_titles(window, 190)
    order = [model.record(row).id for row in range(model.rowCount())]
    by_id = dict(zip(order, narrow, strict=True))
    assert dict(zip(order, wide, strict=True))[second] == f"{title} (2)"
    # Cut in the title's words, the marks kept: three rows, three texts.
    assert by_id[first].endswith("… (imported)"), by_id[first]
    assert by_id[second].endswith("… (imported) (2)"), by_id[second]
    assert by_id[original].endswith("…") and "(imported)" not in by_id[original]
    assert len(set(narrow)) == 3
