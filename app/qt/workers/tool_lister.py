"""Listing one MCP server's tools for Settings → Tools, off the GUI thread.

Starting a server and reading its tools can take seconds (``npx`` fetching a
package, a slow network): each listing runs on a Python thread of its own,
with its own ``McpClients`` closed when the listing is done, so the server
does not outlive its test.

The thread touches no Qt object. It puts its result on a queue that the GUI
thread reads on a timer, and ``listed`` is emitted there. A signal emitted
from the thread would need its emitter alive until the thread ends, but the
dialog may close, and delete the lister, while a server is still starting:
emitting on a QObject another thread is deleting is undefined in Qt, and a
PySide6 object last released on a foreign thread is the hang
``app.qt.gui_thread_gc`` describes. With the queue, a closed dialog only
leaves a result nobody reads; the thread ends on its own, within the MCP
client's timeouts (``app.mcp.config.START_TIMEOUT_S``).
"""

from __future__ import annotations

import logging
import queue
import threading

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.mcp.client import McpClients, ToolInfo
from app.mcp.config import ServerConfig
from app.mcp.errors import ToolsError

log = logging.getLogger(__name__)

# How often the GUI thread looks for results while a listing runs (ms):
# quick to the eye, and nothing at all while none runs.
POLL_MS = 50

# A thread's answer: the server's name and its tools, or why not (any other
# exception is a bug, raised again on the GUI thread).
_Result = tuple[str, list[ToolInfo] | Exception]


class ToolLister(QObject):
    """Lists MCP servers' tools in the background, one listing per server.

    Parameters
    ----------
    parent
        The Qt parent.

    Signals
    -------
    listed(str, object)
        A server's name and its tools, a ``list[ToolInfo]``, or the
        ``ToolsError`` that says why they could not be listed. Emitted on
        the GUI thread.
    """

    listed = Signal(str, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
        # The listings under way, by server name.
        self._threads: dict[str, threading.Thread] = {}
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._on_timer_timeout)

    def list_tools(self, server: ServerConfig) -> bool:
        """Start listing the tools of ``server``; the answer comes through
        ``listed``. False (and nothing done) while its listing runs."""
        if self.is_listing(server.name):
            return False
        thread = threading.Thread(
            target=_list_tools,
            args=(server, self._results),
            name=f"arbor-tools-{server.name}",
            # Never holds Arbor open: at exit McpClients closes its server.
            daemon=True,
        )
        self._threads[server.name] = thread
        thread.start()
        self._timer.start()
        return True

    def is_listing(self, name: str) -> bool:
        """Whether the tools of server ``name`` are being listed."""
        return name in self._threads

    def stop(self) -> None:
        """Report nothing more (the dialog is closing); listings under way
        end on their own, their servers closed."""
        self._timer.stop()
        self._results = queue.SimpleQueue()

    def wait(self, timeout_s: float) -> bool:
        """Wait for the listings under way to end, ``timeout_s`` in all;
        whether they did. Reports nothing (tests, and quitting)."""
        threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout_s)
        return not any(thread.is_alive() for thread in threads)

    @Slot()
    def _on_timer_timeout(self) -> None:
        found: list[_Result] = []
        while True:
            try:
                found.append(self._results.get_nowait())
            except queue.Empty:
                break
        for name, _tools in found:
            self._threads.pop(name, None)
        if not self._threads:
            self._timer.stop()
        bug: Exception | None = None
        for name, tools in found:
            if isinstance(tools, list | ToolsError):
                self.listed.emit(name, tools)
            else:
                # Still answered, so that its row does not say "starting"
                # for ever; the bug goes on to sys.excepthook (the crash
                # dialog).
                self.listed.emit(
                    name, ToolsError(f"Listing its tools failed: {tools!r}.")
                )
                bug = tools
        if bug is not None:
            raise bug


def _list_tools(server: ServerConfig, results: queue.SimpleQueue[_Result]) -> None:
    """The thread: list the tools of ``server``, close it, and say what was
    found. A plain function, not a method: the thread holds no Qt object."""
    tools: list[ToolInfo] | Exception
    try:
        with McpClients([server]) as clients:
            tools = clients.list_tools(server.name)
    except ToolsError as exc:  # for the user: the status says it
        tools = exc
    except Exception as exc:  # a bug: raised again on the GUI thread
        log.exception("Listing the tools of MCP server %r failed", server.name)
        tools = exc
    results.put((server.name, tools))
