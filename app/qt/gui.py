"""Composition root of the desktop app: paths → logging → crash log → database →
engine thread → model library (download and library threads) → window.

``run_gui`` is what ``arbor`` (without a subcommand) runs; ``build_window``
is the same wiring without the event loop, for tests and the screenshot tool.
"""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from PySide6.QtCore import QEvent, QObject, QTimer, Slot
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from app.library.catalog import shipped_catalog
from app.library.installed import ModelLibrary, models_dir_for
from app.platform import paths
from app.platform.starter_model import starter_model_path
from app.platform.version import __version__
from app.preferences import load_preferences
from app.qt.gui_thread_gc import GuiThreadCollector
from app.qt.single_instance import Claim, SingleInstance
from app.qt.smoke import ENV_VAR as SMOKE_ENV_VAR
from app.qt.smoke import run_smoke_test
from app.qt.views.chrome.main_window import MainWindow
from app.qt.views.dialogs.crash import CrashDialog, install_excepthook
from app.qt.views.theme import ThemeManager, app_icon
from app.qt.workers.engine_thread import EngineController
from app.qt.workers.library_worker import ModelServices
from storage import node_rows
from storage.db import Database, open_database
from storage.errors import StorageUnavailable

log = logging.getLogger(__name__)

CRASH_LOG = "crash.log"
DESKTOP_ID = "io.github.arbor.Arbor"  # as in packaging/linux
APP_LOG = "arbor.log"
# What waits for the window's first frame runs after this long if no frame
# came (a window started minimised, a platform that never exposes it).
FIRST_FRAME_WAIT_MS = 3000

# Kept open for the life of the process: faulthandler writes to it on a crash.
_crash_file: IO[str] | None = None


def init_logging(data_dir: Path, verbose: bool = False) -> None:
    """Log to a rotating file in the data folder (and stderr when verbose)."""
    handler = logging.handlers.RotatingFileHandler(
        data_dir / APP_LOG, maxBytes=1_000_000, backupCount=2, encoding="utf-8"
    )
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    if verbose:
        root.addHandler(logging.StreamHandler(sys.stderr))


def init_faulthandler(data_dir: Path) -> str | None:
    """Send native crash reports to ``crash.log``; return the previous run's report.

    Native crashes (in llama.cpp or Qt) never reach ``sys.excepthook``, so the
    report is written by ``faulthandler`` and shown at the next start.
    """
    global _crash_file
    path = data_dir / CRASH_LOG
    previous = None
    if path.is_file() and path.stat().st_size:
        previous = path.read_text(encoding="utf-8", errors="replace")
        path.replace(path.with_suffix(".log.old"))
    _crash_file = path.open("w", encoding="utf-8")
    faulthandler.enable(_crash_file)
    return previous


def init_logs(data_dir: Path, verbose: bool) -> str | None:
    """Logs and crash reports in the data folder, or, where it cannot be
    written (read-only media), in a folder of the user's in the temp folder.

    Returns the previous run's crash report, if any.
    """
    try:
        init_logging(data_dir, verbose)
        return init_faulthandler(data_dir)
    except OSError:
        uid = os.getuid() if hasattr(os, "getuid") else 0
        fallback = Path(tempfile.gettempdir()) / f"arbor-{uid}"
        fallback.mkdir(mode=0o700, exist_ok=True)
        init_logging(fallback, verbose)
        return init_faulthandler(fallback)


def build_window(
    db: Database,
    model: Path | None,
    gpu_supported: bool | None = None,
    hub_endpoint: str | None = None,
) -> MainWindow:
    """Wire the engine thread, the model library's threads and the window on an
    open database, and start it.

    ``model`` None means: the remembered model, else the starter model, else
    the welcome page asks for one. ``gpu_supported`` None: the engine thread
    asks llama.cpp (tests say it). ``hub_endpoint`` is the Hub's address for
    tests; None uses ``HF_ENDPOINT`` or the Hub (``huggingface_hub`` reads it).
    """
    node_rows.mark_interrupted_generations(db)
    prefs = load_preferences(db)
    engine = EngineController(db)
    # The models go where ``arbor models`` puts them (ARBOR_MODELS_DIR, the
    # folder chosen in Settings, or beside the database).
    models_dir = models_dir_for(db.path.parent, prefs.models_dir)
    library = ModelLibrary(db.path.parent, models_dir, shipped_catalog())
    models = ModelServices.create(library, starter_model_path(), hub_endpoint)
    window = MainWindow(db, engine, prefs, gpu_supported, models)
    window.start(model or remembered_or_starter_model(prefs.model_path))
    return window


def remembered_or_starter_model(remembered: str | None) -> Path | None:
    """The model used last time if it still exists, else the starter model."""
    if remembered and Path(remembered).is_file():
        return Path(remembered)
    return starter_model_path()


def keep_painting_on_the_gui_thread() -> None:
    """Tell Qt not to hand fills and image conversions to its GUI thread pool.

    Qt's raster engine gives every fill of 96 rows or more to a pool of
    threads and waits for them. When the cores are busy (the model, other
    programs), each hand-off waits for a pool thread to be scheduled: with
    two other CPU-bound programs running, the window stalled up to 100 ms in
    ``QLatch::waitInternal`` under a scroll bar's paint (``perf sched``,
    gdb), for fills that take a fraction of a millisecond on the GUI thread.
    ``tools/window_timing.py --busy 2``, three runs each way: 8 gaps over
    50 ms without the pool, 17 with it. Must run before the first paint.
    """
    os.environ.setdefault("QT_NO_GUI_THREADPOOL", "1")


