"""``TreePanel``: the whole conversation tree; a click makes a node active."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPoint, Qt, Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.models.conversation_tree import (
    ConversationTreeModel,
    MessageRoleRole,
    NodeIdRole,
)
from app.views.theme import icon


class TreePanel(QWidget):
    """A ``QTreeView`` of ``ConversationTreeModel`` with a delete action.

    Signals
    -------
    node_activated(int)
        The user clicked a node: make it active.
    delete_requested(int)
        The user asked to delete a node's branch (not the root).
    """

    node_activated = Signal(int)
    delete_requested = Signal(int)

    def __init__(
        self, model: ConversationTreeModel, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("TreePanel")
        self.model = model
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 10, 10, 10)
        layout.setSpacing(6)
        header = QHBoxLayout()
        title = QLabel("Conversation tree")
        title.setObjectName("PanelTitle")
        header.addWidget(title, 1)
        self.delete_button = QToolButton()
        self.delete_button.setIcon(icon("delete"))
        self.delete_button.setToolTip("Delete the selected branch (Del)")
        self.delete_button.setAutoRaise(True)
        self.delete_button.clicked.connect(self._on_delete_button_clicked)
        header.addWidget(self.delete_button)
        layout.addLayout(header)

        self.view = QTreeView()
        self.view.setObjectName("ConversationTree")
        self.view.setModel(model)
        self.view.setIndentation(12)
        self.view.setUniformRowHeights(True)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.view.setExpandsOnDoubleClick(False)
        self.view.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.view.customContextMenuRequested.connect(
            self._on_view_context_menu_requested
        )
        self.view.clicked.connect(self._on_view_clicked)
        self.view.activated.connect(self._on_view_clicked)
        header_view = self.view.header()
        header_view.setStretchLastSection(False)
        header_view.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header_view.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header_view.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        layout.addWidget(self.view, 1)

        hint = QLabel(
            "Click a message to continue from it. Bold: the active path. "
            "✓: restores instantly from its checkpoint."
        )
        hint.setObjectName("PanelHint")
        hint.setWordWrap(True)
        layout.addWidget(hint)

        self.delete_action = QAction(icon("delete"), "Delete branch…", self)
        self.delete_action.setShortcut(QKeySequence.StandardKey.Delete)
        self.delete_action.setShortcutContext(
            Qt.ShortcutContext.WidgetWithChildrenShortcut
        )
        self.delete_action.triggered.connect(self._on_delete_button_clicked)
        self.view.addAction(self.delete_action)

        # Rows appear as messages are added: keep every branch visible.
        model.rowsInserted.connect(self._on_model_changed)
        model.modelReset.connect(self._on_model_changed)

    def show_active(self, node_id: int | None) -> None:
        """Select and scroll to the active node (``node_activated`` is not emitted)."""
        if node_id is None:
            self.view.clearSelection()
            return
        index = self.model.index_of(node_id)
        self.view.setCurrentIndex(index)
        self.view.scrollTo(index)

    def selected_node(self) -> int | None:
        """The node under the cursor."""
        index = self.view.currentIndex()
        return index.data(NodeIdRole) if index.isValid() else None

    @Slot()
    def _on_model_changed(self) -> None:
        self.view.expandAll()

    @Slot(QModelIndex)
    def _on_view_clicked(self, index: QModelIndex) -> None:
        self.node_activated.emit(index.data(NodeIdRole))

    @Slot()
    def _on_delete_button_clicked(self) -> None:
        index = self.view.currentIndex()
        if index.isValid() and index.data(MessageRoleRole) != "root":
            self.delete_requested.emit(index.data(NodeIdRole))

    @Slot(QPoint)
    def _on_view_context_menu_requested(self, position: QPoint) -> None:
        index = self.view.indexAt(position)
        if not index.isValid():
            return
        node_id = index.data(NodeIdRole)
        menu = QMenu(self)
        go = QAction(icon("branch"), "Continue from here", menu)
        go.triggered.connect(lambda: self.node_activated.emit(node_id))
        menu.addAction(go)
        if index.data(MessageRoleRole) != "root":
            delete = QAction(icon("delete"), "Delete branch…", menu)
            delete.triggered.connect(lambda: self.delete_requested.emit(node_id))
            menu.addAction(delete)
        menu.popup(self.view.viewport().mapToGlobal(position))
