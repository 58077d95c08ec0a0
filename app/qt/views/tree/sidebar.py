"""``Sidebar``: conversations (most recent first), filter, new, rename, delete."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPoint, Qt, QTimer, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractItemView,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.qt.models.conversation_list import ConversationIdRole, ConversationListModel
from app.qt.views.theme import icon
from app.qt.views.tree.conversation_delegate import ConversationDelegate

# Filtering queries the database; wait until typing pauses.
FILTER_DELAY_MS = 200


class Sidebar(QWidget):
    """The conversation list with its actions.

    Signals
    -------
    conversation_selected(int)
        The user picked a conversation.
    new_requested()
        The New conversation button was pressed.
    rename_requested(int), delete_requested(int)
        Chosen from the context menu (or the window's actions) for a conversation.
    """

    conversation_selected = Signal(int)
    new_requested = Signal()
    rename_requested = Signal(int)
    delete_requested = Signal(int)

    def __init__(
        self, model: ConversationListModel, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("Sidebar")
        self.model = model
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 10, 6, 10)
        layout.setSpacing(8)

        self.new_button = QPushButton("New conversation")
        self.new_button.setObjectName("NewButton")
        self.new_button.setIcon(
            icon("plus", role=self.palette().ColorRole.HighlightedText)
        )
        self.new_button.setToolTip("New conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_requested)
        layout.addWidget(self.new_button)

        self.filter_edit = QLineEdit()
        self.filter_edit.setObjectName("FilterEdit")
        self.filter_edit.setPlaceholderText("Filter conversations")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.addAction(
            icon("search"), QLineEdit.ActionPosition.LeadingPosition
        )
        self.filter_edit.textChanged.connect(self._on_filter_edit_text_changed)
        layout.addWidget(self.filter_edit)

        title = QLabel("Conversations")
        title.setObjectName("PanelTitle")
        layout.addWidget(title)

        self.list_view = QListView()
        self.list_view.setObjectName("ConversationList")
        self.list_view.setModel(model)
        self.list_view.setItemDelegate(ConversationDelegate(self.list_view))
        self.list_view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list_view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.list_view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list_view.customContextMenuRequested.connect(
            self._on_list_view_context_menu_requested
        )
        self.list_view.clicked.connect(self._on_list_view_clicked)
        self.list_view.activated.connect(self._on_list_view_clicked)
        layout.addWidget(self.list_view, 1)

        self._filter_timer = QTimer(self)
        self._filter_timer.setSingleShot(True)
        self._filter_timer.setInterval(FILTER_DELAY_MS)
        self._filter_timer.timeout.connect(self._on_filter_timer_timeout)

    def refresh(self, selected: int | None) -> None:
        """Reload the list and keep ``selected`` highlighted."""
        self.model.refresh()
        self.select(selected)

    def select(self, conversation_id: int | None) -> None:
        """Highlight a conversation without emitting ``conversation_selected``."""
        row = self.model.row_of(conversation_id) if conversation_id is not None else -1
        if row < 0:
            self.list_view.clearSelection()
            return
        self.list_view.setCurrentIndex(self.model.index(row, 0))

    def current_conversation(self) -> int | None:
        """The highlighted conversation."""
        index = self.list_view.currentIndex()
        return index.data(ConversationIdRole) if index.isValid() else None

    @Slot(str)
    def _on_filter_edit_text_changed(self, _text: str) -> None:
        self._filter_timer.start()

    @Slot()
    def _on_filter_timer_timeout(self) -> None:
        selected = self.current_conversation()
        self.model.refresh(self.filter_edit.text())
        self.select(selected)

    @Slot(QModelIndex)
    def _on_list_view_clicked(self, index: QModelIndex) -> None:
        self.conversation_selected.emit(index.data(ConversationIdRole))

    @Slot(QPoint)
    def _on_list_view_context_menu_requested(self, position: QPoint) -> None:
        index = self.list_view.indexAt(position)
        if not index.isValid():
            return
        conversation_id = index.data(ConversationIdRole)
        menu = QMenu(self)
        rename = QAction(icon("rename"), "Rename…", menu)
        rename.triggered.connect(lambda: self.rename_requested.emit(conversation_id))
        delete = QAction(icon("delete"), "Delete…", menu)
        delete.triggered.connect(lambda: self.delete_requested.emit(conversation_id))
        menu.addActions([rename, delete])
        menu.popup(self.list_view.viewport().mapToGlobal(position))
