"""What drawing a long streaming reply costs the GUI thread.

A ``TranscriptView`` (real widgets, offscreen) is fed a code-heavy Markdown
reply one 4-character piece every 10 ms, as a 100 tokens/s model would send
it, while a 5 ms timer on the same thread measures how long it ever waits.
No model: this isolates the window's drawing from the engine.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/stream_drawing.py --chars 8000

Prints the GUI thread's CPU share while streaming, the longest gap, the 99th
percentile and the number of gaps over 50 ms. The pieces are fed by a timer
on the GUI thread, so a busy thread also delays them: the wall time says how
far behind the reply's text the window fell.
"""

from __future__ import annotations

import argparse
import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.qt.views.transcript.transcript import TranscriptView

PIECE_CHARS = 4
PIECE_MS = 10
TICK_MS = 5
PROSE = (
    "Here is some **explanation** of the code, with `inline` bits and a "
    "[link](https://example.com). "
) * 3 + "\n\n"
CODE = (
    "```python\n"
    + "\n".join(
        f"def f{i}(x):\n    return x * {i} + sum(range({i}))  # comment"
        for i in range(12)
    )
    + "\n```\n\n"
)


def main() -> None:
    """Stream the reply, then print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--chars", type=int, default=8000)
    args = parser.parse_args()
    text = (PROSE + CODE) * (args.chars // len(PROSE + CODE) + 1)
    text = text[: args.chars]

    app = QApplication([])
    view = TranscriptView()
    view.resize(900, 700)
    view.show()
    app.processEvents()
    view.begin_stream("Write some code.")

    sent = 0
    gaps: list[float] = []
    last = time.perf_counter()

    def feed() -> None:
        nonlocal sent
        if sent >= len(text):
            feeder.stop()
            QTimer.singleShot(500, app.quit)  # the last drawing, then stop
            return
        view.append_stream(text[sent : sent + PIECE_CHARS])
        sent += PIECE_CHARS

    def tick() -> None:
        nonlocal last
        now = time.perf_counter()
        gaps.append((now - last) * 1000)
        last = now

    feeder = QTimer(interval=PIECE_MS, timeout=feed)
    ticker = QTimer(interval=TICK_MS, timeout=tick)
    feeder.start()
    ticker.start()
    started, cpu = time.perf_counter(), time.thread_time()
    app.exec()
    wall = time.perf_counter() - started
    cpu = time.thread_time() - cpu
    gaps.sort()
    ideal = len(text) / PIECE_CHARS * PIECE_MS / 1000
    print(
        f"{len(text)} characters in {wall:.1f} s (fed at full speed: {ideal:.1f} s): "
        f"GUI thread CPU {100 * cpu / wall:.0f}%, longest gap {gaps[-1]:.0f} ms, "
        f"p99 {gaps[int(len(gaps) * 0.99)]:.0f} ms, "
        f"gaps over 50 ms: {sum(g > 50 for g in gaps)}"
    )


if __name__ == "__main__":
    main()
