"""The server's way to the engine's thread (``app/server/engine_owner.py``):
work that follows a reply waits for a pause in the requests, on real threads
and a real event loop; through ``arbor serve``, it keeps the storage budget.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from app.platform import paths
from app.server import engine_owner
from app.server.engine_owner import EngineOwner
from storage import checkpoint_rows, setting_rows
from storage.db import open_database
from tests.server.test_server import _ask, serving


def test_work_after_a_reply_waits_for_a_pause_in_the_requests() -> None:
    done: list[tuple[str, float]] = []
    engine_thread = ThreadPoolExecutor(1)

    def submit(job: Any) -> Any:
        return engine_thread.submit(job, None)

    def work(name: str) -> Any:
        def job(_service: object) -> str:
            done.append((name, time.monotonic()))
            return name

        return job

    async def scenario() -> float:
        owner = EngineOwner(submit, queue_limit=4)
        asked = time.monotonic()
        owner.after(work("after the first reply"))
        owner.after(work("after the second reply"))  # stands for the first
        # A client's next request, sent at once, goes first.
        assert await owner.run(work("next request")) == "next request"
        await asyncio.sleep(engine_owner.QUIET_S * 3)
        return asked

    asked = asyncio.run(scenario())
    engine_thread.shutdown()
    assert [name for name, _ in done] == ["next request", "after the second reply"]
    assert done[1][1] - asked >= engine_owner.QUIET_S


def test_work_after_replies_runs_within_a_while_under_steady_requests() -> None:
    done: list[str] = []
    engine_thread = ThreadPoolExecutor(1)
    lock = threading.Lock()

    def submit(job: Any) -> Any:
        return engine_thread.submit(job, None)

    def work(name: str) -> Any:
        def job(_service: object) -> None:
            with lock:
                done.append(name)

        return job

    async def scenario() -> None:
        owner = EngineOwner(submit, queue_limit=4)
        owner.after(work("after"))
        started = time.monotonic()
        # Requests with no pause as long as QUIET_S, for longer than LATEST_S.
        while time.monotonic() - started < engine_owner.LATEST_S * 1.5:
            await owner.run(work("request"))
            await asyncio.sleep(engine_owner.QUIET_S / 4)
        owner.close()

    asyncio.run(scenario())
    engine_thread.shutdown()
    assert done.count("after") == 1 and done.index("after") < len(done) - 1


def test_the_server_keeps_the_checkpoint_budget(data_dir: Path, tiny_model: Path):
    db = open_database(paths.database_path(data_dir))
    setting_rows.set_setting(db, "checkpoint_budget_mb", 1)
    db.close()
    # Over 1 MB of checkpoints (the tiny model's cells take ~235 bytes a
    # token): a long first message from each of several clients.
    with serving(data_dir, tiny_model, n_ctx=2048) as server:
        client = server.client()
        for index in range(8):
            message = f"Client {index} asks about trees. " * 40
            _ask(client, [{"role": "user", "content": message}], user=f"c{index}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            db = open_database(paths.database_path(data_dir))
            total = checkpoint_rows.total_checkpoint_bytes(db)
            db.close()
            if total <= 1024 * 1024:
                break
            time.sleep(0.2)
        assert total <= 1024 * 1024
