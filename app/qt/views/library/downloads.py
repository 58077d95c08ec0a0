"""How downloads look: one line of text per state, a row per download with its
buttons, and the panel of rows the Models dialog shows.

The rows follow ``DownloadController``'s signals and read its states; their
buttons ask the controller (Pause, Resume, Cancel) or the window (Load).
A failed download offers Try again only where that can help
(``DownloadState.retry``: not after a 401, 403 or 404, nor a second
checksum mismatch), and Remove in every case.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.qt.workers.download_worker import (
    DONE,
    DOWNLOADING,
    FAILED,
    PAUSED,
    QUEUED,
    VERIFYING,
    DownloadController,
    DownloadState,
)
from app.text.quantities import format_bytes, format_duration


def show_fraction(bar: QProgressBar, fraction: float | None) -> None:
    """Show ``fraction`` (0..1) of a download on ``bar``; None: busy, with no
    measure yet (queued, checking, or a size not known)."""
    if fraction is None:
        bar.setRange(0, 0)
    else:
        bar.setRange(0, 1000)
        bar.setValue(round(fraction * 1000))


def _percent(state: DownloadState) -> str:
    fraction = state.fraction
    return (
        f"{fraction * 100:.0f}%" if fraction is not None else format_bytes(state.done)
    )


def describe_download(state: DownloadState) -> str:
    """The detail line of a download's row, e.g. "43% · 1.1 GB of 2.5 GB ·
    12 MB/s · 1 min left"."""
    if state.status == QUEUED:
        return "Waiting for the download before it"
    if state.status == VERIFYING:
        return "Checking the file (sha256)…"
    if state.status == PAUSED:
        amount = format_bytes(state.done)
        if state.total:
            amount += f" of {format_bytes(state.total)}"
        return f"Paused at {_percent(state)} ({amount})"
    if state.status == FAILED:
        return state.message
    if state.status == DONE:
        size = f" — {format_bytes(state.total)}" if state.total else ""
        return f"Downloaded and verified{size}"
    parts = [_percent(state)]
    if state.total:
        parts.append(f"{format_bytes(state.done)} of {format_bytes(state.total)}")
    parts.extend(_speed_and_time(state))
    return " · ".join(parts)


def status_text(state: DownloadState, queued: int = 0) -> str:
    """What the status bar says of the download under way, e.g. "Downloading
    Qwen3 4B — 43%, 12 MB/s, 1 min left"; ``queued`` more are waiting."""
    if state.status == VERIFYING:
        text = f"Checking {state.name}…"
    elif state.status == QUEUED:
        text = f"Waiting to download {state.name}"
    else:
        text = ", ".join(
            [f"Downloading {state.name} — {_percent(state)}", *_speed_and_time(state)]
        )
    if queued:
        text += f" (+{queued} queued)"
    return text


def _speed_and_time(state: DownloadState) -> list[str]:
    if state.status != DOWNLOADING or state.speed <= 0:
        return []
    parts = [f"{format_bytes(int(state.speed))}/s"]
    eta = state.eta_seconds
    if eta is not None:
        parts.append(f"{format_duration(eta)} left")
    return parts


