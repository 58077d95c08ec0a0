"""The Models dialog's Tools marks, on real widgets (offscreen) and the shipped
catalog: what each row says, what its tooltip explains, the recommended one,
and the loaded model's ``tool_format`` reaching the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QTableWidget

from app.library.catalog import CatalogEntry, shipped_catalog
from app.library.installed import ModelLibrary
from app.qt.views.dialogs.models import ModelsDialog
from app.qt.workers.library_worker import ModelServices


@pytest.fixture
def dialog(qtbot, tmp_path: Path, monkeypatch) -> Iterator[ModelsDialog]:
    """The dialog alone, on the shipped catalog, with 64 GB so no row is greyed."""
    monkeypatch.setattr("app.library.fit.machine_memory", lambda: 64 * 1000**3)
    monkeypatch.setattr(
        "app.qt.views.dialogs.models.machine_memory", lambda: 64 * 1000**3
    )
    library = ModelLibrary(tmp_path, None, shipped_catalog())
    # No endpoint is contacted: nothing here searches or downloads.
    services = ModelServices.create(library, None, "http://127.0.0.1:9")
    shown = ModelsDialog(services, 4096)
    qtbot.addWidget(shown)
    shown.show()
    yield shown
    shown.close()
    services.shut_down()


def _column(table: QTableWidget, header: str) -> int:
    headers = [table.horizontalHeaderItem(c).text() for c in range(table.columnCount())]
    return headers.index(header)


def _cells(table: QTableWidget, header: str) -> list[str]:
    column = _column(table, header)
    return [table.item(row, column).text() for row in range(table.rowCount())]


def _tips(table: QTableWidget, header: str) -> list[str]:
    column = _column(table, header)
    # Tooltips are wrapped for reading; the words are what is checked.
    tips = [table.item(row, column).toolTip() for row in range(table.rowCount())]
    return [" ".join(tip.split()) for tip in tips]


def _entry(entry_id: str) -> CatalogEntry:
    entry = shipped_catalog().find(entry_id)
    assert entry is not None
    return entry


def test_each_row_says_how_it_calls_tools(dialog: ModelsDialog):
    table = dialog.catalog_table
    entries = shipped_catalog().entries
    marks = _cells(table, "Tools")
    tips = _tips(table, "Tools")
    expected = {"native": "calls tools", "generic": "generic format", "unknown": ""}
    for entry, mark, tip in zip(entries, marks, tips, strict=True):
        if entry.recommended_for_tools:
            assert mark == "recommended", entry.id
            assert tip.startswith("Recommended for tools"), entry.id
        else:
            assert mark == expected[entry.tools], entry.id
        if entry.tools == "native":
            assert "writes tool calls" in tip and entry.tools_template in tip
        elif entry.tools == "generic":
            assert "no tool support" in tip and "generic JSON format" in tip
            assert "may follow poorly" in tip
        else:
            assert "not checked" in tip and "its own template decides" in tip
    # The extra column squeezes no model name to "…".
    metrics = table.fontMetrics()
    widest = max(metrics.horizontalAdvance(e.name) for e in entries)
    assert table.columnWidth(0) >= widest
    # The Reasoning column is where it was, the Tools column beside it.
    assert _cells(table, "Reasoning")[entries.index(_entry("qwen3-4b"))] == "reasons"


def test_the_recommended_one_says_so_when_chosen(dialog: ModelsDialog):
    table = dialog.catalog_table
    entries = list(shipped_catalog().entries)
    recommended = shipped_catalog().recommended_for_tools()
    assert recommended is not None
    row = entries.index(recommended)
    assert table.item(row, 0).text() == recommended.name
    assert table.item(row, _column(table, "Tools")).font().bold()
    table.selectRow(row)
    assert "Recommended for tools." in dialog.description_label.text()
    # Another row does not claim it, and a model that sees images says so.
    table.selectRow(entries.index(_entry("gemma-3-4b-it")))
    text = dialog.description_label.text()
    assert "Recommended for tools" not in text
    assert "can see images, which Arbor cannot show it yet" in text


def test_the_loaded_models_tool_format_reaches_the_window(qtbot, make_window):
    # The tiny model's ChatML template writes no tool calls: the generic format.
    window = make_window()
    assert window.model_info is not None
    assert window.model_info.tool_format == "generic"
