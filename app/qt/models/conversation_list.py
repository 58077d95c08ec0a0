"""``ConversationListModel``: the sidebar's conversations, most recent first.

Titles need not be unique (an imported copy keeps its original's, marked
"(imported)" once, and a file imported twice gives two copies of one title),
so conversations listed with the same title are numbered by age: the oldest
as it is, the next "(2)", "(3)" (``CopyNumberRole``), which the delegate
keeps in sight when it elides the title.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)

from app.text.quantities import format_bytes
from storage import conversation_rows
from storage.conversation_listing import ConversationRecord
from storage.db import Database
from storage.values import Origin

ConversationIdRole = Qt.ItemDataRole.UserRole + 1
SubtitleRole = Qt.ItemDataRole.UserRole + 2
# What is happening in the conversation now (None: nothing).
ProgressRole = Qt.ItemDataRole.UserRole + 3
# The short mark of a conversation made elsewhere than in the window or the
# CLI, drawn beside its title (None: no mark).
BadgeRole = Qt.ItemDataRole.UserRole + 4
# Among listed conversations of the same title, this one's place by age
# (2 for the second made, ...); None for the oldest and for a unique title.
CopyNumberRole = Qt.ItemDataRole.UserRole + 5

# Each origin's mark and what it means, said in the row's tooltip.
BADGES: dict[Origin, tuple[str, str]] = {
    Origin.LOCAL_SERVER: ("API", "Made through the local server"),
}

Index = QModelIndex | QPersistentModelIndex


class ConversationListModel(QAbstractListModel):
    """Conversations from the database, filtered by text.

    Parameters
    ----------
    db
        The open database (read on ``refresh``; this model never writes).
    parent
        The Qt parent.
    """

    def __init__(self, db: Database, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._db = db
        self._records: list[ConversationRecord] = []
        self._copy_numbers: dict[int, int] = {}
        self._filter = ""
        # What is happening in a conversation now (a reply being written),
        # said in its row instead of its figures.
        self._progress: dict[int, str] = {}

    def refresh(self, text_filter: str | None = None) -> None:
        """Reload from the database, optionally with a new text filter."""
        if text_filter is not None:
            self._filter = text_filter.strip()
        records = conversation_rows.list_conversations(self._db, self._filter or None)
        self.beginResetModel()
        self._records = records
        self._copy_numbers = _copy_numbers(records)
        self.endResetModel()

    def row_of(self, conversation_id: int) -> int:
        """The row of a conversation, or -1 if it is not listed."""
        for row, record in enumerate(self._records):
            if record.id == conversation_id:
                return row
        return -1

    def record(self, row: int) -> ConversationRecord:
        """The conversation shown at ``row``."""
        return self._records[row]

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._records)

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._records):
            return None
        record = self._records[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return record.title
        if role == ConversationIdRole:
            return record.id
        if role == CopyNumberRole:
            return self._copy_numbers.get(record.id)
        badge = BADGES.get(record.origin) if record.origin is not None else None
        if role == BadgeRole:
            return badge[0] if badge is not None else None
        progress = self._progress.get(record.id)
        if progress is not None and role in (SubtitleRole, ProgressRole):
            return progress
        if role in (SubtitleRole, Qt.ItemDataRole.ToolTipRole):
            messages = max(0, record.node_count - 1)  # the root is not a message
            when = record.updated_at.astimezone().strftime("%b %d, %H:%M")
            size = format_bytes(record.checkpoint_bytes)
            figures = f"{messages} messages · {size} · {when}"
            if role == Qt.ItemDataRole.ToolTipRole and badge is not None:
                return f"{badge[1]}\n{_made_by(record)}{figures}"
            return figures
        return None

    def set_title(self, conversation_id: int, title: str) -> None:
        """Show a new title for a conversation (the worker stores it)."""
        row = self.row_of(conversation_id)
        if row < 0:
            return
        self._records[row] = replace(self._records[row], title=title)
        numbers = _copy_numbers(self._records)
        changed = [
            r
            for r, record in enumerate(self._records)
            if numbers.get(record.id) != self._copy_numbers.get(record.id)
        ]
        self._copy_numbers = numbers
        for changed_row in {row, *changed}:
            index = self.index(changed_row, 0)
            self.dataChanged.emit(index, index)

    def set_progress(self, conversation_id: int, text: str | None) -> None:
        """Say what is happening in a conversation (None: nothing any more)."""
        if text is None:
            self._progress.pop(conversation_id, None)
        else:
            self._progress[conversation_id] = text
        row = self.row_of(conversation_id)
        if row >= 0:
            index = self.index(row, 0)
            self.dataChanged.emit(index, index)

    def remove(self, conversation_id: int) -> None:
        """Stop listing a conversation (the worker is deleting it)."""
        row = self.row_of(conversation_id)
        if row < 0:
            return
        self.beginRemoveRows(QModelIndex(), row, row)
        del self._records[row]
        self.endRemoveRows()


def _copy_numbers(records: list[ConversationRecord]) -> dict[int, int]:
    """Each conversation's number among those of its title, by age (ids
    grow), for the titles that more than one has; the oldest has none."""
    by_title: dict[str, list[int]] = {}
    for record in records:
        by_title.setdefault(record.title.strip(), []).append(record.id)
    numbers: dict[int, int] = {}
    for ids in by_title.values():
        for number, conversation_id in enumerate(sorted(ids)[1:], start=2):
            numbers[conversation_id] = number
    return numbers


def _made_by(record: ConversationRecord) -> str:
    """The tooltip's line naming the program that made a conversation
    (its user agent or the name it gave), or nothing when it said none."""
    return f"By {record.client}\n" if record.client else ""
