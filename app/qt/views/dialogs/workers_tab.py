"""Settings → Workers: the ``arbor worker``s whose devices take the model's
layers, what each offers now, and the layers each holds or gets.

The list is edited here and kept in the preferences (``WorkerPrefs``) with
"Use workers" on or off and the split: by the workers' free memory, or by
hand, a layer count per worker typed in a spin box in its row; the Settings
dialog turns it into the backend's workers and their split, and pressing OK
restarts the engine on them. Each worker is checked when the tab is first
shown, when it is added and on Check, in a child process (``WorkerCheck``):
never in the window's, where llama.cpp would end the whole window over a
worker that goes away. A worker the loaded model
uses is not checked: it serves one client at a time, and that client is
this window's engine.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import (
    QAbstractItemModel,
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSignalBlocker,
    Qt,
    Slot,
)
from PySide6.QtGui import (
    QBrush,
    QColor,
    QKeyEvent,
    QShowEvent,
    QStandardItem,
    QStandardItemModel,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.backend.errors import InvalidSetting
from app.backend.settings import consecutive_runs, layers_text, worker_address
from app.backend.values import ModelInfo
from app.library.catalog import shipped_catalog
from app.preferences import WorkerPrefs
from app.qt.workers.worker_check import DeviceMemory, WorkerCheck
from app.text.quantities import format_bytes

COLUMNS = ("Worker", "Status", "Devices and free memory", "Layers")
WORKER, STATUS, MEMORY, LAYERS = range(len(COLUMNS))

CHECKING = "checking…"
SURVEYING = "reading its devices…"
NOT_SURVEYED = "could not be surveyed"
IN_USE = "in use by the loaded model"

# A worker's layer count split by hand, on its row's Layers cell.
LayerCountRole = Qt.ItemDataRole.UserRole + 1
# The most layers a model has: llama.cpp's LLAMA_MAX_LAYERS and the output.
_MOST_LAYERS = 513

INTRO = (
    "Put the model's layers on other machines' devices. On each machine run "
    "<code>arbor worker --listen HOST:PORT</code> and add the address it "
    "prints. Every layer goes to the workers, split between them by their "
    "free memory or by hand. Flash attention is always on with workers (without it, "
    "saving a checkpoint reads the workers one row at a time). RPC has no "
    "password and no encryption: use workers on a network you trust only."
)

# Status colours that read on light and dark themes alike.
_GOOD = QColor("#2e8b57")
_BAD = QColor("#c0392b")


def layer_runs(layers: Sequence[int], n_layer: int) -> str:
    """Layer numbers as people read them: "0-11, 14 + output".

    Layer ``n_layer`` is llama.cpp's number for the output layer.
    """
    runs = consecutive_runs(sorted(layer for layer in layers if layer != n_layer))
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    if n_layer in layers:
        return f"{text} + output" if text else "output"
    return text


class _LayerSpin(QSpinBox):
    """A spin box that opens with nothing selected: Qt selects its text as it
    is set, which in a list of them reads as highlighted values."""

    def showEvent(self, event: QShowEvent) -> None:
        """Drop the selection Qt made."""
        super().showEvent(event)
        self.lineEdit().deselect()


def layer_spin(parent: QWidget | None = None) -> QSpinBox:
    """The spin box of a worker's layer count."""
    spin = _LayerSpin(parent)
    spin.setObjectName("WorkerLayers")
    spin.setRange(0, _MOST_LAYERS)
    spin.setToolTip(
        "The layers this worker holds. Several devices on one worker share "
        "its layers evenly."
    )
    return spin


