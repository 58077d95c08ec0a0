"""``SearchResultsModel``: the hits of a search over every conversation."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)

from storage.text_search import MATCH_END, MATCH_START, SearchHit
from storage.values import Role

NodeIdRole = Qt.ItemDataRole.UserRole + 1
ConversationIdRole = Qt.ItemDataRole.UserRole + 2
# Rich text for the delegate: title and role, then the snippet, matches bold.
HtmlRole = Qt.ItemDataRole.UserRole + 3

Index = QModelIndex | QPersistentModelIndex

ROLE_NAMES: dict[str, str] = {
    Role.ROOT: "System prompt",
    Role.USER: "You",
    Role.ASSISTANT: "Assistant",
}


def snippet_html(snippet: str) -> str:
    """A snippet as HTML: its text escaped, each match in bold."""
    escaped = html.escape(" ".join(snippet.split()))
    return escaped.replace(MATCH_START, "<b>").replace(MATCH_END, "</b>")


def snippet_plain(snippet: str) -> str:
    """A snippet as plain text, the match markers removed."""
    return " ".join(snippet.replace(MATCH_START, "").replace(MATCH_END, "").split())


class SearchResultsModel(QAbstractListModel):
    """A list of ``SearchHit`` values; ``set_hits`` replaces them all.

    A new search gives an unrelated list, so the model is reset rather than
    told row by row.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._hits: list[SearchHit] = []

    def set_hits(self, hits: list[SearchHit]) -> None:
        """Show ``hits`` instead of the current ones."""
        self.beginResetModel()
        self._hits = list(hits)
        self.endResetModel()

    def hit(self, row: int) -> SearchHit:
        """The hit shown at ``row``."""
        return self._hits[row]

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._hits)

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._hits):
            return None
        hit = self._hits[index.row()]
        who = ROLE_NAMES.get(hit.role, hit.role)
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.AccessibleTextRole):
            return f"{hit.conversation_title} · {who}: {snippet_plain(hit.snippet)}"
        if role == Qt.ItemDataRole.ToolTipRole:
            when = hit.created_at.strftime("%b %d %Y, %H:%M")
            return f"{hit.conversation_title} — {who}, {when} UTC"
        if role == HtmlRole:
            title = html.escape(hit.conversation_title)
            return (
                f"<b>{title}</b> · <i>{html.escape(who)}</i><br>"
                f"{snippet_html(hit.snippet)}"
            )
        if role == NodeIdRole:
            return hit.node_id
        if role == ConversationIdRole:
            return hit.conversation_id
        return None
