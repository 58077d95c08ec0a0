"""How fast the window is ready, and how long its GUI thread ever waits.

A 5 ms timer runs on the GUI thread of the real window (real engine thread,
real SQLite, the starter model by default); every gap between two of its ticks
longer than 5 ms is time the window could not answer the user. The run goes
through what a session does:

1. **loading**: from the window's first frame (built, shown, laid out and
   painted once: a gap by nature, reported as its own figure) to the model
   loaded and the last conversation restored and ready (a conversation with
   checkpoints is prepared beforehand through the CLI);
2. **streaming**: three messages, each answered with up to 200 tokens;
3. **switching**: twenty clicks between two sibling replies.

Gaps over 35 ms are then set beside the replies' starts and ends: whether
each overlaps one or began within 40 ms after one (where the window and the
engine both have work) or fell elsewhere (mid-reply: the scheduler); and
the GUI thread's CPU time in the presenter's work at each reply's start and
end is reported.

It runs twice: on the machine as it is, and with ``--busy`` (default 2)
CPU-bound processes running meanwhile, as on a machine doing other work::

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/window_timing.py
    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/window_timing.py --busy 0

``--messages``, ``--tokens``, ``--switches`` and ``--only`` make a shorter run
while working on it; the defaults are what the performance issue measures.

``--transcript`` measures something else, with no model at all: the GUI
thread's CPU time to show a conversation whose path has 10 and 1,000
messages (and ``--paths`` others), twice each as a user goes back and forth
between them, then to scroll the long one to its top, page down a few
screens and come back to its end (a conversation stays readable without a
model, so no engine work competes). A first show happens once per process,
so it runs ``--runs`` fresh processes (5) and prints each step's median::

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/window_timing.py --transcript

The window work runs in a child process of this script (``--child``), so
that each run starts cold, as a user's launch does.
"""

from __future__ import annotations

import time

START = time.perf_counter()  # before the imports below: they are start-up too

import argparse  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICK_MS = 5
# Gaps this long are set beside the replies' starts and ends: within
# NEAR_REPLY_MS of one, the window's or the engine's work there is the suspect.
LONG_GAP_MS = 35
NEAR_REPLY_MS = 40
# Phases timed but not reported: the first frame has a figure of its own, and
# closing the window is not what a user waits on.
UNREPORTED = ("first frame", "closing")
REPLY_TOKENS = 200
SWITCHES = 20
MESSAGES = (
    "Tell me about the history of trees in gardens.",
    "Which trees grow fastest in a cold climate?",
    "Write a short poem about an oak tree.",
)


# --- the child: the window ------------------------------------------------------


class GapMeter:
    """Records the gaps between ticks of a 5 ms timer, per phase, and the
    long ones with the time they ended (to set beside the replies' ends)."""

    def __init__(self) -> None:
        from PySide6.QtCore import Qt, QTimer

        self.phase = "first frame"
        self.gaps: dict[str, list[float]] = {}
        self.long_gaps: list[tuple[float, float]] = []  # (ended at, ms)
        self._last = time.perf_counter()
        self._timer = QTimer()
        self._timer.setTimerType(Qt.TimerType.PreciseTimer)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._tick)
        self._timer.start()

    def restart(self, phase: str) -> None:
        """Count gaps from now on, in ``phase``."""
        self.phase = phase
        self._last = time.perf_counter()

    def _tick(self) -> None:
        now = time.perf_counter()
        gap = (now - self._last) * 1000
        self.gaps.setdefault(self.phase, []).append(gap)
        if gap > LONG_GAP_MS and self.phase not in UNREPORTED:
            self.long_gaps.append((now, gap))
        self._last = now


class ReplyMarks:
    """When each reply was asked for and when the window heard it was done."""

    def __init__(self, engine: Any) -> None:
        from app import jobs

        self.marks: list[tuple[float, str]] = []
        submit = engine.submit

        def submitted(job: Any) -> None:
            if isinstance(job, jobs.Generating):
                self.marks.append((time.perf_counter(), "start"))
            submit(job)

        engine.submit = submitted  # this process's window only: a measurement
        engine.finished.connect(
            lambda result: (
                self.marks.append((time.perf_counter(), "end"))
                if isinstance(result.job, jobs.Generating)
                else None
            )
        )

    def near(self, ended_at: float, gap_ms: float) -> str | None:
        """ "start" or "end" if a gap that ended at ``ended_at`` overlaps a
        reply's start or end, or began within ``NEAR_REPLY_MS`` after one."""
        began = ended_at - gap_ms / 1000
        for mark, kind in self.marks:
            if began - NEAR_REPLY_MS / 1000 <= mark <= ended_at:
                return kind
        return None