def run_gui(data_dir: Path | None, model: Path | None, verbose: bool = False) -> int:
    """Open the main window and run until it closes; return the exit status."""
    keep_painting_on_the_gui_thread()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationName(paths.APP_NAME)
    app.setApplicationVersion(__version__)
    # Lets Wayland match the window to the installed .desktop entry and icon.
    app.setDesktopFileName(DESKTOP_ID)
    app.setWindowIcon(app_icon())
    ThemeManager(app)
    install_excepthook()
    folder = data_dir or paths.default_data_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        QMessageBox.critical(None, "Arbor cannot start", str(exc))
        return 1
    instance = SingleInstance(folder)
    claim = instance.claim()
    if claim is Claim.HANDED_OVER:
        print(f"Arbor is already open on {folder}; brought it to the front.")
        return 0
    if claim is Claim.UNREACHABLE:
        QMessageBox.critical(
            None,
            "Arbor is already running",
            f"Another Arbor window uses {folder} but does not answer. Close it "
            "(or end its process), or start Arbor with another --data-dir.",
        )
        return 1
    try:
        previous_crash = init_logs(folder, verbose)
        db = open_database(paths.database_path(folder))
    except (StorageUnavailable, OSError) as exc:
        # Fatal at startup: explain, then exit (there is no window to return to).
        QMessageBox.critical(None, "Arbor cannot start", str(exc))
        return 1
    window = build_window(db, model)
    instance.activation_requested.connect(lambda: bring_to_front(window))
    window.show()
    # Until its first frame is painted, a shown window is black (X11 and
    # Wayland map it with no background): nothing else on the GUI thread
    # before that frame.
    after_first_frame(window, lambda: _after_first_frame(window, previous_crash))
    close_on_sigterm(window)
    if os.environ.get(SMOKE_ENV_VAR):
        run_smoke_test(window, os.environ[SMOKE_ENV_VAR])
    app.setQuitOnLastWindowClosed(True)
    collector = GuiThreadCollector(app)
    collector.start()
    try:
        status = app.exec()
    finally:
        collector.stop()
    db.close()
    instance.release()
    return status


def _after_first_frame(window: MainWindow, previous_crash: str | None) -> None:
    """What a start does once the window shows: the local server if asked for
    at start, the last run's crash report."""
    window.start_local_server_if_asked()
    if previous_crash:
        CrashDialog(
            "Arbor closed unexpectedly last time. Your conversations are saved. "
            "The report below may help fix the problem.",
            previous_crash,
            window,
        ).show()


class _FirstFrame(QObject):
    """Runs some work once, after the first paint of a window (see
    ``after_first_frame``)."""

    def __init__(self, window: QWidget, work: Callable[[], None], wait_ms: int) -> None:
        super().__init__(window)
        self._window = window
        self._work: Callable[[], None] | None = work
        # A timer of this object's own, not QTimer.singleShot with a Python
        # callable: it goes when this object goes, with nothing left behind
        # to call into a deleted object.
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._run)
        window.installEventFilter(self)
        self._timer.start(wait_ms)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self._window and event.type() == QEvent.Type.Paint:
            # The window's own paint comes first in a frame; its children's
            # and the copy to the screen follow in the same event, so a
            # zero timer runs after the frame is on screen.
            self._window.removeEventFilter(self)
            self._timer.start(0)
        return False

    @Slot()
    def _run(self) -> None:
        # Not deleteLater() afterwards: deleting this Python-made object from
        # the event loop crashed in ~QObject (3 of 6 runs of the window tests
        # under PySide6 6.11, none of 12 without it); it is a few bytes,
        # freed with its window.
        work, self._work = self._work, None
        if work is not None:
            self._timer.stop()
            self._window.removeEventFilter(self)
            work()


def after_first_frame(
    window: QWidget, work: Callable[[], None], wait_ms: int = FIRST_FRAME_WAIT_MS
) -> None:
    """Run ``work`` once ``window`` (shown, or about to be) has painted its first
    frame, or after ``wait_ms`` if it paints none.

    Work that can wait a frame goes here rather than between ``show()`` and
    the event loop: whatever runs there keeps the mapped window black.
    """
    _FirstFrame(window, work, wait_ms)


def close_on_sigterm(window: MainWindow) -> None:
    """Close the window on SIGTERM (logout, ``kill``) as Quit does.

    Python runs signal handlers only between bytecodes, never while Qt waits
    in C, so a timer lets some Python run four times a second.
    """
    signal.signal(signal.SIGTERM, lambda *_: QTimer.singleShot(0, window.close))
    wake = QTimer(window)
    wake.timeout.connect(lambda: None)
    wake.start(250)


def bring_to_front(window: MainWindow) -> None:
    """Show ``window`` above the others (a second launch asked for it)."""
    if window.isMinimized():
        window.showNormal()
    window.show()
    window.raise_()
    window.activateWindow()
