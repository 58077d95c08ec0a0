"""``LocalServerDialog``: Tools → Local server. Start and stop the
OpenAI-compatible API, copy its base URL, watch its requests.

The dialog is not modal: the server keeps running when it is closed, and
the window stays usable (a request queues behind the window's own work on
the one engine, and the status bar says when one is served).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.preferences import LocalServerPrefs
from app.qt.local_server import LocalServerController
from app.qt.views.dialogs.errors import show_error
from app.server.serve import Listen, ServeError, is_loopback

# Lines of the request log kept on screen.
_LOG_LINES = 500


class LocalServerDialog(QDialog):
    """The local server's switch, address, URL and request log.

    ``prefs`` fills the address; ``remember`` is told of the address of a
    server started, and of the "start with Arbor" switch, to keep them.
    """

    def __init__(
        self,
        server: LocalServerController,
        prefs: LocalServerPrefs,
        remember: Callable[[LocalServerPrefs], None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Local server")
        self._server = server
        self._prefs = prefs
        self._remember = remember
        self.host_edit = QLineEdit(prefs.host)
        self.port_spin = QSpinBox()
        self.port_spin.setRange(1, 65535)
        self.port_spin.setValue(prefs.port)
        self.key_edit = QLineEdit()
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText(
            "required for an address other than 127.0.0.1 (not stored)"
        )
        self.at_start_check = QCheckBox("Start serving when Arbor starts")
        self.at_start_check.setToolTip(
            "On this computer's own address (127.0.0.1) only: the API key "
            "another address needs is not stored"
        )
        self.at_start_check.setChecked(prefs.at_start)
        self.at_start_check.toggled.connect(self._on_at_start_check_toggled)
        self.url_edit = QLineEdit()
        self.url_edit.setReadOnly(True)
        self.url_edit.setPlaceholderText("not serving")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setToolTip("Copy the base URL for an OpenAI client")
        self.copy_button.clicked.connect(self._copy_url)
        self.switch_button = QPushButton()
        self.switch_button.clicked.connect(self._switch)
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(_LOG_LINES)
        self.log_view.setPlaceholderText("Requests appear here as they come.")

        form = QFormLayout()
        form.addRow("Address:", self.host_edit)
        form.addRow("Port:", self.port_spin)
        form.addRow("API key:", self.key_edit)
        form.addRow("", self.at_start_check)
        url_row = QHBoxLayout()
        url_row.addWidget(self.url_edit, 1)
        url_row.addWidget(self.copy_button)
        form.addRow("Base URL:", url_row)
        note = QLabel(
            "OpenAI-compatible: point a client (an editor, an agent, Open WebUI) "
            "at the base URL. Each request continues from the conversation tree, "
            "so what was decoded before is restored, not read again."
        )
        note.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        layout = QVBoxLayout(self)
        layout.addWidget(note)
        layout.addLayout(form)
        layout.addWidget(self.switch_button)
        layout.addWidget(QLabel("Requests:"))
        layout.addWidget(self.log_view, 1)
        layout.addWidget(buttons)
        self.resize(560, 460)

        server.request_logged.connect(self._log)
        server.running_changed.connect(self._show_state)
        self._show_state(server.url or "")

    @Slot()
    def _switch(self) -> None:
        if self._server.url is not None:
            self._server.stop()
            return
        host = self._host()
        key = self.key_edit.text().strip() or None
        try:
            self._server.start(Listen(host, self.port_spin.value(), key))
        except ServeError as exc:
            show_error(self, "Could not start the local server", str(exc))
            return
        self._keep(LocalServerPrefs(host, self.port_spin.value(), self._prefs.at_start))

    @Slot(bool)
    def _on_at_start_check_toggled(self, checked: bool) -> None:
        host = self._host()
        self._keep(LocalServerPrefs(host, self.port_spin.value(), checked))

    def _host(self) -> str:
        return self.host_edit.text().strip() or LocalServerPrefs.host

    def _keep(self, prefs: LocalServerPrefs) -> None:
        if prefs != self._prefs:
            self._prefs = prefs
            self._remember(prefs)

    @Slot(str)
    def _show_state(self, url: str) -> None:
        serving = bool(url)
        self.url_edit.setText(url)
        self.copy_button.setEnabled(serving)
        self.switch_button.setText("Stop serving" if serving else "Start serving")
        for edit in (self.host_edit, self.port_spin, self.key_edit):
            edit.setEnabled(not serving)
        if serving and not is_loopback(self._host()):
            self._log(f"Serving {url} to other machines (API key required).")

    @Slot(str)
    def _log(self, line: str) -> None:
        self.log_view.appendPlainText(line)

    @Slot()
    def _copy_url(self) -> None:
        clipboard = QGuiApplication.clipboard()
        if clipboard is not None and self.url_edit.text():
            clipboard.setText(self.url_edit.text())
