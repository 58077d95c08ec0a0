"""``StorageDialog``: checkpoint sizes, the database location, budget, clearing.

Checkpoints are a cache (a node's tokens are always kept), so evicting or
clearing them never loses a message: those nodes are reprocessed when needed.
Evicting and clearing are jobs for the engine worker, which owns every write
and may hold those checkpoints' conversation; the dialog reads the sizes
again when its job is done.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import jobs
from app.jobs.results import JobResult
from app.qt.views.dialogs.errors import confirm, show_error
from app.qt.workers.engine_thread import EngineController
from app.text.quantities import format_bytes
from storage import checkpoint_rows, conversation_rows
from storage.db import Database
from storage.errors import StorageUnavailable


class StorageDialog(QDialog):
    """Where the data is and what checkpoints cost; ``budget_mb`` is the result.

    Parameters
    ----------
    db
        The open database (read here).
    engine
        Where the evicting and clearing jobs go (their failures are reported
        by the window, as every job's).
    budget_mb
        The current checkpoint budget in MB (0: no limit).
    parent
        The Qt parent.
    """

    def __init__(
        self,
        db: Database,
        engine: EngineController,
        budget_mb: int,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("StorageDialog")
        self.setWindowTitle("Storage")
        self.resize(600, 460)
        self._db = db
        self._engine = engine
        self._job: jobs.Job | None = None  # the job submitted and not yet done
        engine.finished.connect(self._on_engine_finished)
        layout = QVBoxLayout(self)
        form = QFormLayout()
        location = QLabel(str(db.path))
        location.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        form.addRow("Database", location)
        self.total_label = QLabel()
        form.addRow("Checkpoints in total", self.total_label)
        budget_row = QHBoxLayout()
        self.budget = QSpinBox()
        self.budget.setRange(0, 1_000_000)
        self.budget.setSuffix(" MB")
        self.budget.setSpecialValueText("no limit")
        self.budget.setValue(budget_mb)
        budget_row.addWidget(self.budget)
        self.apply_button = QPushButton("Evict down to budget now")
        self.apply_button.clicked.connect(self._on_apply_button_clicked)
        budget_row.addWidget(self.apply_button)
        budget_row.addStretch(1)
        form.addRow("Checkpoint budget", budget_row)
        layout.addLayout(form)
        note = QLabel(
            "Past the budget, the least recently used checkpoints are deleted after "
            "each reply. "
            "Messages are never deleted: a message without a checkpoint is reprocessed "
            "(slower) the next time it is needed."
        )
        note.setObjectName("PanelHint")
        note.setWordWrap(True)
        layout.addWidget(note)

        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(
            ["Conversation", "Messages", "Checkpoints"]
        )
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.horizontalHeader().setSectionResizeMode(
            0, QHeaderView.ResizeMode.Stretch
        )
        layout.addWidget(self.table, 1)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        self.clear_button = buttons.addButton(
            "Clear checkpoints…", QDialogButtonBox.ButtonRole.DestructiveRole
        )
        self.clear_button.clicked.connect(self._on_clear_button_clicked)
        buttons.rejected.connect(self.accept)
        layout.addWidget(buttons)
        self.refresh()

    @property
    def budget_mb(self) -> int:
        """The budget chosen, in MB (0: no limit)."""
        return self.budget.value()

    def refresh(self) -> None:
        """Re-read the sizes from the database."""
        try:
            total = checkpoint_rows.total_checkpoint_bytes(self._db)
            conversations = conversation_rows.list_conversations(self._db)
        except StorageUnavailable as exc:
            show_error(self, "Cannot read the database", str(exc))
            return
        self.total_label.setText(format_bytes(total))
        self.table.setRowCount(len(conversations))
        for row, record in enumerate(conversations):
            size = QTableWidgetItem(format_bytes(record.checkpoint_bytes))
            size.setTextAlignment(
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
            )
            count = QTableWidgetItem(str(max(0, record.node_count - 1)))
            count.setTextAlignment(
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
            )
            self.table.setItem(row, 0, QTableWidgetItem(record.title))
            self.table.setItem(row, 1, count)
            self.table.setItem(row, 2, size)

    @property
    def working(self) -> bool:
        """Whether an eviction or a clearing is under way."""
        return self._job is not None

    @Slot()
    def _on_apply_button_clicked(self) -> None:
        if self.budget_mb != 0:
            self._submit(jobs.EvictCheckpoints(self.budget_mb * 1024 * 1024))

    @Slot()
    def _on_clear_button_clicked(self) -> None:
        if confirm(
            self,
            "Clear checkpoints",
            "Delete every checkpoint? No message is lost; conversations will be "
            "reprocessed (slower) the next time they are opened.",
            "Clear checkpoints",
        ):
            self._submit(jobs.ClearCheckpoints())

    def _submit(self, job: jobs.Job) -> None:
        self._job = job
        for button in (self.apply_button, self.clear_button):
            button.setEnabled(False)
        self._engine.submit(job)

    @Slot(object)
    def _on_engine_finished(self, result: JobResult) -> None:
        if result.job is not self._job:
            return  # another job of the window's
        self._job = None
        for button in (self.apply_button, self.clear_button):
            button.setEnabled(True)
        self.refresh()