class PresenterWork:
    """The GUI thread's CPU time in the presenter's work at each reply's start
    (cards for the question and the reply) and end (tree, path, list)."""

    def __init__(self, presenter: Any) -> None:
        self.ms: dict[str, list[float]] = {"start": [], "end": []}
        reply = presenter.reply  # app/window/reply_in_flight.py: begins and ends it
        for name, kind in (("begin", "start"), ("end", "end")):
            setattr(reply, name, self._timed(getattr(reply, name), kind))

    def _timed(self, work: Callable[..., None], kind: str) -> Callable[..., None]:
        def timed(*args: Any) -> None:
            started = time.thread_time()
            work(*args)
            self.ms[kind].append((time.thread_time() - started) * 1000)

        return timed


def _wait_until(condition: Callable[[], bool], timeout_s: float = 900) -> None:
    from PySide6.QtCore import QEventLoop, QTimer

    deadline = time.monotonic() + timeout_s
    loop = QEventLoop()
    poll = QTimer()
    poll.setInterval(10)
    poll.timeout.connect(
        lambda: loop.quit() if condition() or time.monotonic() > deadline else None
    )
    poll.start()
    if not condition():
        loop.exec()
    poll.stop()
    if not condition():
        raise TimeoutError("the window did not get there in time")


def run_child(data_dir: Path, messages: int, switches: int) -> dict[str, object]:
    """Open the window on ``data_dir``, send ``messages`` messages, regenerate
    the last reply and switch ``switches`` times; the figures."""
    from PySide6.QtWidgets import QApplication

    from app.platform.paths import database_path
    from app.qt.gui import build_window, keep_painting_on_the_gui_thread
    from storage.db import open_database

    keep_painting_on_the_gui_thread()  # as run_gui does
    app = QApplication.instance() or QApplication([])
    meter = GapMeter()
    db = open_database(database_path(data_dir))
    window = build_window(db, None, gpu_supported=False)
    marks = ReplyMarks(window.engine)
    work = PresenterWork(window.presenter)
    window.show()
    app.processEvents()  # laid out and painted once
    first_frame_ms = (time.perf_counter() - START) * 1000
    meter.restart("loading")

    def idle() -> bool:
        return not window.engine.busy and not window.generating

    def ready() -> bool:
        return window.model_info is not None and window.active_id is not None

    _wait_until(lambda: ready() and idle())
    ready_ms = (time.perf_counter() - START) * 1000

    meter.phase = "streaming"
    for text in (MESSAGES * messages)[:messages]:
        window.composer.edit.setPlainText(text)
        window.send_action.trigger()
        _wait_until(lambda: window.generating)
        _wait_until(idle)
    last_reply = window.active_id
    window.presenter.regenerate(last_reply)
    _wait_until(lambda: window.generating)
    _wait_until(idle)
    sibling = window.active_id

    meter.phase = "switching"
    for i in range(switches):
        window.activate(last_reply if i % 2 == 0 else sibling)
        _wait_until(idle)

    meter.phase = "closing"
    window.close()
    db.close()
    app.processEvents()
    where: dict[str, list[float]] = {"start": [], "end": [], "elsewhere": []}
    for at, gap in meter.long_gaps:
        where[marks.near(at, gap) or "elsewhere"].append(gap)
    return {
        "first_frame_ms": first_frame_ms,
        "ready_ms": ready_ms,
        "long_gaps": where,
        "presenter_ms": work.ms,
        "gaps": {
            phase: gaps for phase, gaps in meter.gaps.items() if phase not in UNREPORTED
        },
    }


# --- the child: the transcript of long paths --------------------------------------

# How long the window is left to finish what showing posted (layouts, paints,
# timers), and how often it looks in meanwhile.
SETTLE_S = 0.6
PAGES = 5
PROSE = (
    "the tree grows slowly in a cold climate and its roots go deep into the "
    "soil where water stays through the summer months while leaves fall"
)