class LayerCountDelegate(QStyledItemDelegate):
    """A spin box for a worker's layer count (``LayerCountRole``), kept open
    on each worker's row while the split is by hand; every step it takes is
    written to the model at once, so the sum under the list follows."""

    def createEditor(
        self,
        parent: QWidget,
        _option: QStyleOptionViewItem,
        _index: QModelIndex | QPersistentModelIndex,
    ) -> QWidget:
        """A spin box from 0 layers up."""
        spin = layer_spin(parent)
        spin.valueChanged.connect(lambda _value: self.commitData.emit(spin))
        return spin

    def setEditorData(
        self, editor: QWidget, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        """Show the count the row holds."""
        assert isinstance(editor, QSpinBox)
        # Not a change to commit: the view calls this before it knows the
        # editor (it warns about a commit from an editor not its own).
        with QSignalBlocker(editor):
            editor.setValue(int(index.data(LayerCountRole) or 0))

    def updateEditorGeometry(
        self,
        editor: QWidget,
        option: QStyleOptionViewItem,
        _index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        """The whole cell, not the text's rectangle inside the list's padding."""
        editor.setGeometry(option.rect)

    def setModelData(
        self,
        editor: QWidget,
        model: QAbstractItemModel,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        """Keep the count typed."""
        assert isinstance(editor, QSpinBox)
        model.setData(index, editor.value(), LayerCountRole)


class WorkersTab(QWidget):
    """The workers' list with each one's status, devices, free memory and
    layers; "Use workers"; Add, Remove and Check.

    Parameters
    ----------
    prefs
        The workers as the preferences have them.
    loaded
        The loaded model, whose layers on workers are shown, and whose layer
        count a split by hand is checked against (None: none).
    parent
        The Qt parent.
    """

    def __init__(
        self,
        prefs: WorkerPrefs,
        loaded: ModelInfo | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("WorkersTab")
        self._loaded = loaded
        self._checked_once = False
        # The free memory of each worker surveyed, by address: the automatic
        # split gives each a share of the layers in proportion.
        self._free: dict[str, int] = {}
        self.checker = WorkerCheck(self)
        self.checker.answered.connect(self._on_checker_answered)
        self.checker.surveyed.connect(self._on_checker_surveyed)
        self.checker.not_surveyed.connect(self._on_checker_not_surveyed)
        self.checker.finished.connect(self._on_checker_finished)

        intro = QLabel(INTRO)
        intro.setWordWrap(True)
        intro.setObjectName("Hint")
        self.use_workers = QCheckBox("Use workers")
        self.use_workers.setChecked(prefs.use)
        self.use_workers.setToolTip(
            "On: OK reloads the model with its layers on the workers listed. "
            "Off: it loads on this computer alone; the list is kept."
        )
        self.split_auto = QRadioButton("by the workers' free memory")
        self.split_auto.setToolTip(
            "As llama.cpp splits a model between GPUs: each worker gets layers "
            "in proportion to its free memory."
        )
        self.split_by_hand = QRadioButton("by hand")
        self.split_by_hand.setToolTip(
            "Type how many layers each worker holds, in its row. This computer "
            "keeps the first layers they are not given."
        )
        (self.split_by_hand if prefs.layers else self.split_auto).setChecked(True)
        self.split_by_hand.toggled.connect(self._on_split_by_hand_toggled)
        split_row = QHBoxLayout()
        split_row.addWidget(QLabel("Split the layers:"))
        split_row.addWidget(self.split_auto)
        split_row.addWidget(self.split_by_hand)
        split_row.addStretch(1)

        self.address_edit = QLineEdit()
        self.address_edit.setPlaceholderText("HOST:PORT, e.g. 192.168.1.20:50052")
        # Enter adds the address: let through, it would press the dialog's OK.
        self.address_edit.installEventFilter(self)
        self.add_button = QPushButton("Add")
        self.add_button.clicked.connect(self._on_add_button_clicked)
        add_row = QHBoxLayout()
        add_row.addWidget(self.address_edit, 1)
        add_row.addWidget(self.add_button)
        self.error_label = QLabel()
        self.error_label.setObjectName("WorkerAddressError")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b;")
        self.error_label.hide()
        self.address_edit.textEdited.connect(self.error_label.hide)

        self.model = QStandardItemModel(0, len(COLUMNS), self)
        self.model.setHorizontalHeaderLabels(list(COLUMNS))
        self.table = QTreeView()
        self.table.setObjectName("WorkersList")
        self.table.setModel(self.model)
        # As tall as its rows, not a fixed 192 px: the Model tab, the
        # dialog's tallest, sets the dialog's height.
        self.table.setSizeAdjustPolicy(
            QAbstractItemView.SizeAdjustPolicy.AdjustToContents
        )
        self.table.setMinimumHeight(96)
        self.table.setRootIsDecorated(False)
        self.table.setItemsExpandable(False)
        self.table.setAlternatingRowColors(True)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setItemDelegateForColumn(LAYERS, LayerCountDelegate(self.table))
        header = self.table.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(MEMORY, QHeaderView.ResizeMode.Stretch)
        self.table.selectionModel().currentRowChanged.connect(
            self._on_table_current_row_changed
        )

        self.check_button = QPushButton("Check")
        self.check_button.setToolTip("Ask every worker again what it offers now")
        self.check_button.clicked.connect(self._on_check_button_clicked)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self._on_remove_button_clicked)
        self.progress_label = QLabel()
        self.progress_label.setObjectName("Hint")
        buttons = QHBoxLayout()
        buttons.addWidget(self.check_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        buttons.addWidget(self.progress_label)
        self.detail_label = QLabel()
        self.detail_label.setObjectName("WorkerDetail")
        self.detail_label.setWordWrap(True)
        self.detail_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        self.detail_label.hide()
        self.split_label = QLabel()
        self.split_label.setObjectName("SplitSummary")
        self.split_label.setWordWrap(True)
        self.placement_label = QLabel(self._placement_text())
        self.placement_label.setObjectName("Hint")
        self.placement_label.setWordWrap(True)
        self.placement_label.setVisible(bool(self.placement_label.text()))

        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.use_workers)
        layout.addLayout(split_row)
        layout.addLayout(add_row)
        layout.addWidget(self.error_label)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.split_label)
        layout.addLayout(buttons)
        layout.addWidget(self.detail_label)
        layout.addWidget(self.placement_label)
        counts = prefs.layers or (0,) * len(prefs.addresses)
        for address, count in zip(prefs.addresses, counts, strict=True):
            self._add_row(address, count)
        self.model.dataChanged.connect(self._on_model_data_changed)
        self._show_split()
        self._update_buttons()

    # --- what the dialog and tests use -------------------------------------------

    def workers(self) -> WorkerPrefs:
        """The workers as edited here, with their split by hand if chosen."""
        layers = self.layer_counts() if self.split_by_hand.isChecked() else ()
        return WorkerPrefs(self.addresses(), self.use_workers.isChecked(), layers)

    def layer_counts(self) -> tuple[int, ...]:
        """The layer count of each worker listed, in order, as typed by hand."""
        return tuple(
            int(self.model.item(row, LAYERS).data(LayerCountRole) or 0)
            for row in range(self.model.rowCount())
        )

    def set_layer_count(self, address: str, count: int) -> None:
        """Give the worker at ``address`` ``count`` layers, as its spin box does."""
        self.model.item(self._row(address), LAYERS).setData(count, LayerCountRole)

    def split_problem(self) -> str:
        """Why the split by hand cannot be used for the loaded model ("" where
        it can, or where the split is automatic): no layer for any worker,
        or more layers than the model has."""
        if not self.split_by_hand.isChecked() or not self.addresses():
            return ""
        given = sum(self.layer_counts())
        total = self._total_layers()
        if not given:
            return "The layers are split by hand: give at least one worker a layer."
        if total and given > total:
            return (
                f"The workers are given {given} layers, but the model loaded now "
                f"has {layers_text(total)}: give them {total} or fewer."
            )
        return ""

    def addresses(self) -> tuple[str, ...]:
        """The workers listed, in order."""
        return tuple(
            self.model.item(row, WORKER).text() for row in range(self.model.rowCount())
        )

    def cells(self, address: str) -> tuple[str, ...]:
        """What the row of ``address`` shows, column by column."""
        row = self._row(address)
        return tuple(
            self.model.item(row, column).text() for column in range(len(COLUMNS))
        )

    def device_lines(self, address: str) -> list[str]:
        """The lines under the row of ``address``, one per device it serves."""
        item = self.model.item(self._row(address), WORKER)
        return [
            f"{item.child(i, WORKER).text()}: {item.child(i, MEMORY).text()}"
            for i in range(item.rowCount())
        ]

    def check(self, addresses: Sequence[str] | None = None) -> None:
        """Check ``addresses`` (every worker listed by default) in the
        background, with those a check under way had yet to report."""
        self._checked_once = True
        asked = self.addresses() if addresses is None else tuple(addresses)
        in_use = self._held_by_loaded_model()
        for address in asked:
            if address in in_use:
                self._set_cell(address, STATUS, IN_USE, _GOOD)
                self._set_cell(address, MEMORY, "—")
            else:
                self._set_cell(address, STATUS, CHECKING)
                self._set_cell(address, MEMORY, "")
                self._set_devices(address, [])
                self._free.pop(address, None)
        self._show_layers()
        # A new check replaces the one under way: ask again what it had yet
        # to say.
        pending = [
            a
            for a in self.addresses()
            if a not in in_use
            and (
                self.cells(a)[STATUS] == CHECKING or self.cells(a)[MEMORY] == SURVEYING
            )
        ]
        self.progress_label.setText("Checking…" if pending else "")
        self.checker.check(pending)

    def stop(self) -> None:
        """End a check under way (the dialog is closing)."""
        self.checker.stop()

    # --- slots ----------------------------------------------------------------------

    def showEvent(self, event: QShowEvent) -> None:
        """Check the workers the first time the tab is shown."""
        super().showEvent(event)
        if not self._checked_once:
            self.check()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Enter in the address field adds the address, and goes no further."""
        if (
            watched is self.address_edit
            and isinstance(event, QKeyEvent)
            and event.type() == QEvent.Type.KeyPress
            and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        ):
            self._on_add_button_clicked()
            return True
        return super().eventFilter(watched, event)

    @Slot()
    def _on_add_button_clicked(self) -> None:
        try:
            address = worker_address(self.address_edit.text())
        except InvalidSetting as exc:  # shown inline; nothing is added
            self._refuse(str(exc))
            return
        if address in self.addresses():
            self._refuse(f"{address} is in the list already.")
            return
        self.error_label.hide()
        self.address_edit.clear()
        self._add_row(address)
        self._update_buttons()
        self.check([address])

    @Slot()
    def _on_remove_button_clicked(self) -> None:
        current = self.table.currentIndex()
        if not current.isValid():
            return
        row = current.parent().row() if current.parent().isValid() else current.row()
        self._free.pop(self.addresses()[row], None)
        self.model.removeRow(row)
        self._update_buttons()
        self._show_layers()
        self._show_split_text()

    @Slot()
    def _on_check_button_clicked(self) -> None:
        self.check()

    @Slot(str, str, str)
    def _on_checker_answered(self, address: str, status: str, detail: str) -> None:
        if address not in self.addresses():
            return  # removed meanwhile
        ready = not detail
        self._set_cell(address, STATUS, status, _GOOD if ready else _BAD, detail)
        self._set_cell(address, MEMORY, SURVEYING if ready else "—")
        self._show_detail()

    @Slot(str, object)
    def _on_checker_surveyed(self, address: str, found: list[DeviceMemory]) -> None:
        if address not in self.addresses():
            return
        free = sum(d.free_bytes for d in found)
        total = sum(d.total_bytes for d in found)
        count = f"{len(found)} device" if len(found) == 1 else f"{len(found)} devices"
        text = f"{count}: {format_bytes(free)} free of {format_bytes(total)}"
        self._set_cell(address, MEMORY, text)
        self._set_devices(address, found)
        self._free[address] = free
        self._show_layers()

    @Slot(str, str)
    def _on_checker_not_surveyed(self, address: str, why: str) -> None:
        if address in self.addresses():
            self._set_cell(address, MEMORY, NOT_SURVEYED, _BAD, why)
            self._show_detail()

    @Slot(bool)
    def _on_split_by_hand_toggled(self, by_hand: bool) -> None:
        if by_hand and not any(self.layer_counts()):
            self._fill_counts()
        self._show_split()

    @Slot(QModelIndex, QModelIndex, list)
    def _on_model_data_changed(
        self, top_left: QModelIndex, _bottom_right: QModelIndex, roles: list[int]
    ) -> None:
        if top_left.column() == LAYERS and LayerCountRole in roles:
            self._show_split_text()

    @Slot()
    def _on_checker_finished(self) -> None:
        self.progress_label.setText("")

    @Slot(QModelIndex, QModelIndex)
    def _on_table_current_row_changed(
        self, _current: QModelIndex, _previous: QModelIndex
    ) -> None:
        self._update_buttons()
        self._show_detail()

    # --- the rows -------------------------------------------------------------------

    def _add_row(self, address: str, count: int = 0) -> None:
        items = [QStandardItem(address), *(QStandardItem() for _ in COLUMNS[1:])]
        items[LAYERS].setData(count, LayerCountRole)
        self.model.appendRow(items)
        self._show_layers()
        self._show_split()

    def _row(self, address: str) -> int:
        return self.addresses().index(address)

    def _set_cell(
        self,
        address: str,
        column: int,
        text: str,
        color: QColor | None = None,
        tip: str = "",
    ) -> None:
        item = self.model.item(self._row(address), column)
        item.setText(text)
        item.setToolTip(tip)
        item.setForeground(QBrush(color) if color else QBrush())

    def _set_devices(self, address: str, found: list[DeviceMemory]) -> None:
        """One line per device under the worker's row (none while unknown),
        shown where it has several: one device says all in the row."""
        item = self.model.item(self._row(address), WORKER)
        item.removeRows(0, item.rowCount())
        for device in found:
            memory = (
                f"{format_bytes(device.free_bytes)} free of "
                f"{format_bytes(device.total_bytes)}"
            )
            item.appendRow(
                [
                    QStandardItem(f"device {device.index}"),
                    QStandardItem(),
                    QStandardItem(memory),
                    QStandardItem(),
                ]
            )
        self.table.setExpanded(item.index(), len(found) > 1)
        self.table.setRootIsDecorated(
            any(self.model.item(r).rowCount() > 1 for r in range(self.model.rowCount()))
        )

    def _refuse(self, why: str) -> None:
        self.error_label.setText(why)
        self.error_label.show()
        self.address_edit.setFocus()

    def _update_buttons(self) -> None:
        self.remove_button.setEnabled(self.table.currentIndex().isValid())
        self.check_button.setEnabled(self.model.rowCount() > 0)

    def _show_detail(self) -> None:
        """The selected worker's whole story: why it cannot be used, in full."""
        current = self.table.currentIndex()
        if not current.isValid() or current.parent().isValid():
            self.detail_label.hide()
            return
        row = current.row()
        tips = [self.model.item(row, c).toolTip() for c in (STATUS, MEMORY)]
        self.detail_label.setText("\n".join(tip for tip in tips if tip))
        self.detail_label.setVisible(bool(self.detail_label.text()))

    # --- the loaded model ----------------------------------------------------------

    def _held_by_loaded_model(self) -> dict[str, list[int]]:
        """The layers of the loaded model each worker holds, by address."""
        held: dict[str, list[int]] = {}
        loaded = self._loaded
        for holder in loaded.layer_holders if loaded else ():
            # A worker's devices are described by its address (rpc_client).
            if holder.device.startswith("RPC"):
                held.setdefault(holder.where, []).extend(holder.layers)
        return held

    def _show_layers(self) -> None:
        """Each worker's layers: those of the loaded model it holds, else its
        share of the automatic split, which gives each device layers in
        proportion to its free memory (as llama.cpp splits between GPUs)."""
        held = self._held_by_loaded_model()
        surveyed = sum(self._free.get(a, 0) for a in self.addresses())
        for address in self.addresses():
            tip = ""
            if address in held and self._loaded is not None:
                text = layer_runs(held[address], self._loaded.n_layer)
                tip = f"The layers of {self._loaded.name} this worker holds now."
            elif address in self._free and surveyed > 0:
                text = f"≈ {round(100 * self._free[address] / surveyed)} %"
                tip = (
                    "Its share of the layers, by its free memory among the "
                    "workers that answered."
                )
            else:
                text = ""
            self._set_cell(address, LAYERS, text, tip=tip)

    # --- the split -------------------------------------------------------------------

    def _total_layers(self) -> int:
        """The loaded model's layers as llama.cpp places them (the output
        layer included), or 0 where no model says."""
        return self._loaded.offloadable_layers if self._loaded else 0

    def _fill_counts(self) -> None:
        """First counts for a split by hand: the layers each worker holds
        now, where the loaded model is on them all; else the loaded model's
        layers shared evenly (the first workers one more); else none."""
        addresses = self.addresses()
        held = self._held_by_loaded_model()
        total = self._total_layers()
        if addresses and all(a in held for a in addresses):
            counts = [len(held[a]) for a in addresses]
        elif addresses and total:
            each, more = divmod(total, len(addresses))
            counts = [each + (i < more) for i in range(len(addresses))]
        else:
            return
        for address, count in zip(addresses, counts, strict=True):
            self.set_layer_count(address, count)

    def _show_split(self) -> None:
        """A spin box on each worker's Layers cell while the split is by
        hand; the model's layer count and the sum under the list."""
        by_hand = self.split_by_hand.isChecked()
        for row in range(self.model.rowCount()):
            index = self.model.index(row, LAYERS)
            if by_hand:
                self.table.openPersistentEditor(index)
            else:
                self.table.closePersistentEditor(index)
        # The rows take the spin boxes' height now, not when they were added.
        self.table.doItemsLayout()
        header = self.table.header()
        if by_hand:
            # Wide enough for the spin box, whatever the cell's text says.
            header.setSectionResizeMode(LAYERS, QHeaderView.ResizeMode.Fixed)
            header.resizeSection(LAYERS, layer_spin().sizeHint().width())
        else:
            header.setSectionResizeMode(LAYERS, QHeaderView.ResizeMode.ResizeToContents)
        self._show_split_text()

    def _show_split_text(self) -> None:
        loaded = self._loaded
        total = self._total_layers()
        known = (
            f"The model loaded now has {layers_text(total)}."
            if loaded and total
            else ""
        )
        problem = self.split_problem()
        if not self.split_by_hand.isChecked() or not self.addresses():
            text = known
        elif problem:
            text = problem
        else:
            given = sum(self.layer_counts())
            if not total:
                text = (
                    f"The workers get {given} layers, the model's last ones; this "
                    "computer keeps any before them. A model's layers are its "
                    "repeating ones and the output layer (arbor info says how many)."
                )
            elif given == total:
                text = f"{known} Every layer goes to the workers."
            else:
                kept = total - given
                which = "layer 0" if kept == 1 else f"layers 0-{kept - 1}"
                text = f"{known} The workers get {given}; this computer keeps {which}."
        self.split_label.setText(text)
        self.split_label.setStyleSheet("color: #c0392b;" if problem else "")
        self.split_label.setVisible(bool(text))

    def _placement_text(self) -> str:
        loaded = self._loaded
        if loaded is None or not self._held_by_loaded_model():
            return ""
        # The catalog's name, as the status bar shows it (general.name is
        # often a build label).
        name = shipped_catalog().name_for(loaded.path)
        return f"The model loaded now ({name}): {loaded.placement}"
