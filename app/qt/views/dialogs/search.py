"""``SearchDialog``: find a message in any conversation and jump to it.

Results follow the typing (after a short pause). The search runs on the GUI
thread: it is one full-text index query, 5-25 ms over 5,000 messages and
about 50 at worst (nearly every message matching), measured on a busy
2-core machine; a worker thread would add latency and a second connection
for no visible gain. Enter, or a double-click, emits
``hit_chosen``; the window then shows that conversation at that message.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QRectF,
    QSize,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QKeyEvent,
    QPainter,
    QPalette,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QLabel,
    QLineEdit,
    QListView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.qt.models.search_results import (
    ConversationIdRole,
    HtmlRole,
    NodeIdRole,
    SearchResultsModel,
)
from storage import text_search
from storage.db import Database
from storage.errors import StorageUnavailable

# The pause after the last key before searching: typing a word runs one
# search, not one per letter.
DEBOUNCE_MS = 150
_PADDING = 6

Index = QModelIndex | QPersistentModelIndex


class HitDelegate(QStyledItemDelegate):
    """Paints a hit's rich text (``HtmlRole``): title, role, snippet in bold."""

    def _document(self, option: QStyleOptionViewItem, index: Index) -> QTextDocument:
        document = QTextDocument()
        document.setDefaultFont(option.font)
        document.setDocumentMargin(_PADDING)
        document.setHtml(index.data(HtmlRole) or "")
        document.setTextWidth(max(option.rect.width(), 200))
        return document

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: Index
    ) -> None:
        self.initStyleOption(option, index)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        style = option.widget.style() if option.widget else None
        # The item's background and focus, without its text: the document
        # draws that.
        option.text = ""
        if style is not None:
            style.drawControl(
                QStyle.ControlElement.CE_ItemViewItem, option, painter, option.widget
            )
        document = self._document(option, index)
        context = QAbstractTextDocumentLayout.PaintContext()
        context.palette.setColor(
            QPalette.ColorRole.Text,
            option.palette.color(
                QPalette.ColorRole.HighlightedText
                if selected
                else QPalette.ColorRole.Text
            ),
        )
        painter.save()
        painter.translate(option.rect.topLeft())
        context.clip = QRectF(0, 0, option.rect.width(), option.rect.height())
        painter.setClipRect(context.clip)
        document.documentLayout().draw(painter, context)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        self.initStyleOption(option, index)
        document = self._document(option, index)
        return QSize(int(document.idealWidth()), int(document.size().height()))


class SearchDialog(QDialog):
    """A search field over every message, and the best matches below it.

    Parameters
    ----------
    db
        The open database (only read).
    parent
        The Qt parent (the window).

    Signals
    -------
    hit_chosen(int, int)
        The conversation id and node id of the hit the user chose.
    """

    hit_chosen = Signal(int, int)

    def __init__(self, db: Database, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("SearchDialog")
        self.setWindowTitle("Find in all conversations")
        self.resize(560, 460)
        self._db = db
        self.model = SearchResultsModel(self)

        self.query_edit = QLineEdit()
        self.query_edit.setPlaceholderText("Search every message…")
        self.query_edit.setClearButtonEnabled(True)
        self.results = QListView()
        self.results.setModel(self.model)
        self.results.setItemDelegate(HitDelegate(self.results))
        self.results.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.results.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.results.setUniformItemSizes(False)
        self.results.setWordWrap(True)
        self.status_label = QLabel()
        self.status_label.setObjectName("SearchStatus")
        self.status_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.query_edit)
        layout.addWidget(self.results, 1)
        layout.addWidget(self.status_label)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(DEBOUNCE_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        self.query_edit.textChanged.connect(self._on_query_edit_text_changed)
        self.query_edit.returnPressed.connect(self._on_query_edit_return_pressed)
        self.query_edit.installEventFilter(self)
        # activated: Enter in the list, or the platform's click to open
        # (a double-click on most).
        self.results.activated.connect(self._on_results_activated)
        self._set_status("Type words from any message; the last may be unfinished.")

    def open_search(self) -> None:
        """Show the dialog (or bring it forward) with its text selected."""
        self.show()
        self.raise_()
        self.activateWindow()
        self.query_edit.setFocus()
        self.query_edit.selectAll()
        if self.query_edit.text().strip():
            self.run_search()  # the messages may have changed since

    def run_search(self) -> None:
        """Search now for the text in the field (the timer calls this)."""
        self._timer.stop()
        query = self.query_edit.text()
        try:
            hits = text_search.search(self._db, query)
        except StorageUnavailable as exc:
            self.model.set_hits([])
            self._set_status(str(exc))
            return
        self.model.set_hits(hits)
        if hits:
            self.results.setCurrentIndex(self.model.index(0, 0))
            more = " (the best shown)" if len(hits) >= text_search.SEARCH_LIMIT else ""
            self._set_status(
                f"{len(hits)} message{'s' if len(hits) != 1 else ''}{more}. "
                "Enter opens the selected one."
            )
        elif text_search.search_terms(query):
            self._set_status("No message contains these words.")
        else:
            self._set_status("Type words from any message; the last may be unfinished.")

    def _set_status(self, text: str) -> None:
        self.status_label.setText(text)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # Up and Down in the field move through the results, as in a
        # completer: the hands stay on the keyboard.
        if (
            watched is self.query_edit
            and event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
            and event.key() in (Qt.Key.Key_Up, Qt.Key.Key_Down)
            and self.model.rowCount()
        ):
            row = self.results.currentIndex().row()
            step = -1 if event.key() == Qt.Key.Key_Up else 1
            row = min(max(row + step, 0), self.model.rowCount() - 1)
            self.results.setCurrentIndex(self.model.index(row, 0))
            return True
        return super().eventFilter(watched, event)

    @Slot(str)
    def _on_query_edit_text_changed(self, _text: str) -> None:
        self._timer.start()

    @Slot()
    def _on_timer_timeout(self) -> None:
        self.run_search()

    @Slot()
    def _on_query_edit_return_pressed(self) -> None:
        if self._timer.isActive():
            self.run_search()  # Enter right after typing: search first
        index = self.results.currentIndex()
        if not index.isValid() and self.model.rowCount():
            index = self.model.index(0, 0)
        if index.isValid():
            self._on_results_activated(index)

    @Slot(QModelIndex)
    def _on_results_activated(self, index: QModelIndex) -> None:
        if index.isValid():
            self.hit_chosen.emit(index.data(ConversationIdRole), index.data(NodeIdRole))

    def keyPressEvent(self, event: QKeyEvent) -> None:
        # Enter belongs to the field and the list (they choose a hit); QDialog
        # would otherwise treat it as "press the default button" and close.
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            event.accept()
            return
        super().keyPressEvent(event)
