"""``TreePanel``: the whole conversation tree; a click makes a node active.

Two views of the same ``ConversationTreeModel`` share the panel, chosen by a
List/Graph toggle in its header: the ``QTreeView`` and a ``TreeGraphView``.
Both ask the window for the same things (``node_activated``,
``delete_requested``), so the window does not know which one is shown.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QCoreApplication,
    QEvent,
    QModelIndex,
    QObject,
    QPoint,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import QAction, QFont, QFontMetrics, QKeySequence
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QButtonGroup,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMenu,
    QStackedWidget,
    QStyle,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.qt.models.conversation_tree import (
    BRANCH_MARK,
    COLUMNS,
    ConversationTreeModel,
    MessageRoleRole,
    NodeIdRole,
)
from app.qt.views.elided_label import ElidedLabel
from app.qt.views.theme import icon
from app.qt.views.tree.tree_graph import PROMPT_ACTION_TEXT, TreeGraphView
from storage.values import Role

LIST_MODE, GRAPH_MODE = "list", "graph"

LIST_HINT = (
    "Click a message to continue from it. Bold: the active path. "
    f"{BRANCH_MARK.format(1, 2)}: the first of two versions. "
    "✓: restores instantly from its checkpoint."
)
GRAPH_HINT = (
    "Click a message to continue from it; drag to pan, Ctrl+wheel to zoom, "
    "double-click the background to fit. Arrows move, Enter switches. "
    "●: restores instantly from its checkpoint, ○: rebuilt."
)


class TreePanel(QWidget):
    """The tree as a list (``QTreeView``) or a graph, with a delete action.

    Signals
    -------
    node_activated(int)
        The user clicked a node: make it active.
    delete_requested(int)
        The user asked to delete a node's branch (not the root).
    system_prompt_requested(int)
        The user asked to change the system prompt at a start (a root).
    mode_changed(str)
        The user switched between ``"list"`` and ``"graph"``.
    """

    node_activated = Signal(int)
    delete_requested = Signal(int)
    system_prompt_requested = Signal(int)
    mode_changed = Signal(str)

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
        # Elided when the panel is narrow: the title must not hold a small or
        # scaled screen's window wider than it can be.
        title = ElidedLabel("PanelTitle", "Conversation tree", keep=4)
        header.addWidget(title, 1)
        self.list_button = self._toggle_button("List", "Show the tree as a list")
        self.graph_button = self._toggle_button(
            "Graph", "Show the tree as a graph (zoom with Ctrl+wheel)"
        )
        self.list_button.setChecked(True)
        self.mode_group = QButtonGroup(self)
        self.mode_group.setExclusive(True)
        toggle = QHBoxLayout()  # a segmented control: the two buttons touch
        toggle.setSpacing(0)
        for button, segment in (
            (self.list_button, "first"),
            (self.graph_button, "last"),
        ):
            button.setProperty("segment", segment)
            self.mode_group.addButton(button)
            toggle.addWidget(button)
        header.addLayout(toggle)
        self.mode_group.buttonToggled.connect(self._on_mode_group_button_toggled)
        self.fit_button = QToolButton()
        self.fit_button.setObjectName("GraphFit")
        self.fit_button.setText("Fit")
        self.fit_button.setToolTip("Zoom to show the whole tree (F)")
        self.fit_button.setAutoRaise(True)
        self.fit_button.setVisible(False)
        header.addWidget(self.fit_button)
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
        # The figures' columns fit their texts, sized here when the tree
        # changes: ResizeToContents measured every row through the model on
        # every change of any row, and a new active node changes every row of
        # the old and new paths (300 ms to switch branches in a 300-node tree).
        for column in range(1, len(COLUMNS)):
            header_view.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)

        self.graph = TreeGraphView()
        self.graph.node_activated.connect(self.node_activated)
        self.graph.delete_requested.connect(self.delete_requested)
        self.graph.system_prompt_requested.connect(self.system_prompt_requested)
        self.fit_button.clicked.connect(self.graph.fit)

        self.stack = QStackedWidget()
        self.stack.addWidget(self.view)
        self.stack.addWidget(self.graph)
        layout.addWidget(self.stack, 1)

        self.hint = QLabel(LIST_HINT)
        self.hint.setObjectName("PanelHint")
        self.hint.setWordWrap(True)
        layout.addWidget(self.hint)

        self.delete_action = QAction(icon("delete"), "Delete branch…", self)
        self.delete_action.setShortcut(QKeySequence.StandardKey.Delete)
        self.delete_action.setShortcutContext(
            Qt.ShortcutContext.WidgetWithChildrenShortcut
        )
        self.delete_action.triggered.connect(self._on_delete_button_clicked)
        self.view.addAction(self.delete_action)

        # Rows appear as messages are added: keep every branch visible.
        model.rowsInserted.connect(self._on_model_rows_inserted)
        model.rowsMoved.connect(self._on_model_rows_moved)
        model.modelReset.connect(self._on_model_model_reset)
        self._fit_timer = QTimer(self)
        self._fit_timer.setSingleShot(True)
        self._fit_timer.setInterval(0)
        self._fit_timer.timeout.connect(self._fit_columns)
        for signal in (model.rowsInserted, model.rowsRemoved, model.modelReset):
            signal.connect(self._schedule_fit)
        self._new_rows = False  # a reset not laid out yet (``_lay_out_new_rows``)
        model.dataChanged.connect(self._on_model_data_changed)
        # The graph follows the model too, but one refresh per event-loop turn
        # is enough: a reply inserts two rows and restyles several.
        self._graph_timer = QTimer(self)
        self._graph_timer.setSingleShot(True)
        self._graph_timer.setInterval(0)
        self._graph_timer.timeout.connect(self._sync_graph)
        for signal in (
            model.rowsInserted,
            model.rowsRemoved,
            model.modelReset,
            model.dataChanged,
        ):
            signal.connect(self._schedule_graph_sync)
        # The window disables the list while a reply is generated; the graph
        # follows it so that both views behave alike.
        self.view.installEventFilter(self)

    @property
    def mode(self) -> str:
        """The view shown: ``"list"`` or ``"graph"``."""
        return GRAPH_MODE if self.stack.currentWidget() is self.graph else LIST_MODE

    def set_mode(self, mode: str) -> None:
        """Show the list or the graph (unknown values mean the list)."""
        button = self.graph_button if mode == GRAPH_MODE else self.list_button
        button.setChecked(True)  # the group's toggled signal does the rest

    def show_active(self, node_id: int | None) -> None:
        """Select and scroll to the active node (``node_activated`` is not emitted)."""
        self._sync_graph()
        if self._new_rows:
            self._lay_out_new_rows()
        if node_id is None:
            self.view.clearSelection()
            return
        index = self.model.index_of(node_id)
        self.view.setCurrentIndex(index)
        self.view.scrollTo(index)

    def _lay_out_new_rows(self) -> None:
        """Lay out a new tree's rows, show or hide the scroll bar and fit the
        columns now, before the first paint, and quietly.

        Left to the event loop, the bar comes or goes after the first paint
        (a queued call), the first column stretches, and told of a resized
        column the view repaints it on a timer of its own: a second paint of
        the whole list. The first paint shows the new widths anyway.
        """
        self._new_rows = False
        self._fit_timer.stop()
        header = self.view.header()
        quiet = header.blockSignals(True)
        try:
            self.view.doItemsLayout()
            QCoreApplication.sendPostedEvents(self.view, QEvent.Type.MetaCall)
            self._fit_columns()
        finally:
            header.blockSignals(quiet)

    def selected_node(self) -> int | None:
        """The node under the cursor (of the view shown)."""
        if self.mode == GRAPH_MODE:
            return self.graph.cursor_id
        index = self.view.currentIndex()
        return index.data(NodeIdRole) if index.isValid() else None

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.view and event.type() == QEvent.Type.EnabledChange:
            self.graph.setEnabled(self.view.isEnabled())
        return super().eventFilter(watched, event)

    def _toggle_button(self, text: str, tooltip: str) -> QToolButton:
        button = QToolButton()
        button.setObjectName("ViewToggle")
        button.setText(text)
        button.setToolTip(tooltip)
        button.setCheckable(True)
        button.setAutoRaise(True)
        return button

    @Slot(QModelIndex, QModelIndex, list)
    def _on_model_data_changed(
        self, _first: QModelIndex, _last: QModelIndex, roles: list[int]
    ) -> None:
        if not roles or Qt.ItemDataRole.DisplayRole in roles:
            self._schedule_fit()  # a row's text changed, not only its style

    @Slot()
    def _schedule_fit(self) -> None:
        self._fit_timer.start()

    @Slot()
    def _fit_columns(self) -> None:
        """Make the figures' columns as wide as their widest text (in bold, as on
        the active path) or their title."""
        bold = QFont(self.view.font())
        bold.setBold(True)
        metrics = QFontMetrics(bold)
        # The item delegate's padding around a text.
        margin = 2 * (
            self.view.style().pixelMetric(
                QStyle.PixelMetric.PM_FocusFrameHMargin, None, self.view
            )
            + 1
        )
        header = self.view.header()
        for column in range(1, len(COLUMNS)):
            texts = self.model.column_texts(column)
            widest = max((metrics.horizontalAdvance(t) for t in texts), default=0)
            header.resizeSection(
                column, max(widest + margin + 1, header.sectionSizeHint(column))
            )

    @Slot()
    def _schedule_graph_sync(self) -> None:
        self._graph_timer.start()

    @Slot()
    def _sync_graph(self) -> None:
        # A hidden graph is brought up to date when it is shown.
        if self.mode == GRAPH_MODE:
            self.graph.set_tree(self.model.snapshot, self.model.active_id)

    @Slot(QModelIndex, int, int)
    def _on_model_rows_inserted(
        self, parent: QModelIndex, first: int, last: int
    ) -> None:
        # Expand just the new rows' parent (and anything they bring): expandAll
        # per insertion made growing a conversation by n nodes cost O(n²) data()
        # calls, a minute for 500 nodes.
        if parent.isValid():
            self.view.expand(parent)
        for row in range(first, last + 1):
            self.view.expandRecursively(self.model.index(row, 0, parent))

    @Slot(QModelIndex, int, int, QModelIndex, int)
    def _on_model_rows_moved(
        self,
        _parent: QModelIndex,
        _first: int,
        _last: int,
        destination: QModelIndex,
        _row: int,
    ) -> None:
        # A message that gets a second child becomes a fork, and the branch
        # it had moves under it: show it there too.
        if destination.isValid():
            self.view.expand(destination)

    @Slot()
    def _on_model_model_reset(self) -> None:
        # A chain without forks is one level: nothing to expand, and
        # expandAll would still ask the model about every row.
        if self.model.has_nested_rows():
            self.view.expandAll()
        self._new_rows = True  # laid out when the active node is shown

    @Slot(QAbstractButton, bool)
    def _on_mode_group_button_toggled(
        self, button: QAbstractButton, checked: bool
    ) -> None:
        if not checked:
            return
        graph = button is self.graph_button
        shown: QWidget = self.graph if graph else self.view
        current = self.stack.currentWidget()
        had_focus = current is not None and current.hasFocus()
        self.stack.setCurrentWidget(shown)
        self.fit_button.setVisible(graph)
        self.hint.setText(GRAPH_HINT if graph else LIST_HINT)
        self._sync_graph()
        if had_focus:
            shown.setFocus()
        self.mode_changed.emit(self.mode)

    @Slot(QModelIndex)
    def _on_view_clicked(self, index: QModelIndex) -> None:
        self.node_activated.emit(index.data(NodeIdRole))

    @Slot()
    def _on_delete_button_clicked(self) -> None:
        node_id = self.selected_node()
        snapshot = self.model.snapshot
        if node_id is not None and node_id in snapshot and snapshot.deletable(node_id):
            self.delete_requested.emit(node_id)

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
        if index.data(MessageRoleRole) == Role.ROOT:
            prompt = QAction(PROMPT_ACTION_TEXT, menu)
            prompt.triggered.connect(lambda: self.system_prompt_requested.emit(node_id))
            menu.addAction(prompt)
        if self.model.snapshot.deletable(node_id):
            delete = QAction(icon("delete"), "Delete branch…", menu)
            delete.triggered.connect(lambda: self.delete_requested.emit(node_id))
            menu.addAction(delete)
        menu.popup(self.view.viewport().mapToGlobal(position))
