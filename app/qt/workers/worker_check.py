"""Checking ``arbor worker``s for Settings → Workers, in a child process.

A check runs ``arbor workers HOST:PORT ...`` (``app/backend/worker_survey.py``)
as a throwaway child through ``QProcess``, whose output arrives through the
GUI thread's event loop: nothing here blocks, and no thread is needed. The
child, not the window, asks each worker its hello and then registers the
ready ones to read their devices: registering a worker is what llama.cpp
aborts a process over, and the window's process must outlive any worker.
The child's lines are read as they come, so the hellos are shown before the
survey, and still shown if the survey aborts the child.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QObject, QProcess, Signal, Slot

from app.platform.launch import arbor_command

log = logging.getLogger(__name__)

# Seconds each worker has to answer: a worker on a network answers in
# milliseconds, and the user is waiting on one that does not.
HELLO_TIMEOUT_S = 3
# How long stopping a check waits for the killed child.
STOP_WAIT_MS = 5_000


@dataclass(frozen=True)
class DeviceMemory:
    """One device a worker serves, and its memory when it was surveyed."""

    index: int
    free_bytes: int
    total_bytes: int


class WorkerCheck(QObject):
    """Checks workers, one check at a time; a new one replaces the one
    under way.

    Parameters
    ----------
    parent
        The Qt parent.

    Signals
    -------
    answered(str, str, str)
        A worker's address, its status in a few words ("ready (RPC 7.0.0)",
        "nothing listens there", ...) and, where it cannot be used, why in
        full ("" when ready).
    surveyed(str, object)
        A ready worker's address and its devices, a ``list[DeviceMemory]``.
    not_surveyed(str, str)
        A ready worker's address and why its devices are not known.
    finished()
        The check is over (every worker was reported).
    """

    answered = Signal(str, str, str)
    surveyed = Signal(str, object)
    not_surveyed = Signal(str, str)
    finished = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._process: QProcess | None = None
        # What the running check has yet to report, by address.
        self._unanswered: list[str] = []
        self._unsurveyed: list[str] = []

    @property
    def running(self) -> bool:
        """Whether a check is under way."""
        return self._process is not None

    def check(self, addresses: Sequence[str]) -> None:
        """Check ``addresses`` (``HOST:PORT``, as ``worker_address`` writes
        them); the findings come through the signals."""
        self.stop()
        if not addresses:
            self.finished.emit()
            return
        self._unanswered = list(addresses)
        self._unsurveyed = []
        process = QProcess(self)
        program, *arguments = arbor_command()
        arguments += ["workers", "--timeout", str(HELLO_TIMEOUT_S), *addresses]
        process.readyReadStandardOutput.connect(self._on_process_ready_read)
        process.finished.connect(self._on_process_finished)
        process.errorOccurred.connect(self._on_process_error_occurred)
        self._process = process
        process.start(program, arguments)

    def stop(self) -> None:
        """End the check under way, if any, reporting nothing more."""
        process, self._process = self._process, None
        if process is None:
            return
        process.blockSignals(True)
        if process.state() != QProcess.ProcessState.NotRunning:
            # A worker the child had registered sees its client go: it
            # survives that (issue 25) and serves the next one.
            process.kill()
            process.waitForFinished(STOP_WAIT_MS)
        process.deleteLater()

    @Slot()
    def _on_process_ready_read(self) -> None:
        process = self._process
        if process is None:
            return
        while process.canReadLine():
            line = bytes(process.readLine().data()).decode("utf-8", "replace")
            if line.startswith("{"):  # llama.cpp may print lines of its own
                self._found(json.loads(line))

    def _found(self, finding: dict[str, object]) -> None:
        """Report one line of the child's (see ``worker_survey``)."""
        address = str(finding.get("address", ""))
        if "status" in finding and address in self._unanswered:
            self._unanswered.remove(address)
            if finding["status"] == "ready":
                self._unsurveyed.append(address)
                self.answered.emit(address, f"ready (RPC {finding['version']})", "")
            else:
                status, message = finding["status"], finding.get("message", "")
                self.answered.emit(address, str(status), str(message))
        elif address in self._unsurveyed:
            self._unsurveyed.remove(address)
            found = finding.get("devices")
            if isinstance(found, list):
                self.surveyed.emit(
                    address,
                    [
                        DeviceMemory(
                            int(d["index"]), int(d["free_bytes"]), int(d["total_bytes"])
                        )
                        for d in found
                    ],
                )
            else:
                self.not_surveyed.emit(address, str(finding.get("survey_failed", "")))

    @Slot(int, QProcess.ExitStatus)
    def _on_process_finished(
        self, _code: int, exit_status: QProcess.ExitStatus
    ) -> None:
        process = self._process
        if process is None:
            return
        self._on_process_ready_read()  # lines that came with the end
        said = bytes(process.readAllStandardError().data()).decode("utf-8", "replace")
        last = said.strip().splitlines()[-1:] or [""]
        if exit_status == QProcess.ExitStatus.CrashExit:
            # llama.cpp aborted the child: a worker went away while it was
            # being registered.
            why = "the check's process was ended by llama.cpp"
        else:
            why = last[0] or "the check ended without an answer"
        self._end(why)

    @Slot(QProcess.ProcessError)
    def _on_process_error_occurred(self, error: QProcess.ProcessError) -> None:
        process = self._process
        # A crash or a kill also reports ``finished``, which reports it.
        if process is None or error != QProcess.ProcessError.FailedToStart:
            return
        log.warning("could not run %s: %s", arbor_command(), process.errorString())
        self._end(f"the check could not start: {process.errorString()}")

    def _end(self, why: str) -> None:
        """Report what the child left unsaid, and the end of the check."""
        for address in self._unanswered:
            self.answered.emit(address, "could not be checked", why)
        for address in self._unsurveyed:
            self.not_surveyed.emit(address, why)
        self._unanswered, self._unsurveyed = [], []
        self.stop()
        self.finished.emit()
