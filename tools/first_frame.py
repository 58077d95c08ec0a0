"""How long a start leaves the window black, and how long its GUI thread stalls.

A shown window is black until its first frame is painted (X11 and Wayland map
it with no background), so whatever the GUI thread does between ``show()``
and that frame is seen as a black window (issue 41). This runs ``run_gui``
itself, as ``arbor`` does, on a data folder given, in ``--runs`` fresh child
processes, and reports for each:

- **show**: ``window.show()`` itself (before the window is mapped: not black);
- **black**: from ``show()`` returning to the end of the window's first paint
  (its children's and the copy to the screen follow in the same event);
- **gap before**: the longest interval between ticks of a 10 ms timer on the
  GUI thread that began between ``show()`` and that frame;
- **gap after**: the longest one that began after it, until the model is
  loaded, the conversation restored and nothing is queued (plus ``SETTLE_S``);
- **gap at**: when that gap began, after the frame;
- **ready**: from the process's start to that point.

**black** includes the wait for the window system's expose; what the screen
shows meanwhile (the frame drawn, the inside black) is for screenshots: under
Xvfb with a window manager, ``xwd -root`` every ~100 ms shows it.

A data folder for a restart: a conversation of a few dozen messages
(``tools/window_timing.py``'s ``insert_path``), one reply to it with
``arbor send`` (checkpoints), and one start of the window (the model it
remembers)::

    .venv/bin/python tools/first_frame.py --data-dir D [--runs 5] [--busy 2]

``--busy`` runs that many CPU-bound processes meanwhile, as on a machine
doing other work; ``--verbose`` adds when the engine's jobs ended (ms after
the frame), to set the gaps beside. Any Qt platform works
(``QT_QPA_PLATFORM=offscreen``, or a ``DISPLAY``); the black phase is real
only on a platform that maps windows.
"""

from __future__ import annotations

import time

START = time.perf_counter()  # before the imports below: they are start-up too

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICK_MS = 10
SETTLE_S = 0.5
READY_TIMEOUT_S = 120
FIGURES = (
    "show_ms",
    "black_ms",
    "gap_before_ms",
    "gap_after_ms",
    "gap_at_ms",
    "ready_ms",
)


def run_child(data_dir: Path) -> dict[str, Any]:
    """Start the window on ``data_dir`` through ``run_gui``; the figures."""
    from PySide6.QtCore import QEvent, QObject, Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from app.qt import gui

    gui.keep_painting_on_the_gui_thread()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    marks: dict[str, float] = {}
    gaps: dict[str, float] = {"before": 0.0, "after": 0.0}
    gap_after_at = [0.0]  # when the longest gap after the frame began
    jobs_done: list[tuple[str, float]] = []  # the engine's, and when
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        # A gap counts where it began: one that spans the frame kept it black.
        phase = "after" if last[0] >= marks.get("frame", now) else "before"
        gap = (now - last[0]) * 1000
        if "show" in marks and "closing" not in marks and gap > gaps[phase]:
            gaps[phase] = gap
            if phase == "after":
                gap_after_at[0] = last[0]
        last[0] = now

    probe = QTimer()
    probe.setTimerType(Qt.TimerType.PreciseTimer)
    probe.setInterval(TICK_MS)
    probe.timeout.connect(tick)
    probe.start()

    class FirstPaint(QObject):
        def eventFilter(self, watched: QObject, event: QEvent) -> bool:
            if event.type() == QEvent.Type.Paint and "frame" not in marks:
                # The rest of the frame is painted and flushed in this event.
                QTimer.singleShot(0, lambda: marks.setdefault("frame", now()))
            return False

    def now() -> float:
        return time.perf_counter()

    first_paint = FirstPaint()
    build_window = gui.build_window

    def built(*args: Any, **kwargs: Any) -> Any:
        window = build_window(*args, **kwargs)
        window.installEventFilter(first_paint)
        show = window.show

        def timed_show() -> None:
            started = now()
            show()
            marks["show"] = now()
            marks["show_ms"] = (marks["show"] - started) * 1000
            last[0] = marks["show"]

        window.show = timed_show
        window.engine.finished.connect(
            lambda result: jobs_done.append((type(result.job).__name__, now()))
        )

        def poll() -> None:
            ready = window.model_info is not None and not window.engine.busy
            if ready and "ready" not in marks:
                marks["ready"] = now()
                QTimer.singleShot(int(SETTLE_S * 1000), close)
            elif now() - START > READY_TIMEOUT_S:
                close()

        def close() -> None:
            marks["closing"] = now()  # closing is not what a user waits on
            window.close()

        poller = QTimer(window)
        poller.timeout.connect(poll)
        poller.start(20)
        return window

    gui.build_window = built  # this process only: a measurement
    gui.run_gui(data_dir, None)
    del app
    if "ready" not in marks or "frame" not in marks:
        raise SystemExit("the window was not ready in time")
    return {
        "show_ms": marks["show_ms"],
        "black_ms": (marks["frame"] - marks["show"]) * 1000,
        "gap_before_ms": gaps["before"],
        "gap_after_ms": gaps["after"],
        "gap_at_ms": (gap_after_at[0] - marks["frame"]) * 1000,
        "ready_ms": (marks["ready"] - START) * 1000,
        "jobs": {
            f"{name} done at": round((at - marks["frame"]) * 1000)
            for name, at in jobs_done
        },
    }


def main() -> int:
    """Run the children and print each run's figures and their medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--busy", type=int, default=0)
    parser.add_argument(
        "--verbose", action="store_true", help="when the engine's jobs ended"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.data_dir)))
        return 0
    busy = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(args.busy)
    ]
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, __file__, "--child", "--data-dir", str(args.data_dir)],
                capture_output=True,
                text=True,
                check=False,
                cwd=ROOT,
            )
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                return 1
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        for process in busy:
            process.kill()
    print(f"{args.runs} starts, {args.busy} busy processes; ms")
    print("     " + "".join(f"{name[:-3]:>12}" for name in FIGURES))
    for i, run in enumerate(runs, start=1):
        print(f"{i:>5}" + "".join(f"{run[name]:>12.0f}" for name in FIGURES))
    if args.verbose:
        for i, run in enumerate(runs, start=1):
            print(f"{i:>5}  ms after the frame: {run['jobs']}")
    medians = [statistics.median(run[name] for run in runs) for name in FIGURES]
    print("  med" + "".join(f"{value:>12.0f}" for value in medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