class DownloadRow(QWidget):
    """One download: its name, a progress bar, a detail line and its buttons.

    Signals
    -------
    load_requested(str)
        The path of the finished model, to load.
    """

    load_requested = Signal(str)

    def __init__(
        self, controller: DownloadController, key: str, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("DownloadRow")
        self.key = key
        self._controller = controller
        self.name_label = QLabel()
        self.name_label.setObjectName("DownloadName")
        self.progress = QProgressBar()
        self.progress.setTextVisible(False)
        self.progress.setFixedHeight(8)
        self.detail_label = QLabel()
        self.detail_label.setObjectName("PanelHint")
        self.detail_label.setTextFormat(Qt.TextFormat.PlainText)
        # Wrapped: a failure's line is long, and must not widen the dialog.
        self.detail_label.setWordWrap(True)
        self.pause_button = QPushButton("Pause")
        self.pause_button.clicked.connect(self._on_pause_button_clicked)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        self.load_button = QPushButton("Load")
        self.load_button.clicked.connect(self._on_load_button_clicked)
        text = QVBoxLayout()
        text.setSpacing(2)
        text.addWidget(self.name_label)
        text.addWidget(self.progress)
        text.addWidget(self.detail_label)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 2)
        layout.addLayout(text, 1)
        for button in (self.pause_button, self.cancel_button, self.load_button):
            layout.addWidget(button, 0, Qt.AlignmentFlag.AlignVCenter)
        self.update_state()

    def update_state(self) -> None:
        """Show the download's state as the controller has it now."""
        state = self._controller.state(self.key)
        if state is None:
            return
        self.name_label.setText(state.name)
        self.name_label.setToolTip(state.key)
        self.detail_label.setText(describe_download(state))
        self.detail_label.setToolTip(describe_download(state))
        self.detail_label.setProperty("failed", state.status == FAILED)
        waiting = state.status in (QUEUED, VERIFYING)
        fraction = state.fraction
        if fraction is None and state.status != DOWNLOADING:
            fraction = 0.0  # paused or failed before a size was known
        show_fraction(self.progress, None if waiting else fraction)
        finished = state.status == DONE
        failed = state.status == FAILED
        # Resume after a failure that will not pass would fail again at once.
        self.pause_button.setVisible(not finished and (not failed or state.retry))
        self.pause_button.setText(
            "Pause" if state.active else "Try again" if failed else "Resume"
        )
        self.pause_button.setToolTip(
            "Ask the Hub again; what was downloaded is kept" if failed else ""
        )
        self.cancel_button.setVisible(not finished)
        # Failed, nothing runs to cancel: what is left is removing it.
        self.cancel_button.setText("Remove" if failed else "Cancel")
        self.cancel_button.setToolTip(
            "Forget this download and delete what it fetched" if failed else ""
        )
        self.progress.setVisible(state.status not in (DONE, FAILED))
        self.load_button.setVisible(finished)
        # Removed since (Installed → Remove): nothing to load any more.
        self.load_button.setEnabled(
            state.path is not None and Path(state.path).is_file()
        )

    @Slot()
    def _on_pause_button_clicked(self) -> None:
        state = self._controller.state(self.key)
        if state is not None and state.active:
            self._controller.pause(self.key)
        else:
            self._controller.resume(self.key)
        self.update_state()

    @Slot()
    def _on_cancel_button_clicked(self) -> None:
        self._controller.cancel(self.key)

    @Slot()
    def _on_load_button_clicked(self) -> None:
        state = self._controller.state(self.key)
        if state is not None and state.path:
            self.load_requested.emit(state.path)


class DownloadsPanel(QWidget):
    """Every download the window knows of, newest last; hidden when none.

    Signals
    -------
    load_requested(str)
        A finished download's Load was clicked: the model's path.
    """

    load_requested = Signal(str)

    def __init__(
        self, controller: DownloadController, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("DownloadsPanel")
        self._controller = controller
        self.rows: dict[str, DownloadRow] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        title = QLabel("Downloads")
        title.setObjectName("PanelTitle")
        layout.addWidget(title)
        self._rows_layout = QVBoxLayout()
        self._rows_layout.setSpacing(4)
        layout.addLayout(self._rows_layout)
        controller.download_queued.connect(self._on_controller_download_queued)
        controller.download_started.connect(self._on_controller_download_started)
        controller.download_progressed.connect(self._on_controller_download_progressed)
        controller.download_finished.connect(self._on_controller_download_ended)
        controller.download_failed.connect(self._on_controller_download_ended)
        controller.download_stopped.connect(self._on_controller_download_stopped)
        for state in controller.downloads():
            self._add_row(state.key)
        self.setVisible(bool(self.rows))

    def _add_row(self, key: str) -> DownloadRow:
        row = self.rows.get(key)
        if row is None:
            row = DownloadRow(self._controller, key)
            row.load_requested.connect(self.load_requested)
            self.rows[key] = row
            self._rows_layout.addWidget(row)
            self.show()
        row.update_state()
        return row

    @Slot(str)
    def _on_controller_download_queued(self, key: str) -> None:
        self._add_row(key)

    def _update_row(self, key: str) -> None:
        row = self.rows.get(key)
        if row is not None:
            row.update_state()

    @Slot(str)
    def _on_controller_download_started(self, key: str) -> None:
        self._update_row(key)

    @Slot(str, "qint64", "qint64", float, str)
    def _on_controller_download_progressed(
        self, key: str, _done: int, _total: int, _speed: float, _phase: str
    ) -> None:
        self._update_row(key)

    @Slot(str, str)
    def _on_controller_download_ended(self, key: str, _path_or_message: str) -> None:
        self._update_row(key)

    @Slot(str, bool)
    def _on_controller_download_stopped(self, key: str, paused: bool) -> None:
        row = self.rows.get(key)
        if row is None:
            return
        if paused:
            row.update_state()
            return
        # Cancelled: the download and its part are gone, and so is its row.
        del self.rows[key]
        row.hide()
        row.deleteLater()
        self.setVisible(bool(self.rows))
