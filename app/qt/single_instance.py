"""One window per data folder: a second launch brings the first to the front.

Two windows on one database would each miss the other's writes. The first
launch takes a lock file in the data folder (``QLockFile``: a lock left by a
crashed process is detected by its pid and taken over) and listens on a local
socket named after the folder; a later launch finds the lock taken, asks the
running window over that socket to come to the front, and exits. The CLI takes
no lock: it works beside a running window (SQLite's WAL serializes writes).
"""

from __future__ import annotations

import enum
import hashlib
import os
import time
from pathlib import Path

from PySide6.QtCore import QLockFile, QObject, Signal, Slot
from PySide6.QtNetwork import QLocalServer, QLocalSocket

LOCK_FILENAME = "arbor.lock"
_ACTIVATE = b"activate\n"
_CONNECT_MS = 2000


class Claim(enum.Enum):
    """The outcome of ``SingleInstance.claim``."""

    OWNED = "owned"  # this launch is the folder's window
    HANDED_OVER = "handed_over"  # the running window was asked to come forward
    UNREACHABLE = "unreachable"  # a window holds the folder but did not answer


def server_name(data_dir: Path) -> str:
    """The local socket name for ``data_dir``: per user and per folder."""
    digest = hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]
    return f"arbor-{os.getuid() if hasattr(os, 'getuid') else 0}-{digest}"


class SingleInstance(QObject):
    """The claim of one window on a data folder.

    Signals
    -------
    activation_requested()
        A later launch on the same folder asked this window to come forward.
    """

    activation_requested = Signal()

    def __init__(self, data_dir: Path, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._name = server_name(data_dir)
        self._lock = QLockFile(str(data_dir / LOCK_FILENAME))
        self._server: QLocalServer | None = None

    def claim(self) -> Claim:
        """Become the folder's window, or hand over to the running one.

        Where no lock can be taken at all (a read-only folder) the claim is
        owned without one: a window beats no window.
        """
        if self._lock.tryLock(0):
            self._listen()
            return Claim.OWNED
        if self._lock.error() != QLockFile.LockError.LockFailedError:
            return Claim.OWNED  # no permission to lock: cannot enforce, do not refuse
        return Claim.HANDED_OVER if self._ask_running_window() else Claim.UNREACHABLE

    def release(self) -> None:
        """Stop listening and drop the lock (when the window closes)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self._lock.unlock()

    def _listen(self) -> None:
        # We hold the lock, so a socket of that name is a crashed window's.
        QLocalServer.removeServer(self._name)
        self._server = QLocalServer(self)
        self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self._server.newConnection.connect(self._on_server_new_connection)
        self._server.listen(self._name)

    def _ask_running_window(self) -> bool:
        socket = QLocalSocket()
        # The running window may have taken the lock but not be listening yet.
        deadline = time.monotonic() + _CONNECT_MS / 1000
        while True:
            socket.connectToServer(self._name)
            if socket.waitForConnected(_CONNECT_MS):
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        socket.write(_ACTIVATE)
        delivered = socket.waitForBytesWritten(_CONNECT_MS)
        socket.disconnectFromServer()
        return delivered

    @Slot()
    def _on_server_new_connection(self) -> None:
        assert self._server is not None
        while (connection := self._server.nextPendingConnection()) is not None:
            # One short message per launch: wait for it here rather than
            # keep per-connection state (the writer sends it at once).
            if connection.waitForReadyRead(_CONNECT_MS) and bytes(
                connection.readAll().data()
            ).startswith(_ACTIVATE.strip()):
                self.activation_requested.emit()
            connection.abort()
            connection.deleteLater()