def conversation_texts(messages: int, seed: int = 7) -> list[tuple[str, str]]:
    """``messages`` (role, Markdown) pairs, questions and answers in turn: short
    questions, answers of a few paragraphs with now a list, now a code block."""
    import random

    rng = random.Random(seed)
    words_of = PROSE.split()

    def sentence(words: int) -> str:
        text = " ".join(rng.choice(words_of) for _ in range(words))
        return text[0].upper() + text[1:] + "."

    texts = []
    for i in range(messages):
        if i % 2 == 0:
            texts.append(("user", sentence(rng.randint(5, 30))))
            continue
        parts = [
            " ".join(sentence(rng.randint(8, 20)) for _ in range(rng.randint(2, 5)))
            for _ in range(rng.randint(1, 4))
        ]
        if rng.random() < 0.3:
            parts.append(
                "\n".join(f"- **{sentence(3)}** {sentence(8)}" for _ in range(4))
            )
        if rng.random() < 0.2:
            code = "\n".join(f"def f{j}(x):\n    return x * {j}" for j in range(6))
            parts.append(f"```python\n{code}\n```")
        texts.append(("assistant", "\n\n".join(parts)))
    return texts


def insert_path(db: Any, messages: int) -> int:
    """A conversation whose one path holds ``messages`` messages; its id."""
    from storage.conversation_rows import NewNode, insert_conversation
    from storage.values import Role

    nodes = [NewNode(key=0, parent_key=None, role=Role.ROOT, text="")]
    for i, (role, text) in enumerate(conversation_texts(messages), start=1):
        nodes.append(NewNode(key=i, parent_key=i - 1, role=Role(role), text=text))
    record, _ids = insert_conversation(
        db,
        title=f"{messages} messages",
        system_prompt=None,
        reasoning=None,
        created_at=None,
        nodes=nodes,
        active_key=messages,
    )
    return record.id


def _settled_cpu_ms(app: Any, work: Callable[[], None]) -> float:
    """The GUI thread's CPU time in ``work`` and in what it left to the event
    loop (layouts, paints), in milliseconds."""
    from PySide6.QtCore import QCoreApplication, QEvent

    started = time.thread_time()
    work()
    until = time.monotonic() + SETTLE_S
    while time.monotonic() < until:
        app.processEvents()
        # Outside an event loop's exec() nothing deletes what deleteLater
        # left; a running window would have.
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        time.sleep(0.005)
    return (time.thread_time() - started) * 1000


