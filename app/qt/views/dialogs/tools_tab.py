"""Settings → Tools: the MCP servers whose tools the model may call, and what
each tool may do without asking.

The servers are edited here in memory (``ToolsTab.servers``): added through
``AddServerDialog``, removed, enabled or not, and each listed tool given a
permission; the window stores the result when the dialog is accepted.
Nothing starts a server but Test, which lists its tools in the background
(``ToolLister``) and closes it again: opening Settings runs no program.

A server's environment variables and headers may hold keys: once added,
only their names are shown, never their values.
"""

from __future__ import annotations

import html
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import replace

from PySide6.QtCore import (
    QAbstractItemModel,
    QModelIndex,
    QPersistentModelIndex,
    QRect,
    QSignalBlocker,
    QSize,
    Qt,
    Slot,
)
from PySide6.QtGui import QBrush, QColor, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.mcp.client import ToolInfo
from app.mcp.config import Permission, ServerConfig, http_server, stdio_server
from app.mcp.errors import ToolsError
from app.qt.workers.tool_lister import ToolLister

COLUMNS = ("Server", "Enabled", "Command or address", "Status")
NAME, ENABLED, WHERE, STATUS = range(len(COLUMNS))
TOOL_COLUMNS = ("Tool", "Permission")
TOOL, PERMISSION = range(len(TOOL_COLUMNS))

# A tool's permission, on its row's Permission cell.
PermissionRole = Qt.ItemDataRole.UserRole + 1

PERMISSION_LABELS = {
    Permission.ASK: "Ask every time",
    Permission.ALWAYS: "Always allow",
    Permission.NEVER: "Never",
}

NOT_TESTED = "not tested"

INTRO = (
    "Tools let the model call programs on this computer, and services they "
    "reach, through MCP servers you add here. Nothing runs without your yes "
    "unless a tool is set to Always allow."
)

_GOOD = QColor("#27ae60")
_BAD = QColor("#c0392b")


def starting_text(name: str) -> str:
    """The status of a server while its tools are listed."""
    return f"Starting {name}…"


def tools_text(count: int) -> str:
    """The status of a server that listed ``count`` tools."""
    if count == 0:
        return "no tools"
    return "1 tool" if count == 1 else f"{count} tools"


def description_tip(description: str) -> str:
    """A tool's description as a tooltip: rich text, so that Qt wraps a long
    one (plain text runs as wide as the screen), its own text escaped."""
    if not description.strip():
        return "Its server gives no description."
    escaped = html.escape(description.strip())
    return f"<p style='white-space: pre-wrap'>{escaped}</p>"


def one_line(text: str) -> str:
    """``text`` with its line breaks and runs of spaces made single spaces."""
    return re.sub(r"\s+", " ", text).strip()


def where_text(server: ServerConfig) -> str:
    """What a server runs or reaches, with the names of its variables or
    headers but not their values (they may be keys)."""
    if server.url:
        lines = [server.url]
        if server.headers:
            lines.append("headers: " + ", ".join(sorted(server.headers)))
    else:
        lines = ["command " + shlex.join(server.command)]
        if server.env:
            lines.append("environment: " + ", ".join(sorted(server.env)))
    return "\n".join(lines)


# --- adding a server -------------------------------------------------------------


def parse_pairs(text: str, separator: str, what: str) -> dict[str, str]:
    """``KEY<separator>VALUE`` lines (blank ones skipped) as a dict.

    Raises ``ToolsError`` for a line without the separator or a key given
    twice; whether the keys are valid names is ``app.mcp.config``'s check.
    """
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, found, value = line.partition(separator)
        key = key.strip()
        if not found or not key:
            # Not the line itself: it may hold a key.
            example = f"NAME{separator}VALUE" if separator == "=" else "Name: Value"
            raise ToolsError(f"{what} line {number} is not {example}.")
        if key in pairs:
            raise ToolsError(f"{what} {key!r} is given twice.")
        pairs[key] = value.strip()
    return pairs


def command_words(text: str) -> list[str]:
    """A command line split as a shell splits it (quotes, backslashes), for
    running without one. ``ToolsError`` for an unclosed quote."""
    try:
        return shlex.split(text)
    except ValueError as exc:  # shlex's only complaint: an unclosed quote
        raise ToolsError(f"The command line cannot be read: {exc}.") from None


