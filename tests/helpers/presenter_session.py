"""A window presenter without a window, for tests: a real database, the
real engine worker run on the test's own thread (one job after another, as
on its thread), and a view that records what it is told. The fixture
``open_session`` (tests/conftest.py) opens them."""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from app import jobs
from app.backend.values import SamplingParams
from app.jobs.results import JobResult
from app.preferences import load_preferences
from app.qt.workers.engine_worker import EngineWorker
from app.window.presenter import View, WindowPresenter
from storage import conversation_rows
from storage.db import Database

VIEW_METHODS = {name for name in vars(View) if not name.startswith("_")}


class RecordingView:
    """A ``View`` that records each call as ``(method, *args)``."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        if name not in VIEW_METHODS:  # the presenter asked for something else
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, *args))

    def said(self, method: str) -> list[tuple]:
        """The arguments of every call of ``method``, in order."""
        return [tuple(args) for name, *args in self.calls if name == method]


class InlineEngine:
    """The engine thread's queue, run on the test's thread by ``run_jobs``."""

    def __init__(self, db: Database) -> None:
        self.worker = EngineWorker(db)
        self.queue: deque[jobs.Job] = deque()
        self.submitted: list[jobs.Job] = []
        self.results: list[JobResult] = []
        self.worker.finished.connect(self.results.append)

    @property
    def busy(self) -> bool:
        return bool(self.queue)

    def submit(self, job: jobs.Job) -> None:
        self.queue.append(job)
        self.submitted.append(job)

    def stop(self) -> None:
        self.worker.cancel_requested.set()

    def run_jobs(self) -> None:
        while self.queue:
            self.worker.run(self.queue.popleft())


class Session:
    """A presenter on a database, with its view and its engine."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.view = RecordingView()
        self.engine = InlineEngine(db)
        prefs = load_preferences(db)
        prefs = replace(
            prefs,
            backend=replace(prefs.backend, n_threads=1),
            sampling=SamplingParams(temperature=0, max_tokens=12),
        )
        self.presenter = WindowPresenter(db, self.engine, prefs, self.view)
        self.engine.worker.started.connect(self.presenter.on_started)
        self.engine.worker.failed.connect(self.presenter.on_failed)
        self.engine.worker.finished.connect(self.presenter.on_finished)
        self.engine.worker.token_received.connect(self.presenter.on_token)
        self.engine.worker.progress.connect(self.presenter.on_progress)

    def stored_active(self, conversation_id: int) -> int | None:
        return conversation_rows.get_conversation(
            self.db, conversation_id
        ).active_node_id