class CpuShares:
    """The GUI thread's CPU time in some of the window's methods, by name:
    how much of a step the transcript and the tree took."""

    def __init__(self, methods: dict[str, tuple[Any, str]]) -> None:
        self.ms: dict[str, float] = dict.fromkeys(methods, 0.0)
        for label, (owner, name) in methods.items():
            # An attribute of this one object, which its callers look up.
            setattr(owner, name, self._timed(getattr(owner, name), label))

    def _timed(self, work: Callable[..., Any], label: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time()
            try:
                return work(*args, **kwargs)
            finally:
                self.ms[label] += (time.thread_time() - started) * 1000

        return timed

    def take(self) -> dict[str, float]:
        """The times since the last ``take``."""
        taken, self.ms = self.ms, dict.fromkeys(self.ms, 0.0)
        return taken


class GcTime:
    """The GUI thread's CPU time in Python's garbage collector: a full
    collection walks every object, and with a window's worth of them it takes
    tens of milliseconds wherever it happens to fall."""

    def __init__(self) -> None:
        import gc

        self.ms = 0.0
        self._started = 0.0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time()
        else:
            self.ms += (time.thread_time() - self._started) * 1000

    def take(self) -> float:
        """The time since the last ``take``."""
        taken, self.ms = self.ms, 0.0
        return taken


def _no_model(remembered: str | None) -> Path | None:
    """No model at all, whatever was used last (the timing's stand-in for
    ``app.qt.gui.remembered_or_starter_model``)."""
    del remembered
    return None


def run_transcript_child(paths: list[int]) -> dict[str, object]:
    """Show conversations with ``paths`` messages in a window with no model;
    the GUI thread's CPU time for each step, and the cards made."""
    from PySide6.QtWidgets import QApplication

    import app.qt.gui
    from app.platform.paths import database_path
    from app.qt.gui import build_window, keep_painting_on_the_gui_thread
    from app.qt.views.transcript.message_card import MessageCard
    from storage.db import open_database

    keep_painting_on_the_gui_thread()
    qt_app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as folder:
        db = open_database(database_path(Path(folder)))
        conversations = {n: insert_path(db, n) for n in paths}
        insert_path(db, 2)  # the most recent: the window opens on it
        # No model: nothing loads, and a conversation stays readable.
        app.qt.gui.remembered_or_starter_model = _no_model
        window = build_window(db, None, gpu_supported=False)
        window.resize(1280, 800)
        window.show()
        transcript = window.transcript
        shares = CpuShares(
            {
                "transcript": (transcript, "show_path"),
                "tree (set_snapshot)": (window.tree_model, "set_snapshot"),
                "tree (set_active)": (window.tree_model, "set_active"),
            }
        )
        collector = GcTime()
        steps: list[dict[str, object]] = []

        def step(label: str, work: Callable[[], None]) -> None:
            shares.take()
            collector.take()
            ms = _settled_cpu_ms(qt_app, work)
            cards = len(transcript.findChildren(MessageCard))
            steps.append(
                {
                    "step": label,
                    "ms": ms,
                    "cards": cards,
                    "gc": collector.take(),
                    **shares.take(),
                }
            )

        # The window's start settles first: measured at once, what it still
        # paints and lays out would count as the idle loop's own cost.
        _settled_cpu_ms(qt_app, lambda: None)
        step("idle (nothing done)", lambda: None)
        for attempt in ("first", "again"):
            for n in paths:
                step(
                    f"show {n:,} messages ({attempt})",
                    functools.partial(window.show_conversation, conversations[n]),
                )
        bar = transcript.verticalScrollBar()
        step("scroll to the top", lambda: bar.setValue(0))
        for i in range(PAGES):
            step(
                f"page down ({i + 1})",
                lambda: bar.setValue(bar.value() + bar.pageStep()),
            )
        step("middle (drag to half)", lambda: bar.setValue(bar.maximum() // 2))
        step("jump to the end", lambda: bar.setValue(bar.maximum()))
        at_end = bar.value() == bar.maximum()
        window.close()
        db.close()
        qt_app.processEvents()
    return {"steps": steps, "at_end": at_end}


def _transcript_run(paths: list[int]) -> dict[str, object]:
    """One ``run_transcript_child`` in a fresh process: its figures."""
    result = subprocess.run(
        [
            sys.executable,
            __file__,
            "--transcript-child",
            "--paths",
            ",".join(map(str, paths)),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        env={"QT_QPA_PLATFORM": "offscreen", **os.environ},
    )
    figures: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def report_transcript(paths: list[int], runs: int) -> None:
    """Run ``run_transcript_child`` in ``runs`` fresh processes, one after
    another, and print the median of each step (and its range)."""
    results = [_transcript_run(paths) for _ in range(runs)]
    steps_of_runs: list[list[dict[str, Any]]] = [r["steps"] for r in results]  # type: ignore[misc]
    print(f"\n### transcript of long paths (no model), median of {runs} runs\n")
    print(
        "| step | GUI-thread CPU (ms) | less idle | less idle, range "
        "| in the transcript's show_path | in the tree model | in Python's GC "
        "| message cards alive |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    median = statistics.median
    for at, row in enumerate(steps_of_runs[0]):
        same = [steps[at] for steps in steps_of_runs]
        beyond_idle = [
            s["ms"] - steps[0]["ms"]
            for s, steps in zip(same, steps_of_runs, strict=True)
        ]
        tree = [s["tree (set_snapshot)"] + s["tree (set_active)"] for s in same]
        print(
            f"| {row['step']} | {median(s['ms'] for s in same):,.0f} "
            f"| {median(beyond_idle):,.0f} "
            f"| {min(beyond_idle):,.0f} to {max(beyond_idle):,.0f} "
            f"| {median(s['transcript'] for s in same):,.0f} "
            f"| {median(tree):,.0f} "
            f"| {median(s['gc'] for s in same):,.0f} | {row['cards']} |"
        )
    ends = {bool(r["at_end"]) for r in results}
    print(
        f"\nEach figure includes {SETTLE_S:.1f} s of the event loop after the step "
        f"(layouts, paints, timers; the idle row: that loop alone, which the "
        f"next column takes away). At the end after the jump: {ends == {True}}."
    )


# --- the parent: preparing, loading the machine, reporting -----------------------


def _arbor(data_dir: Path, *args: str) -> dict[str, object]:
    result = subprocess.run(
        [sys.executable, "-m", "app", "--data-dir", str(data_dir), *args],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


def prepare(data_dir: Path, reply_tokens: int) -> None:
    """A conversation with a few checkpointed turns, for the window to reopen,
    and replies of up to ``reply_tokens`` tokens in the window."""
    from app.platform.paths import database_path
    from app.preferences import load_preferences, save_preferences
    from storage.db import open_database

    node = _arbor(data_dir, "new", "--system", "You are a helpful assistant.")["node"]
    for text in ("Hello! Who are you?", "What can you help me with?"):
        reply = _arbor(data_dir, "send", str(node), text, "--max-tokens", "64")
        node = reply["assistant_node"]
    db = open_database(database_path(data_dir))
    prefs = load_preferences(db)
    sampling = replace(prefs.sampling, max_tokens=reply_tokens)
    save_preferences(db, replace(prefs, sampling=sampling))
    db.close()


def _busy_processes(count: int) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(count)
    ]


def _run_once(
    data_dir: Path, busy: int, messages: int, switches: int
) -> dict[str, object]:
    hogs = _busy_processes(busy)
    try:
        result = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(data_dir),
                "--messages",
                str(messages),
                "--switches",
                str(switches),
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
            env={"QT_QPA_PLATFORM": "offscreen", **os.environ},
        )
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    return json.loads(result.stdout.strip().splitlines()[-1])


def _listed(gaps: list[float]) -> str:
    return ", ".join(f"{gap:.0f}" for gap in gaps) or "none"


def _row(label: str, gaps: list[float]) -> str:
    ordered = sorted(gaps)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    over = sum(1 for gap in gaps if gap > 50)
    return (
        f"| {label} | {len(gaps)} | {statistics.median(gaps):.1f} | {p99:.1f} | "
        f"{max(gaps):.1f} | {over} |"
    )


def main() -> int:
    """Prepare, run idle and busy, print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="CPU-bound processes")
    parser.add_argument(
        "--messages", type=int, default=len(MESSAGES), help="messages sent"
    )
    parser.add_argument(
        "--tokens", type=int, default=REPLY_TOKENS, help="most tokens per reply"
    )
    parser.add_argument(
        "--switches", type=int, default=SWITCHES, help="clicks between siblings"
    )
    parser.add_argument(
        "--only", choices=("idle", "busy"), help="one of the two runs only"
    )
    parser.add_argument(
        "--transcript",
        action="store_true",
        help="time showing long paths instead (no model)",
    )
    parser.add_argument(
        "--paths",
        default="10,1000",
        help="messages on the paths --transcript shows (comma-separated)",
    )
    parser.add_argument(
        "--runs", type=int, default=5, help="fresh processes --transcript runs"
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--transcript-child", action="store_true", help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    paths = [int(n) for n in args.paths.split(",")]
    if args.child is not None:
        print(json.dumps(run_child(args.child, args.messages, args.switches)))
        return 0
    if args.transcript_child:
        print(json.dumps(run_transcript_child(paths)))
        return 0
    if args.transcript:
        report_transcript(paths, args.runs)
        return 0
    bare = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    interpreter_ms = (time.perf_counter() - bare) * 1000
    with tempfile.TemporaryDirectory() as folder:
        data_dir = Path(folder)
        prepare(data_dir, args.tokens)
        runs = [("idle machine", 0)] if args.only != "busy" else []
        if args.busy and args.only != "idle":
            runs.append((f"{args.busy} busy processes", args.busy))
        for title, busy in runs:
            figures = _run_once(data_dir, busy, args.messages, args.switches)
            print(f"\n### {title}\n")
            print(
                f"Launch to the window's first frame: "
                f"{figures['first_frame_ms'] + interpreter_ms:,.0f} ms; to the "
                "last conversation restored and ready: "
                f"{figures['ready_ms'] + interpreter_ms:,.0f} ms (both including "
                f"a bare interpreter's start, {interpreter_ms:.0f} ms)\n"
            )
            print(
                "| phase | ticks | median gap (ms) | p99 (ms) | longest (ms) "
                "| gaps > 50 ms |"
            )
            print("|---|---:|---:|---:|---:|---:|")
            gaps = figures["gaps"]
            assert isinstance(gaps, dict)
            for phase, values in gaps.items():
                print(_row(phase, values))
            everything = [gap for values in gaps.values() for gap in values]
            print(_row("**all**", everything))
            where = figures["long_gaps"]
            assert isinstance(where, dict)
            print(
                f"\nGaps over {LONG_GAP_MS} ms: "
                f"{sum(len(gaps) for gaps in where.values())}; at a reply's start "
                f"(within {NEAR_REPLY_MS} ms): {_listed(where['start'])}; at its "
                f"end: {_listed(where['end'])}; elsewhere: "
                f"{_listed(where['elsewhere'])}"
            )
            work = figures["presenter_ms"]
            assert isinstance(work, dict)
            print(
                "GUI-thread CPU in the presenter per reply, median (longest): "
                + "; ".join(
                    f"{kind} {statistics.median(ms):.1f} ({max(ms):.1f}) ms"
                    for kind, ms in work.items()
                    if ms
                )
            )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