class AddServerDialog(QDialog):
    """A form for one MCP server: its name, and a command line with optional
    environment variables, or a URL with optional headers.

    Parameters
    ----------
    taken
        The names already used (a name must be new).
    parent
        The Qt parent.
    """

    def __init__(self, taken: Iterable[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("AddServerDialog")
        self.setWindowTitle("Add an MCP server")
        self.setMinimumWidth(480)
        self._taken = set(taken)
        self._server: ServerConfig | None = None

        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("e.g. files (letters, digits, _ and -)")
        self.stdio_radio = QRadioButton("&Program on this computer (stdio)")
        self.http_radio = QRadioButton("Server at a &URL (Streamable HTTP)")

        self.command_edit = QLineEdit()
        self.command_edit.setPlaceholderText(
            "e.g. npx -y @modelcontextprotocol/server-filesystem /home/me/notes"
        )
        command_note = QLabel(
            "Split into words as a shell would, but run without one: no ~, "
            "$VARIABLES, pipes or redirections."
        )
        command_note.setObjectName("Hint")
        command_note.setWordWrap(True)
        self.env_edit = _pairs_edit("KEY=VALUE, one a line (optional)")
        self.url_edit = QLineEdit()
        self.url_edit.setPlaceholderText("https://example.com/mcp")
        self.headers_edit = _pairs_edit(
            "Key: Value, one a line (optional)\ne.g. Authorization: Bearer …"
        )

        secret_note = QLabel(
            "Values of variables and headers may be keys: once added, only "
            "their names are shown. They are stored in Arbor's database."
        )
        secret_note.setObjectName("Hint")
        secret_note.setWordWrap(True)
        self.error_label = QLabel()
        self.error_label.setObjectName("ServerFormError")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b;")
        self.error_label.hide()
        for edit in (self.name_edit, self.command_edit, self.url_edit):
            edit.textEdited.connect(self.error_label.hide)

        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add")
        self.buttons.accepted.connect(self._on_buttons_accepted)
        self.buttons.rejected.connect(self.reject)

        # One form, the rows of the kind not chosen hidden: its fields line
        # up whichever kind is shown.
        self.form = QFormLayout()
        form = self.form
        form.addRow(_buddy("&Name", self.name_edit), self.name_edit)
        kinds = QVBoxLayout()
        kinds.addWidget(self.stdio_radio)
        kinds.addWidget(self.http_radio)
        form.addRow("Kind", kinds)
        form.addRow(_buddy("Co&mmand line", self.command_edit), self.command_edit)
        form.addRow("", command_note)
        form.addRow(_buddy("&Environment", self.env_edit), self.env_edit)
        form.addRow(_buddy("&Address", self.url_edit), self.url_edit)
        form.addRow(_buddy("&Headers", self.headers_edit), self.headers_edit)
        self._stdio_rows: list[QWidget] = [
            self.command_edit,
            command_note,
            self.env_edit,
        ]
        self._http_rows: list[QWidget] = [self.url_edit, self.headers_edit]
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(secret_note)
        layout.addWidget(self.error_label)
        layout.addWidget(self.buttons)
        self.stdio_radio.toggled.connect(self._on_stdio_radio_toggled)
        self.stdio_radio.setChecked(True)

    def server(self) -> ServerConfig | None:
        """The server entered (None until the form is accepted)."""
        return self._server

    def read(self) -> ServerConfig:
        """The server the form describes; ``ToolsError`` says what is wrong."""
        name = self.name_edit.text().strip()
        if not name:
            raise ToolsError("Give the server a name: letters, digits, _ and -.")
        if name in self._taken:
            raise ToolsError(f"There is a server called {name!r} already.")
        if self.stdio_radio.isChecked():
            env = parse_pairs(self.env_edit.toPlainText(), "=", "Variable")
            words = command_words(self.command_edit.text())
            return stdio_server(name, words, env)
        headers = parse_pairs(self.headers_edit.toPlainText(), ":", "Header")
        return http_server(name, self.url_edit.text().strip(), headers)

    @Slot()
    def _on_buttons_accepted(self) -> None:
        try:
            self._server = self.read()
        except ToolsError as exc:  # shown inline; the form stays open
            self.error_label.setText(str(exc))
            self.error_label.show()
            return
        self.accept()

    @Slot(bool)
    def _on_stdio_radio_toggled(self, stdio: bool) -> None:
        for field in self._stdio_rows:
            self.form.setRowVisible(field, stdio)
        for field in self._http_rows:
            self.form.setRowVisible(field, not stdio)
        self.adjustSize()
        self.error_label.hide()


def _pairs_edit(placeholder: str) -> QPlainTextEdit:
    """A few lines of ``KEY=VALUE`` or ``Key: Value`` pairs."""
    edit = QPlainTextEdit()
    edit.setPlaceholderText(placeholder)
    edit.setTabChangesFocus(True)
    # Four lines: room for a few, and the form stays small.
    margins = edit.contentsMargins()
    edit.setFixedHeight(
        4 * edit.fontMetrics().lineSpacing()
        + 2 * int(edit.document().documentMargin())
        + margins.top()
        + margins.bottom()
    )
    return edit


def _buddy(text: str, field: QWidget) -> QLabel:
    """A form label whose mnemonic focuses ``field``."""
    label = QLabel(text)
    label.setBuddy(field)
    return label


# --- a tool's permission ---------------------------------------------------------


class PermissionDelegate(QStyledItemDelegate):
    """A combo box for a tool's permission (``PermissionRole``), kept open on
    every tool's row; a choice is written to the model at once."""

    def createEditor(
        self,
        parent: QWidget,
        _option: QStyleOptionViewItem,
        _index: QModelIndex | QPersistentModelIndex,
    ) -> QWidget:
        """A combo box of the three permissions."""
        combo = QComboBox(parent)
        combo.setObjectName("ToolPermission")
        for permission, label in PERMISSION_LABELS.items():
            combo.addItem(label, str(permission))
        combo.setToolTip(
            "Ask every time: it runs only after you say yes. Always allow: it "
            "runs when the model calls it. Never: the model is told it may not."
        )
        combo.currentIndexChanged.connect(lambda _at: self.commitData.emit(combo))
        return combo

    def setEditorData(
        self, editor: QWidget, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        """Show the permission the row holds."""
        assert isinstance(editor, QComboBox)
        # Not a change to commit (see LayerCountDelegate.setEditorData).
        with QSignalBlocker(editor):
            editor.setCurrentIndex(editor.findData(index.data(PermissionRole)))

    def updateEditorGeometry(
        self,
        editor: QWidget,
        option: QStyleOptionViewItem,
        _index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        """The whole cell."""
        editor.setGeometry(option.rect)

    def setModelData(
        self,
        editor: QWidget,
        model: QAbstractItemModel,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        """Keep the permission chosen."""
        assert isinstance(editor, QComboBox)
        model.setData(index, str(editor.currentData()), PermissionRole)


# --- the servers' list --------------------------------------------------------


class WrappingDelegate(QStyledItemDelegate):
    """Text wrapped to its column's width, the row as tall as it needs.

    ``QTreeView`` asks a row's height of the delegate without the column's
    width, so wrapped text would be measured as one long line and cut off:
    the width is given here, from the header.
    """

    def __init__(self, view: QTreeView) -> None:
        super().__init__(view)
        self._header = view.header()

    def sizeHint(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> QSize:
        """The size of the text wrapped to the column's width."""
        sized = QStyleOptionViewItem(option)
        # Qt's style wraps only within a valid rectangle: some height too.
        sized.rect = QRect(0, 0, self._header.sectionSize(index.column()), 1)
        return super().sizeHint(sized, index)


# --- the tab ---------------------------------------------------------------------


class ToolsTab(QWidget):
    """The MCP servers, each with what it runs, whether it is enabled and
    its status; the selected server's tools with their permissions; Add…,
    Remove and Test.

    Parameters
    ----------
    servers
        The servers as stored.
    parent
        The Qt parent.
    """

    def __init__(
        self, servers: Sequence[ServerConfig] = (), parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ToolsTab")
        self._initial = list(servers)
        self._servers = list(servers)
        # What each server's last test found, and the server as it was then.
        self._listed: dict[str, list[ToolInfo] | ToolsError] = {}
        self._tested: dict[str, ServerConfig] = {}
        self.add_dialog: AddServerDialog | None = None
        self.lister = ToolLister(self)
        self.lister.listed.connect(self._on_lister_listed)

        intro = QLabel(INTRO)
        intro.setObjectName("Hint")
        intro.setWordWrap(True)

        self.servers_model = QStandardItemModel(0, len(COLUMNS), self)
        self.servers_model.setHorizontalHeaderLabels(list(COLUMNS))
        self.servers_view = QTreeView()
        self.servers_view.setObjectName("ToolServers")
        self.servers_view.setModel(self.servers_model)
        self.servers_view.setRootIsDecorated(False)
        self.servers_view.setItemsExpandable(False)
        self.servers_view.setAlternatingRowColors(True)
        self.servers_view.setWordWrap(True)
        self.servers_view.setUniformRowHeights(False)
        self.servers_view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.servers_view.setSelectionMode(
            QAbstractItemView.SelectionMode.SingleSelection
        )
        self.servers_view.setSizeAdjustPolicy(
            QAbstractItemView.SizeAdjustPolicy.AdjustToContents
        )
        self.servers_view.setMinimumHeight(96)
        header = self.servers_view.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # What it runs and its status take the width left, and wrap in it.
        for column in (WHERE, STATUS):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
            self.servers_view.setItemDelegateForColumn(
                column, WrappingDelegate(self.servers_view)
            )
        # A wrapped cell's height follows its column's width.
        header.sectionResized.connect(self._on_header_section_resized)
        self.servers_view.selectionModel().currentRowChanged.connect(
            self._on_servers_view_current_row_changed
        )
        self.servers_model.itemChanged.connect(self._on_servers_model_item_changed)

        self.add_button = QPushButton("&Add…")
        self.add_button.setToolTip("Add an MCP server: a program or a URL")
        self.add_button.clicked.connect(self._on_add_button_clicked)
        self.remove_button = QPushButton("&Remove")
        self.remove_button.clicked.connect(self._on_remove_button_clicked)
        self.test_button = QPushButton("Te&st")
        self.test_button.setToolTip(
            "Start the selected server, list its tools, and stop it again"
        )
        self.test_button.clicked.connect(self._on_test_button_clicked)
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addWidget(self.test_button)
        buttons.addStretch(1)

        self.tools_label = QLabel()
        self.tools_label.setObjectName("ToolsOfServer")
        self.tools_label.setWordWrap(True)
        self.tools_model = QStandardItemModel(0, len(TOOL_COLUMNS), self)
        self.tools_model.setHorizontalHeaderLabels(list(TOOL_COLUMNS))
        self.tools_view = QTreeView()
        self.tools_view.setObjectName("ServerTools")
        self.tools_view.setModel(self.tools_model)
        self.tools_view.setRootIsDecorated(False)
        self.tools_view.setItemsExpandable(False)
        self.tools_view.setAlternatingRowColors(True)
        self.tools_view.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.tools_view.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.tools_view.setItemDelegateForColumn(
            PERMISSION, PermissionDelegate(self.tools_view)
        )
        self.tools_view.setMinimumHeight(96)
        tools_header = self.tools_view.header()
        tools_header.setStretchLastSection(False)
        tools_header.setSectionResizeMode(TOOL, QHeaderView.ResizeMode.Stretch)
        tools_header.setSectionResizeMode(
            PERMISSION, QHeaderView.ResizeMode.ResizeToContents
        )
        self.tools_model.dataChanged.connect(self._on_tools_model_data_changed)

        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.servers_view, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.tools_label)
        layout.addWidget(self.tools_view, 1)
        for server in self._servers:
            self._add_row(server)
        if self._servers:
            self.servers_view.setCurrentIndex(self.servers_model.index(0, NAME))
        self._show_tools()
        self._update_buttons()

    # --- what the dialog and tests use -------------------------------------------

    def servers(self) -> list[ServerConfig]:
        """The servers as edited here, in order."""
        return list(self._servers)

    def changed(self) -> bool:
        """Whether the servers differ from those the tab was opened with."""
        return self._servers != self._initial

    def names(self) -> list[str]:
        """The servers' names, in order."""
        return [server.name for server in self._servers]

    def cells(self, name: str) -> tuple[str, ...]:
        """What the row of server ``name`` shows, column by column."""
        row = self.names().index(name)
        return tuple(
            self.servers_model.item(row, column).text()
            for column in range(len(COLUMNS))
        )

    def select(self, name: str) -> None:
        """Select the row of server ``name``."""
        row = self.names().index(name)
        self.servers_view.setCurrentIndex(self.servers_model.index(row, NAME))

    def selected(self) -> ServerConfig | None:
        """The server selected, if any."""
        current = self.servers_view.currentIndex()
        return self._servers[current.row()] if current.isValid() else None

    def tool_names(self) -> list[str]:
        """The tools shown for the selected server, in order."""
        return [
            self.tools_model.item(row, TOOL).text()
            for row in range(self.tools_model.rowCount())
        ]

    def permission_combo(self, tool: str) -> QComboBox:
        """The permission combo box on the row of ``tool`` (shown)."""
        row = self.tool_names().index(tool)
        combo = self.tools_view.indexWidget(self.tools_model.index(row, PERMISSION))
        assert isinstance(combo, QComboBox)
        return combo

    def add_server(self, server: ServerConfig) -> None:
        """Add ``server`` (its name must be new) and select it."""
        if server.name in self.names():
            raise ToolsError(f"There is a server called {server.name!r} already.")
        self._servers.append(server)
        self._add_row(server)
        self.select(server.name)

    def test(self, name: str) -> None:
        """List the tools of server ``name`` in the background (nothing when
        a listing of it runs)."""
        server = self._servers[self.names().index(name)]
        if not self.lister.list_tools(server):
            return
        self._tested[name] = server
        self._listed.pop(name, None)
        self._set_status(name, starting_text(name))
        self._update_buttons()
        self._show_tools()

    def stop(self) -> None:
        """Report no more listings (the dialog is closing)."""
        self.lister.stop()
        if self.add_dialog is not None:
            self.add_dialog.reject()

    # --- slots ----------------------------------------------------------------------

    @Slot()
    def _on_add_button_clicked(self) -> None:
        if self.add_dialog is not None:
            self.add_dialog.raise_()
            return
        dialog = AddServerDialog(self.names(), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(self._on_add_dialog_accepted)
        dialog.finished.connect(self._on_add_dialog_finished)
        self.add_dialog = dialog
        # Window-modal, and not exec(): the settings stay responsive (a test
        # under way still reports) while the form is filled in.
        dialog.open()

    @Slot()
    def _on_add_dialog_accepted(self) -> None:
        dialog = self.add_dialog
        server = dialog.server() if dialog is not None else None
        if server is not None and server.name not in self.names():
            self.add_server(server)

    @Slot(int)
    def _on_add_dialog_finished(self, _result: int) -> None:
        self.add_dialog = None

    @Slot()
    def _on_remove_button_clicked(self) -> None:
        current = self.servers_view.currentIndex()
        if not current.isValid():
            return
        gone = self._servers.pop(current.row())
        self._listed.pop(gone.name, None)
        self._tested.pop(gone.name, None)
        self.servers_model.removeRow(current.row())
        self._show_tools()
        self._update_buttons()

    @Slot()
    def _on_test_button_clicked(self) -> None:
        server = self.selected()
        if server is not None:
            self.test(server.name)

    @Slot(str, object)
    def _on_lister_listed(self, name: str, tools: list[ToolInfo] | ToolsError) -> None:
        tested = self._tested.pop(name, None)
        if name not in self.names() or tested is None:
            return  # removed meanwhile
        current = self._servers[self.names().index(name)]
        if _where(current) != _where(tested):
            return  # removed, and another added under its name
        self._listed[name] = tools
        if isinstance(tools, list):
            self._set_status(name, tools_text(len(tools)), _GOOD)
        else:
            self._set_status(name, one_line(str(tools)), _BAD)
        self._update_buttons()
        selected = self.selected()
        if selected is not None and selected.name == name:
            self._show_tools()

    @Slot(QStandardItem)
    def _on_servers_model_item_changed(self, item: QStandardItem) -> None:
        if item.column() != ENABLED:
            return
        row = item.row()
        enabled = item.checkState() == Qt.CheckState.Checked
        if self._servers[row].enabled != enabled:
            self._servers[row] = replace(self._servers[row], enabled=enabled)

    @Slot(QModelIndex, QModelIndex)
    def _on_servers_view_current_row_changed(
        self, _current: QModelIndex, _previous: QModelIndex
    ) -> None:
        self._show_tools()
        self._update_buttons()

    @Slot(QModelIndex, QModelIndex, list)
    def _on_tools_model_data_changed(
        self, top_left: QModelIndex, _bottom_right: QModelIndex, roles: list[int]
    ) -> None:
        server = self.selected()
        if server is None or top_left.column() != PERMISSION:
            return
        if roles and PermissionRole not in roles:
            return
        tool = self.tools_model.item(top_left.row(), TOOL).text()
        permission = Permission(top_left.data(PermissionRole))
        self.tools_model.item(top_left.row(), PERMISSION).setText(
            PERMISSION_LABELS[permission]
        )
        permissions = dict(server.permissions)
        if permission == Permission.ASK:
            permissions.pop(tool, None)  # the default, stored as nothing
        else:
            permissions[tool] = permission
        if permissions != dict(server.permissions):
            at = self.names().index(server.name)
            self._servers[at] = replace(server, permissions=permissions)

    @Slot(int, int, int)
    def _on_header_section_resized(self, _section: int, _old: int, _new: int) -> None:
        self.servers_view.doItemsLayout()

    # --- the rows -------------------------------------------------------------------

    def _add_row(self, server: ServerConfig) -> None:
        name = QStandardItem(server.name)
        enabled = QStandardItem()
        enabled.setCheckable(True)
        enabled.setCheckState(
            Qt.CheckState.Checked if server.enabled else Qt.CheckState.Unchecked
        )
        enabled.setToolTip("Whether the model is offered this server's tools")
        where = QStandardItem(where_text(server))
        where.setToolTip(where_text(server))
        status = QStandardItem(NOT_TESTED)
        status.setToolTip("Test starts the server and lists its tools")
        self.servers_model.appendRow([name, enabled, where, status])

    def _set_status(self, name: str, text: str, color: QColor | None = None) -> None:
        item = self.servers_model.item(self.names().index(name), STATUS)
        item.setText(text)
        item.setToolTip(text)
        item.setForeground(QBrush(color) if color else QBrush())

    def _update_buttons(self) -> None:
        server = self.selected()
        self.remove_button.setEnabled(server is not None)
        self.test_button.setEnabled(
            server is not None and not self.lister.is_listing(server.name)
        )

    def _show_tools(self) -> None:
        """The selected server's tools, each with its permission: those its
        last test listed or, before one, those given a permission."""
        self.tools_model.removeRows(0, self.tools_model.rowCount())
        server = self.selected()
        if server is None:
            text = "Select a server to see its tools."
            names: list[tuple[str, str]] = []
        else:
            listed = self._listed.get(server.name)
            if self.lister.is_listing(server.name):
                text = f"Listing the tools of {server.name}…"
                names = []
            elif isinstance(listed, list):
                text = f"The tools of {server.name}: hover over one for what it does."
                names = [(t.name, description_tip(t.description)) for t in listed]
            else:
                unlisted = "Test lists what it does."
                names = [(tool, unlisted) for tool in server.permissions]
                text = (
                    f"Test lists the tools of {server.name}."
                    if listed is None
                    else f"{server.name} did not list its tools (its status says why)."
                )
                if names:
                    text += " The tools given a permission:"
        self.tools_label.setText(text)
        for tool, tip in names:
            assert server is not None
            item = QStandardItem(tool)
            item.setToolTip(tip)
            permission = server.permission(tool)
            choice = QStandardItem(PERMISSION_LABELS[permission])
            choice.setData(str(permission), PermissionRole)
            self.tools_model.appendRow([item, choice])
            self.tools_view.openPersistentEditor(choice.index())
        # The rows take the combo boxes' height now, not when they were added.
        self.tools_view.doItemsLayout()
        self.tools_view.setVisible(bool(names))


def _where(server: ServerConfig) -> tuple[object, ...]:
    """What a server is, apart from the user's choices about it."""
    return (server.command, dict(server.env), server.url, dict(server.headers))
