"""Fault injection: the CLI under kill -9, races, a full disk, foreign files, bad
arguments, damaged checkpoints, oversized requests, a Hub that cuts, stalls
and changes files, and an RPC worker that stops answering.

Every test drives the real ``python -m app`` in its own process (databases are
only *seeded* in this process, through the service, because that is quick) and
looks at the result from outside with plain ``sqlite3``. The contract checked
everywhere: exit 0, or nonzero with one human line on stderr; never a
traceback; the database sound afterwards and no finished reply lost.

Counts are modest by default; ``ARBOR_FAULT_ROUNDS=5x`` multiplies them for a
long local run. ``pytest -s`` shows the closing summary (kills, races, damage
kinds tried and detected) as it is printed; it also goes to the terminal
report.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from app.library.hub import TIMEOUT_ENV as HUB_TIMEOUT_ENV
from app.runner.worker_sockets import TIMEOUT_ENV as WORKER_TIMEOUT_ENV
from storage.db import open_database

# The download and worker shapes reuse the helpers of their own tests.
from tests.cli.test_cli_worker_lost import BOUND_S as WORKER_BOUND_S
from tests.cli.test_cli_worker_lost import WAIT_S as WORKER_WAIT_S
from tests.cli.test_cli_worker_lost import _sending as _worker_sending
from tests.cli.test_cli_worker_lost import _status as _worker_status
from tests.cli.test_cli_worker_lost import _streaming as _worker_streaming
from tests.helpers.fake_hub import API_STALLS, FakeFile, FakeHub, HubServer
from tests.helpers.fault_harness import (
    DB_NAME,
    FINISHED,
    ArmedCli,
    Problems,
    Row,
    Tally,
    assert_clean,
    assert_intact,
    copy_database,
    finish,
    finished_replies,
    folder_snapshot,
    mount_tmpfs,
    nodes,
    read_only,
    rounds,
    run_cli,
    run_parallel,
    sha256,
    snapshot_changes,
    spawn_cli,
    sqlite,
    unmount,
)
from tests.helpers.workers import free_ports, running_worker
from tests.library.test_download_faults import FILE as DL_FILE
from tests.library.test_download_faults import REPO as DL_REPO
from tests.library.test_download_faults import _model_path as _dl_path
from tests.library.test_download_faults import (
    _only_progress_then,
    _pull,
    _recorded_sha256,
)
from tests.library.test_download_faults import _part as _dl_part

pytestmark = pytest.mark.faults

R = rounds()
GREEDY = SamplingParams(temperature=0, max_tokens=12, seed=1)


def greedy_flags(max_tokens: int = 12, seed: int = 1) -> tuple[str, ...]:
    """CLI flags of a reproducible reply."""
    return ("--temperature", "0", "--seed", str(seed), "--max-tokens", str(max_tokens))


@contextlib.contextmanager
def service_at(db_path: Path, model: Path) -> Iterator[ConversationService]:
    """The service on a database, for seeding it quickly (the CLI's settings)."""
    db = open_database(db_path)
    try:
        with LlamaEngine(model, BackendSettings(n_threads=1)) as engine:
            yield ConversationService(db, engine)
    finally:
        db.close()


@pytest.fixture(scope="module")
def tally(request: pytest.FixtureRequest) -> Iterator[Tally]:
    """The suite's counts; printed (and sent to the terminal report) at the end."""
    counts = Tally()
    yield counts
    text = counts.summary()
    plugins = request.config.pluginmanager
    reporter = plugins.get_plugin("terminalreporter")
    capture = plugins.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print("\n" + text)
        return
    # Past output capture, the way pytest's live logging writes: the summary
    # shows with or without -s.
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in text.splitlines():
            reporter.write_line(line)


@pytest.fixture(scope="module")
def small_seed(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict:
    """A closed database with one exchange: root -> user -> reply."""
    path = tmp_path_factory.mktemp("small-seed") / DB_NAME
    with service_at(path, tiny_model) as service:
        conversation, root = service.new_conversation("Be brief.")
        reply = service.send(root, "Hello", GREEDY)
    return {
        "path": path,
        "conversation": conversation,
        "root": root,
        "user": reply.user_node,
        "reply": reply.assistant_node,
    }


def poll_until(
    condition: Callable[[], bool], process: subprocess.Popen[bytes], limit: float = 60
) -> bool:
    """Wait until ``condition`` holds; False if the process ended first."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            if condition():
                return True
        except sqlite3.OperationalError:
            pass  # a writer holds the file for a moment: look again
        if process.poll() is not None:
            return condition()
        time.sleep(0.005)
    raise AssertionError("the awaited moment never came")


def _query(db: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with sqlite(db) as con:
        return con.execute(sql, params).fetchall()


# --- kill -9 --------------------------------------------------------------------------

KILL_MOMENTS = ("user-commit", "prompt-decoding", "streaming", "reply-commit")


def test_kill9_during_send_loses_no_finished_reply(tmp_path, tiny_model, tally):
    """SIGKILL at random and at chosen moments of ``send``: nothing finished is lost.

    Chosen moments are found by watching the database: the user's message
    committed, the prompt being decoded (a long message, just after its
    commit), the reply streaming (a partial save seen), the reply committed
    (its checkpoint still being written). Afterwards the database is sound,
    every reply that had finished before the kill is there with the same
    text, the next open marks the unfinished reply interrupted, and sending
    works.
    """
    rng = random.Random(20240611)
    data = tmp_path / "data"
    db = data / DB_NAME
    with service_at(db, tiny_model) as service:
        _, root = service.new_conversation("Be brief.")
        first = service.send(root, "Hello", GREEDY)
        second = service.send(first.assistant_node, "Tell me more", GREEDY)
    parents = [root, first.assistant_node, second.assistant_node]
    expected = finished_replies(db)
    plan = [*KILL_MOMENTS, *["random"] * 2] * R
    for round_no, moment in enumerate(plan):
        words = "many long words " * 120 if moment == "prompt-decoding" else "go on"
        text = f"Round {round_no}: {words}"
        parent = rng.choice(parents)
        process, argv, started = spawn_cli(
            "send",
            parent,
            text,
            # Long enough to be caught streaming (partial saves every 0.5 s).
            *greedy_flags(max_tokens=2500, seed=round_no),
            data_dir=data,
            model=tiny_model,
        )

        def user_id(text: str = text) -> int | None:
            rows = _query(db, "SELECT id FROM node WHERE role='user' AND text=?", text)
            return rows[0][0] if rows else None

        def reply_status(
            statuses: tuple[str, ...], partial: bool, text: str = text
        ) -> bool:
            user = user_id(text)
            if user is None:
                return False
            rows = _query(
                db,
                "SELECT status, length(text) FROM node WHERE parent_id=?",
                user,
            )
            return any(s in statuses and (n > 0 or not partial) for s, n in rows)

        try:
            if moment == "random":
                time.sleep(rng.uniform(0.2, 3.0))
            elif moment in ("user-commit", "prompt-decoding"):
                poll_until(lambda: user_id() is not None, process)
                if moment == "prompt-decoding":
                    time.sleep(0.02)
            elif moment == "streaming":
                poll_until(lambda: reply_status(("generating",), True), process)
            else:
                poll_until(lambda: reply_status(FINISHED, False), process)
            before = finished_replies(db)
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                tally.counts[f"kill -9 at {moment}"] += 1
                tally.counts["kill -9 total"] += 1
            process.wait(60)
        finally:
            if process.poll() is None:
                process.kill()
        result = finish(process, argv, started)
        if result.rc != -signal.SIGKILL:
            # It ended before the kill: then it obeys the contract, and a
            # reply it reported is a finished one.
            tally.counts["kill -9: process had already ended"] += 1
            assert_clean(result)
            if result.rc == 0:
                expected[result.json["assistant_node"]] = result.json["text"]
        expected.update(before)

        assert_intact(db)
        after = finished_replies(db)
        lost = {i: t for i, t in expected.items() if after.get(i) != t}
        assert not lost, f"round {round_no} ({moment}): finished replies changed {lost}"

    # The next open closes what the kills left open.
    listed = run_cli("list", data_dir=data)
    assert listed.rc == 0
    left_open = [n.id for n in nodes(db).values() if n.status == "generating"]
    assert left_open == [], f"still 'generating' after the next open: {left_open}"

    # And the conversation goes on.
    last = run_cli(
        "send",
        second.assistant_node,
        "After the storm",
        *greedy_flags(),
        data_dir=data,
        model=tiny_model,
    )
    assert last.rc == 0, last.describe()
    stored = nodes(db)[last.json["assistant_node"]]
    assert (stored.text, stored.status in FINISHED) == (last.json["text"], True)
    assert_intact(db)
    tally.counts["kill -9: finished replies checked intact"] = len(expected)


# --- concurrent writers ---------------------------------------------------------------


@pytest.mark.parametrize("writers", [2, 4])
def test_concurrent_senders_succeed_or_say_locked(tmp_path, tiny_model, tally, writers):
    """Processes sending to one database at once: success or a clean "locked".

    Two writers share one parent (siblings in one conversation); four add two
    writers on another conversation. Each success's reply is in the database.
    """
    data = tmp_path / "data"
    db = data / DB_NAME
    with service_at(db, tiny_model) as service:
        _, root1 = service.new_conversation("One.")
        one = service.send(root1, "Hello", GREEDY)
        _, root2 = service.new_conversation("Two.")
        two = service.send(root2, "Hi", GREEDY)
    targets = [one.assistant_node, two.assistant_node]
    for round_no in range((2 if writers == 2 else 1) * R):
        started = [
            spawn_cli(
                "send",
                targets[(i // 2) % 2],
                f"Writer {i} of round {round_no}",
                *greedy_flags(max_tokens=24, seed=i),
                data_dir=data,
                model=tiny_model,
            )
            for i in range(writers)
        ]
        results = [finish(*s) for s in started]
        tally.counts["race: concurrent send processes"] += writers
        stored = nodes(db)
        for result in results:
            assert_clean(result)
            if result.rc != 0:
                assert "locked" in result.message.lower(), result.describe()
                tally.counts["race: send refused as locked"] += 1
                continue
            reply = result.json
            assert stored[reply["assistant_node"]].text == reply["text"]
            assert stored[reply["assistant_node"]].status in FINISHED
            assert stored[reply["user_node"]].parent_id in targets
        assert_intact(db)


# "user-decoding" fires a seeded moment after the commit, while the long
# question is decoded: a delete landing just before the question's checkpoint
# is written is the narrowest (and worst) window.
DELETE_MOMENTS = ("user-commit", "user-decoding", "streaming", "reply-commit", "random")


def _asked(db: Path, text: str) -> bool:
    return any(n.text == text for n in nodes(db).values())


def test_send_races_delete_of_its_branch(tmp_path, tiny_model, tally):
    """``send`` under a branch while another process deletes that branch.

    The deleting process is started ahead and fired when the database shows
    the moment: the sender's message committed, its reply streaming, its
    reply committed (checkpoint being written), or after a seeded random
    delay. Each side succeeds or fails with a clean message; afterwards
    nothing is left dangling and a reply that survived is intact.
    """
    rng = random.Random(77)
    data = tmp_path / "data"
    db = data / DB_NAME
    plan = list(DELETE_MOMENTS) * R
    with service_at(db, tiny_model) as service:
        _, root = service.new_conversation("Branches.")
        branches = [service.send(root, f"Branch {i}", GREEDY) for i in range(len(plan))]
    problems = Problems()
    for i, (moment, branch) in enumerate(zip(plan, branches, strict=True)):
        # Delete the reply we continue from, or the question above it.
        target = branch.assistant_node if i % 2 == 0 else branch.user_node
        text = f"Under branch {i}: " + "a long question " * 60
        deleter = ArmedCli("delete", target, data_dir=data)
        process, argv, started = spawn_cli(
            "send",
            branch.assistant_node,
            text,
            *greedy_flags(max_tokens=120),
            data_dir=data,
            model=tiny_model,
        )

        def reply_of(text: str = text) -> Row | None:
            stored = nodes(db)
            users = [n.id for n in stored.values() if n.text == text]
            replies = [n for n in stored.values() if n.parent_id in users]
            return replies[0] if replies else None

        try:
            if moment in ("user-commit", "user-decoding"):
                poll_until(lambda text=text: _asked(db, text), process)
                if moment == "user-decoding":
                    time.sleep(rng.uniform(0.0, 0.3))
            elif moment == "streaming":
                poll_until(
                    lambda: (r := reply_of()) is not None and bool(r.text), process
                )
            elif moment == "reply-commit":
                poll_until(
                    lambda: (r := reply_of()) is not None and r.status in FINISHED,
                    process,
                )
            else:
                time.sleep(rng.uniform(0.0, 2.5))
            deleter.fire()
            deleted = deleter.result()
            process.wait(60)
        finally:
            if process.poll() is None:
                process.kill()
        sent = finish(process, argv, started)
        tally.counts["race: send vs delete"] += 1
        tally.counts[
            f"race: send {'ok' if sent.rc == 0 else 'refused'}, "
            f"delete {'ok' if deleted.rc == 0 else 'refused'}"
        ] += 1
        for side, result in (("send", sent), ("delete", deleted)):
            if result.rc != 0:
                said = re.sub(r"\d+", "N", result.message.splitlines()[-1])[:70]
                tally.counts[f"race: {side} refused: {said}"] += 1
        where = f"round {i} (delete at {moment}): "
        sent_clean = problems.clean(sent, where)
        deleted_clean = problems.clean(deleted, where)
        if not (sent_clean and deleted_clean):
            continue
        assert_intact(db)
        stored = nodes(db)
        problems.check(
            (target in stored) == (deleted.rc != 0),
            where
            + f"delete said {deleted.rc} but node {target} is "
            + ("still there" if target in stored else "gone"),
        )
        if sent.rc == 0 and deleted.rc != 0:
            reply = sent.json
            kept = stored.get(reply["assistant_node"])
            problems.check(
                kept is not None and kept.text == reply["text"],
                where + "the reply the sender reported is not stored",
            )
        elif sent.rc == 0:
            # It was under the deleted branch: gone with it (not orphaned,
            # assert_intact saw to that).
            problems.check(
                sent.json["assistant_node"] not in stored,
                where + "a reply under the deleted branch survived",
            )
    assert_intact(db)
    problems.assert_none()


# --- a full disk ----------------------------------------------------------------------


def _fill(path: Path) -> None:
    """Write ``path`` until the file system is full."""
    chunk = b"\0" * (64 * 1024)
    with path.open("wb", buffering=0) as out:
        with contextlib.suppress(OSError):
            while True:
                out.write(chunk)
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 512)


def _free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def test_full_disk_refuses_clearly_and_recovers(tmp_path, tiny_model, tally):
    """A send on a full disk fails with "disk … is full"; reading, deleting a
    branch, clearing checkpoints and deleting a conversation still work; once
    there is room the same send works and leaves one copy of the user's
    message, answered. Every stage runs even when an earlier one breaks; all
    problems are listed.
    """
    disk = tmp_path / "disk"
    reason = mount_tmpfs(disk, "6m")
    if reason is not None:
        pytest.skip(f"needs a small tmpfs: {reason}")
    problems = Problems()
    try:
        data = disk / "data"
        db = data / DB_NAME
        with service_at(db, tiny_model) as service:
            big_conv, big_root = service.new_conversation("Big.")
            big = service.send(big_root, "A long story. " * 200, GREEDY)
            small_conv, small_root = service.new_conversation("Small.")
            small = service.send(small_root, "Hi", GREEDY)
        filler = disk / "filler"
        _fill(filler)
        # A little room, less than the next message's checkpoint needs.
        # Room for the user's message (and SQLite's shared-memory file), not
        # for its checkpoint: the send fails after the message is committed.
        os.truncate(filler, filler.stat().st_size - 192 * 1024)
        message = "Please summarise: " + "many words here " * 180
        send = ("send", small.assistant_node, message, *greedy_flags())

        full = run_cli(*send, data_dir=data, model=tiny_model, check=False)
        tally.counts["full disk: sends tried"] += 1
        if problems.clean(full):
            problems.check(full.rc != 0, "a send on a full disk succeeded")
            problems.check(
                re.search(r"disk.*\bfull\b", full.message, re.I),
                "send on a full disk: " + full.describe(),
            )

        reads = run_parallel(
            [
                {"args": ("list",), "data_dir": data},
                {"args": ("show", small.assistant_node), "data_dir": data},
                {"args": ("tree", small_conv), "data_dir": data},
            ]
        )
        for result in reads:
            if problems.clean(result):
                problems.check(
                    result.rc == 0, "reading on a full disk: " + result.describe()
                )

        free = _free_bytes(disk)
        deleted = run_cli("delete", big.user_node, data_dir=data, check=False)
        if problems.clean(deleted):
            problems.check(
                deleted.rc == 0, "deleting on a full disk: " + deleted.describe()
            )
            problems.check(
                deleted.rc != 0 or _free_bytes(disk) > free,
                "deleting a branch freed no space",
            )

        cleared = run_cli("clear-checkpoints", small_conv, data_dir=data, check=False)
        if problems.clean(cleared):
            problems.check(
                cleared.rc == 0,
                "clearing checkpoints on a full disk: " + cleared.describe(),
            )
        gone = run_cli("delete-conversation", big_conv, data_dir=data, check=False)
        if problems.clean(gone):
            problems.check(
                gone.rc == 0,
                "deleting a conversation on a full disk: " + gone.describe(),
            )

        unanswered = [
            n.id
            for n in nodes(db).values()
            if n.parent_id == small.assistant_node and n.text == message
        ]
        tally.counts["full disk: unanswered user messages left"] += len(unanswered)
        filler.unlink()  # the person frees space
        retried = run_cli(*send, data_dir=data, model=tiny_model, check=False)
        if problems.clean(retried) and problems.check(
            retried.rc == 0, "the retried send: " + retried.describe()
        ):
            stored = nodes(db)
            asked = [
                n
                for n in stored.values()
                if n.parent_id == small.assistant_node and n.text == message
            ]
            problems.check(
                len(asked) == 1,
                f"after the retry the user's message is stored {len(asked)} times "
                "(an unanswered copy was left by the failed send)",
            )
            answered = [n.parent_id for n in stored.values() if n.role == "assistant"]
            problems.check(
                all(a.id in answered for a in asked),
                "a copy of the user's message has no reply",
            )
            reply = stored.get(retried.json["assistant_node"])
            problems.check(
                reply is not None and reply.status in FINISHED,
                "the retried reply is not stored as finished",
            )
        assert_intact(db)
        listed = run_cli("list", data_dir=data, check=False)
        if problems.clean(listed) and problems.check(listed.rc == 0, listed.describe()):
            ids = {c["id"] for c in listed.json["conversations"]}
            problems.check(ids == {small_conv}, f"conversations now: {ids}")
    finally:
        unmount(disk)
    problems.assert_none()


# --- files that are not ours to change ------------------------------------------------

FOREIGN_COMMANDS = ("list", "show", "new", "send")
ALL_COMMANDS = ("list", "show", "tree", "new", "send", "delete")


def _commands(names: tuple[str, ...], seed: dict, data: Path, model: Path) -> list:
    table = {
        "list": {"args": ("list",)},
        "show": {"args": ("show", seed["reply"])},
        "tree": {"args": ("tree", seed["conversation"])},
        "new": {"args": ("new",)},
        "send": {
            "args": ("send", seed["reply"], "Hello again", *greedy_flags()),
            "model": model,
        },
        "delete": {"args": ("delete", seed["user"])},
    }
    return [{**table[n], "data_dir": data} for n in names]


def _foreign_db(path: Path) -> None:
    with sqlite(path) as con:
        con.execute("PRAGMA journal_mode=DELETE")
        con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        con.executemany("INSERT INTO notes (body) VALUES (?)", [("a",), ("b",)])
        con.commit()


def _future_db(path: Path, seed: dict) -> None:
    copy_database(seed["path"], path)
    with sqlite(path) as con:
        con.execute("PRAGMA user_version=99")
        con.commit()


@pytest.mark.parametrize(
    ("kind", "refusal"),
    [("foreign", r"not an arbor database"), ("future", r"newer")],
)
def test_foreign_and_future_databases_are_refused_untouched(
    tmp_path, tiny_model, small_seed, tally, kind, refusal
):
    """A plain sqlite3 file (rollback journal) and a database from a newer Arbor
    (user_version 99): every command refuses clearly and leaves the file's
    bytes and its folder's listing exactly as they were."""
    data = tmp_path / "data"
    data.mkdir()
    db = data / DB_NAME
    if kind == "foreign":
        _foreign_db(db)
    else:
        _future_db(db, small_seed)
    problems = Problems()
    for call in _commands(FOREIGN_COMMANDS, small_seed, data, tiny_model):
        # One command at a time, so that a change is pinned on the one that did it.
        before = folder_snapshot(data)
        result = run_parallel([call])[0]
        tally.counts[f"untouchable files: {kind} commands"] += 1
        changed = snapshot_changes(before, folder_snapshot(data))
        problems.check(
            not changed, f"{result.describe()} changed the folder: {changed}"
        )
        if changed:  # start the next command from the original file
            for extra in data.iterdir():
                extra.unlink()
            if kind == "foreign":
                _foreign_db(db)
            else:
                _future_db(db, small_seed)
        if problems.clean(result):
            problems.check(result.rc != 0, f"{kind} accepted: " + result.describe())
            problems.check(
                result.rc == 0 or re.search(refusal, result.message, re.I),
                "unclear refusal: " + result.describe(),
            )
    problems.assert_none()


@pytest.mark.parametrize("what", ["file", "folder"])
def test_read_only_database_reads_and_refuses_writes_untouched(
    tmp_path, tiny_model, small_seed, tally, what
):
    """A read-only database file, or a database in a read-only folder: list,
    show and tree work; writes are refused as read-only (never "corrupt"); the
    file's bytes and the folder's listing do not change."""
    data = tmp_path / "data"
    db = copy_database(small_seed["path"], data / DB_NAME)
    before = folder_snapshot(data)
    with read_only(db if what == "file" else data) as reason:
        if reason is not None:
            pytest.skip(f"cannot make the {what} read-only here: {reason}")
        results = run_parallel(_commands(ALL_COMMANDS, small_seed, data, tiny_model))
    tally.counts[f"untouchable files: read-only {what} commands"] += len(results)
    problems = Problems()
    for name, result in zip(ALL_COMMANDS, results, strict=True):
        if not problems.clean(result):
            continue
        problems.check(
            "corrupt" not in result.message.lower(),
            "read-only called corrupt: " + result.describe(),
        )
        if name in ("list", "show", "tree"):
            problems.check(result.rc == 0, "a read refused: " + result.describe())
        else:
            problems.check(result.rc != 0, "a write accepted: " + result.describe())
            problems.check(
                result.rc == 0 or re.search(r"read.?only", result.message, re.I),
                "not called read-only: " + result.describe(),
            )
    if results[1].rc == 0:
        shown = [m["id"] for m in results[1].json["messages"]]
        problems.check(shown[-1:] == [small_seed["reply"]], f"show gave {shown}")
    changed = snapshot_changes(before, folder_snapshot(data))
    problems.check(not changed, f"the folder changed: {changed}")
    problems.assert_none()


# --- argument edges -------------------------------------------------------------------

BIG = (0, -1, 2**63, 2**64)


def _edge_cases(seed: dict, good_model: Path, bad: dict[str, Path]) -> dict[str, dict]:
    """name -> call (run_cli kwargs) and what is allowed: "fail" or "any"."""
    reply = seed["reply"]
    cases: dict[str, dict] = {}
    for value in (*BIG, "abc"):
        cases[f"show {value}"] = {"args": ("show", value), "expect": "fail"}
    for value in (2**63, 2**64):
        cases[f"delete {value}"] = {"args": ("delete", value), "expect": "fail"}
    cases[f"tree {2**63}"] = {"args": ("tree", 2**63), "expect": "fail"}
    cases[f"send {2**63}"] = {
        "args": ("send", 2**63, "hi", *greedy_flags()),
        "model": good_model,
        "expect": "fail",
    }
    cases["restore 0"] = {"args": ("restore", 0), "model": good_model, "expect": "fail"}
    for value, expect in (("nan", "fail"), ("inf", "any"), ("-1", "fail")):
        cases[f"--temperature {value}"] = {
            "args": ("send", reply, "hi", "--temperature", value, "--max-tokens", "4"),
            "model": good_model,
            "expect": expect,
        }
    for value in ("0", "-5", "4294967360", "1000000000"):
        cases[f"--n-ctx {value}"] = {
            "args": ("--n-ctx", value, "send", reply, "hi", *greedy_flags()),
            "model": good_model,
            "expect": "fail",
            "seconds": 10,
        }
    cases["invalid UTF-8 message"] = {
        "args": ("send", reply, b"caf\xe9 \xff\xfe bytes", *greedy_flags()),
        "model": good_model,
        "expect": "any",
    }
    cases["invalid UTF-8 system prompt"] = {
        "args": ("new", "--system", b"\xc3\x28 broken"),
        "expect": "any",
    }
    for name, path in bad.items():
        cases[f"send with {name}"] = {
            "args": ("send", reply, "hi", *greedy_flags()),
            "model": path,
            "expect": "fail",
        }
    return cases


@pytest.fixture(scope="module")
def edge_results(tmp_path_factory, tiny_model, small_seed, tally):
    """Every argument edge case, run two at a time on one copy of the seed."""
    folder = tmp_path_factory.mktemp("edges")
    data = folder / "data"
    copy_database(small_seed["path"], data / DB_NAME)
    truncated = folder / "truncated.gguf"
    truncated.write_bytes(tiny_model.read_bytes()[: tiny_model.stat().st_size // 2])
    empty = folder / "empty.gguf"
    empty.write_bytes(b"")
    cases = _edge_cases(
        small_seed, tiny_model, {"a truncated GGUF": truncated, "a 0-byte model": empty}
    )
    calls = []
    for case in cases.values():
        call = {k: v for k, v in case.items() if k in ("args", "model")}
        # A context size must be refused in seconds; past 12 it is a hang.
        timeout = 12 if "seconds" in case else 60
        calls.append({**call, "data_dir": data, "timeout": timeout})
    results = run_parallel(calls)
    tally.counts["argument edge cases run"] += len(cases)
    return {name: (cases[name], r) for name, r in zip(cases, results, strict=True)}


EDGE_NAMES = list(
    _edge_cases(
        {"reply": 0},
        Path("m"),
        {"a truncated GGUF": Path("t"), "a 0-byte model": Path("z")},
    )
)


@pytest.mark.parametrize("name", EDGE_NAMES)
def test_argument_edge(edge_results, tally, name):
    """Odd ids, temperatures, context sizes, bytes and model files: a clean
    one-line refusal (fast, for context sizes) or a valid success."""
    case, result = edge_results[name]
    assert_clean(result)
    if case["expect"] == "fail":
        assert result.rc != 0, f"{name} was accepted: " + result.describe()
    if "seconds" in case:
        assert result.seconds < case["seconds"], (
            f"{name} took {result.seconds:.1f} s: " + result.describe()
        )
    tally.counts["argument edge cases clean"] += 1


def test_relative_data_dir_twice_from_one_folder(tmp_path, tally):
    """``--data-dir data`` given twice from the same working folder: both runs
    use the same database, found again the second time."""
    first = run_cli("--data-dir", "rel-data", "new", cwd=tmp_path)
    second = run_cli("--data-dir", "rel-data", "new", cwd=tmp_path)
    listed = run_cli("--data-dir", "rel-data", "list", cwd=tmp_path)
    tally.counts["argument edge cases run"] += 3
    runs = zip(("first", "second", "list"), (first, second, listed), strict=True)
    for which, result in runs:
        assert result.rc == 0, f"{which} run: " + result.describe()
    assert len(listed.json["conversations"]) == 2
    assert (tmp_path / "rel-data" / DB_NAME).is_file()


# --- checkpoint damage ----------------------------------------------------------------


@pytest.fixture(scope="module")
def damage_seed(tmp_path_factory, tiny_model, other_tiny_model) -> dict:
    """A conversation root -> u1 -> a1 -> u2 -> a2 with u1' a sibling of u1 of
    the same length, and the same conversation made by another model (same
    vocabulary and template, so u1 has the same tokens and positions there).

    Damage goes to u1's checkpoint; a send from a2 must reach it.
    """
    folder = tmp_path_factory.mktemp("damage-seed")
    ids = {}
    for name, model in (("base", tiny_model), ("foreign", other_tiny_model)):
        with service_at(folder / f"{name}.sqlite3", model) as service:
            _, root = service.new_conversation("Keep it short.")
            first = service.send(root, "Question A1", GREEDY)
            sibling = service.edit(first.user_node, "Question A2", GREEDY)
            second = service.send(first.assistant_node, "Question B", GREEDY)
            ids[name] = {
                "root": root,
                "u1": first.user_node,
                "a1": first.assistant_node,
                "u1b": sibling.user_node,
                "u2": second.user_node,
                "a2": second.assistant_node,
            }
    assert ids["base"] == ids["foreign"], "the two seeds must number nodes alike"
    base = folder / "base.sqlite3"
    rows = _query(
        base,
        "SELECT node_id, start_pos, end_pos, byte_size FROM checkpoint "
        "WHERE node_id IN (?, ?)",
        ids["base"]["u1"],
        ids["base"]["u1b"],
    )
    assert len({r[1:] for r in rows}) == 1, f"siblings differ in shape: {rows}"
    return {
        "folder": folder,
        "base": base,
        "foreign": folder / "foreign.sqlite3",
        "ids": ids["base"],
    }


def _blob(con: sqlite3.Connection, node: int) -> tuple[int, bytes, str]:
    return con.execute(
        "SELECT c.id, b.data, c.checksum FROM checkpoint c "
        "JOIN checkpoint_blob b ON b.checkpoint_id = c.id WHERE c.node_id = ?",
        (node,),
    ).fetchone()


def _set_blob(con: sqlite3.Connection, checkpoint: int, data: Any) -> None:
    con.execute(
        "UPDATE checkpoint_blob SET data = ? WHERE checkpoint_id = ?",
        (data, checkpoint),
    )


def _damage_flip(con, ids, _seed):
    cid, data, _ = _blob(con, ids["u1"])
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x10
    _set_blob(con, cid, bytes(flipped))


def _damage_truncate(con, ids, _seed):
    cid, data, _ = _blob(con, ids["u1"])
    _set_blob(con, cid, data[: len(data) // 2])


def _damage_empty(con, ids, _seed):
    _set_blob(con, _blob(con, ids["u1"])[0], b"")


def _damage_other_blob(con, ids, _seed):
    _set_blob(con, _blob(con, ids["u1"])[0], _blob(con, ids["a1"])[1])


def _damage_checksum(con, ids, _seed):
    cid, _, checksum = _blob(con, ids["u1"])
    changed = checksum[:-1] + ("0" if checksum[-1] != "0" else "1")
    con.execute("UPDATE checkpoint SET checksum = ? WHERE id = ?", (changed, cid))


def _damage_text_hex(con, ids, _seed):
    cid = _blob(con, ids["u1"])[0]
    con.execute(
        "UPDATE checkpoint_blob SET data = hex(data) WHERE checkpoint_id = ?", (cid,)
    )


def _damage_text_raw(con, ids, _seed):
    cid = _blob(con, ids["u1"])[0]
    con.execute(
        "UPDATE checkpoint_blob SET data = CAST(data AS TEXT) WHERE checkpoint_id = ?",
        (cid,),
    )


def _damage_null(con, ids, _seed):
    # The column is NOT NULL; damage does not ask. Drop the constraint from the
    # stored schema (as another tool or a hand edit could), then write NULL.
    cid = _blob(con, ids["u1"])[0]
    con.execute("PRAGMA writable_schema=ON")
    sql = con.execute(
        "SELECT sql FROM sqlite_master WHERE name = 'checkpoint_blob'"
    ).fetchone()[0]
    con.execute(
        "UPDATE sqlite_master SET sql = ? WHERE name = 'checkpoint_blob'",
        (sql.replace("data BLOB NOT NULL", "data BLOB"),),
    )
    con.execute("PRAGMA writable_schema=OFF")
    con.commit()
    con.execute("PRAGMA writable_schema=RESET")
    _set_blob(con, cid, None)


def _damage_integer(con, ids, _seed):
    _set_blob(con, _blob(con, ids["u1"])[0], 123456789)


def _damage_no_blob_row(con, ids, _seed):
    con.execute(
        "DELETE FROM checkpoint_blob WHERE checkpoint_id = ?",
        (_blob(con, ids["u1"])[0],),
    )


def _damage_positions(con, ids, _seed):
    con.execute(
        "UPDATE checkpoint SET start_pos = start_pos + 1, end_pos = end_pos + 1 "
        "WHERE node_id = ?",
        (ids["u1"],),
    )


def _damage_end(con, ids, _seed):
    con.execute(
        "UPDATE checkpoint SET end_pos = end_pos - 1 WHERE node_id = ?", (ids["u1"],)
    )


def _damage_kind(con, ids, _seed):
    con.execute("UPDATE checkpoint SET kind = 'full' WHERE node_id = ?", (ids["u1"],))


def _damage_profile(con, ids, _seed):
    con.execute(
        "INSERT INTO backend_profile (fingerprint, details, created_at) "
        "VALUES (?, '{}', '2024-01-01 00:00:00.000000')",
        ("f" * 64,),
    )
    other = con.execute("SELECT max(id) FROM backend_profile").fetchone()[0]
    con.execute(
        "UPDATE checkpoint SET profile_id = ? WHERE node_id = ?", (other, ids["u1"])
    )


def _damage_foreign_model(con, ids, seed):
    # The same node's checkpoint as another model made it, row and blob
    # together: consistent in itself, wrong for this model.
    with sqlite(seed["foreign"]) as foreign:
        kind, start, end, size, checksum, data = foreign.execute(
            "SELECT c.kind, c.start_pos, c.end_pos, c.byte_size, c.checksum, b.data "
            "FROM checkpoint c JOIN checkpoint_blob b ON b.checkpoint_id = c.id "
            "WHERE c.node_id = ?",
            (ids["u1"],),
        ).fetchone()
    cid = _blob(con, ids["u1"])[0]
    con.execute(
        "UPDATE checkpoint SET kind=?, start_pos=?, end_pos=?, byte_size=?, "
        "checksum=? WHERE id=?",
        (kind, start, end, size, checksum, cid),
    )
    _set_blob(con, cid, data)


def _damage_swap(con, ids, _seed):
    # Siblings with the same positions and length trade blob and checksum:
    # every row is consistent in itself.
    one, data1, sum1 = _blob(con, ids["u1"])
    two, data2, sum2 = _blob(con, ids["u1b"])
    _set_blob(con, one, data2)
    _set_blob(con, two, data1)
    con.execute("UPDATE checkpoint SET checksum = ? WHERE id = ?", (sum2, one))
    con.execute("UPDATE checkpoint SET checksum = ? WHERE id = ?", (sum1, two))


DAMAGE: dict[str, Callable[[sqlite3.Connection, dict, dict], None]] = {
    "bit flipped in blob": _damage_flip,
    "blob truncated": _damage_truncate,
    "blob empty": _damage_empty,
    "another node's blob": _damage_other_blob,
    "checksum changed": _damage_checksum,
    "blob as TEXT (hex)": _damage_text_hex,
    "blob as TEXT (raw bytes)": _damage_text_raw,
    "blob NULL": _damage_null,
    "blob an integer": _damage_integer,
    "blob row missing": _damage_no_blob_row,
    "start/end positions shifted": _damage_positions,
    "end position changed": _damage_end,
    "kind changed": _damage_kind,
    "row on another profile": _damage_profile,
    "blob of a foreign model": _damage_foreign_model,
    "consistent sibling swap": _damage_swap,
}

NEXT = "Next question"


@pytest.fixture(scope="module")
def damage_runs(damage_seed, tiny_model, tally) -> dict[str, Any]:
    """For the undamaged seed and each damage: a copy, the damage, then a greedy
    ``send`` from a2 through the CLI (two at a time)."""
    folder = damage_seed["folder"]
    ids = damage_seed["ids"]
    copies = {}
    for name in ["undamaged", *DAMAGE]:
        data = folder / re.sub(r"\W+", "-", name)
        db = copy_database(damage_seed["base"], data / DB_NAME)
        if name != "undamaged":
            with sqlite(db) as con:
                DAMAGE[name](con, ids, damage_seed)
                con.commit()
        copies[name] = data
    calls = [
        {
            "args": ("send", ids["a2"], NEXT, *greedy_flags(max_tokens=16)),
            "data_dir": data,
            "model": tiny_model,
        }
        for data in copies.values()
    ]
    results = dict(zip(copies, run_parallel(calls), strict=True))
    reference = results["undamaged"]
    assert reference.rc == 0, reference.describe()
    return {"copies": copies, "results": results, "reference": reference}


def _restore_in_process(db: Path, model: Path, node: int) -> dict[str, Any]:
    # The check that the damaged checkpoint was rewritten: a restore that
    # reprocesses nothing. In this process because it is only a probe (the
    # CLI's restore prints the same SyncStats).
    with service_at(db, model) as service:
        return vars(service.restore(node))


def test_undamaged_seed_restores_everything(damage_runs):
    """The baseline: no fallback, nothing reprocessed (else detection means nothing)."""
    stats = damage_runs["reference"].json["stats"]
    assert stats["fallbacks"] == [] and stats["reprocessed_tokens"] == 0, stats


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_checkpoint_damage_is_detected_and_repaired(
    damage_runs, damage_seed, tiny_model, tally, kind
):
    """Each kind of damage to u1's checkpoint: the send from a2 reports a
    fallback and reprocesses, its greedy reply equals the undamaged one, and
    the next restore of a2 reprocesses nothing (the checkpoint was rewritten)."""
    result = damage_runs["results"][kind]
    reference = damage_runs["reference"].json
    row: dict[str, Any] = {
        "rc": result.rc,
        "detected": False,
        "repaired": None,
        "same_reply": False,
        "note": "",
    }
    tally.damage[kind] = row
    clean = "Traceback" not in result.stderr
    if result.rc == 0:
        stats = result.json["stats"]
        row["detected"] = bool(stats["fallbacks"]) and stats["reprocessed_tokens"] > 0
        row["same_reply"] = result.json["text"] == reference["text"]
        row["note"] = "; ".join(stats["fallbacks"]) or "no fallback reported"
        try:
            again = _restore_in_process(
                damage_runs["copies"][kind] / DB_NAME,
                tiny_model,
                damage_seed["ids"]["a2"],
            )
            row["repaired"] = (
                again["reprocessed_tokens"] == 0 and not again["fallbacks"]
            )
        except Exception as exc:  # the probe itself hit the damage
            row["repaired"] = False
            row["note"] += f" / restore probe: {type(exc).__name__}: {exc}"
    else:
        row["note"] = ("TRACEBACK: " if not clean else "") + (
            result.message.splitlines()[-1] if result.message else "(no message)"
        )
    assert_clean(result)
    assert result.rc == 0, f"{kind}: " + result.describe()
    assert row["detected"], f"{kind}: not detected; stats {result.json['stats']}"
    assert row["same_reply"], (
        f"{kind}: reply {result.json['text']!r} != undamaged {reference['text']!r}"
    )
    assert row["repaired"], f"{kind}: not repaired ({row['note']})"


# --- requests too large for the context (issue 43) -----------------------------


def _oversized(rng: random.Random, n_ctx: int) -> tuple[str, dict[str, Any]]:
    """A chat request that cannot fit ``n_ctx`` tokens, of a random shape."""
    shape = rng.choice(("many turns", "long message", "long system", "tool turns"))
    if shape == "many turns":
        count = rng.randrange(n_ctx, 3 * n_ctx) | 1  # odd: it ends with a user turn
        messages = [
            {"role": ("user", "assistant")[k % 2], "content": f"m{k}"}
            for k in range(count)
        ]
    elif shape == "long message":
        messages = [{"role": "user", "content": "w " * rng.randrange(n_ctx, 3 * n_ctx)}]
    elif shape == "long system":
        messages = [
            {"role": "system", "content": "s" * rng.randrange(2 * n_ctx, 4 * n_ctx)},
            {"role": "user", "content": "hi"},
        ]
    else:
        messages = [{"role": "user", "content": "go"}]
        for k in range(rng.randrange(n_ctx // 2, n_ctx)):
            call = {"id": f"c{k}", "type": "function", "function": {"name": "f"}}
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": [call]}
            )
            messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": "r"})
    tools = [{"type": "function", "function": {"name": "f"}}]
    return shape, {"model": "m", "messages": messages, "tools": tools, "max_tokens": 4}


def test_oversized_requests_are_refused_before_anything_is_stored(
    tmp_path, tiny_model, tally
):
    from tests.server.test_server import _post, serving

    rng = random.Random(43)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    with serving(data_dir, tiny_model, n_ctx=512) as server:
        for _ in range(8 * R):
            shape, body = _oversized(rng, 512)
            status, _headers, answer = _post(server, json.dumps(body).encode())
            assert (status, answer["error"]["code"]) == (
                400,
                "context_length_exceeded",
            ), shape
            tally.counts[f"oversized requests refused: {shape}"] += 1
        # Nothing of them was stored; the server answers as before.
        ((stored,),) = _query(data_dir / DB_NAME, "SELECT count(*) FROM node")
        tally.counts["oversized requests: nodes they stored"] += stored
        assert stored == 0
        ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        status, _headers, _answer = _post(
            server, json.dumps({**ok, "max_tokens": 2}).encode()
        )
        assert status == 200


# --- a Hub that cuts, stalls and changes files (issue 43) ------------------------

# The bounds of a stalled download and of a stalled Hub request here (seconds;
# huggingface_hub reads both variables as integers). Not 1 for downloads: a
# download pauses 1 s before it asks again, which would leave a line that
# breaks no try within the bound.
DOWNLOAD_BOUND = 2
HUB_BOUND = 1
DOWNLOAD_SHAPES = (
    "cut mid-file",
    "stalled mid-file",
    "flaky line",
    "new version",
    "new version, stalled",
)


def _one_download(
    shape: str, at: int, hub: HubServer, data_dir: Path, models: tuple[Path, Path]
) -> tuple[int, int]:
    """One download shape against ``hub`` (serving ``models[0]`` as its
    file); the failures it said in one line, and the bytes the Hub sent."""
    fake = hub.hub
    old, new = models
    size = old.stat().st_size
    sent = fake.bytes_sent
    said = 0
    expected = old
    if shape.startswith("new version"):
        assert _pull(hub, data_dir, DOWNLOAD_BOUND).json["sha256"] == sha256(old)
        fake.repos[DL_REPO].files[DL_FILE] = FakeFile(new)
        expected = new
    if shape == "flaky line":
        # Each answer breaks after an eighth to five eighths of the file.
        fake.cut_every = size // 8 + at // 2
        pulled = _pull(hub, data_dir, DOWNLOAD_BOUND)
        fake.cut_every = None
        assert pulled.returncode == 0, pulled.stderr
        # Resumed without a word: only progress lines.
        lines = pulled.stderr.splitlines()
        assert all(line.startswith(f"{DL_FILE}: ") for line in lines), lines
        assert pulled.json["fetched_bytes"] == size
    elif shape == "new version":
        pulled = _pull(hub, data_dir, DOWNLOAD_BOUND)
        # Same size, other bytes: fetched again, whole.
        assert pulled.json["fetched_bytes"] == size
    else:
        fault = "cut_at" if shape == "cut mid-file" else "stall_at"
        setattr(fake, fault, at)
        _only_progress_then(_pull(hub, data_dir, DOWNLOAD_BOUND), "stalled")
        said += 1
        setattr(fake, fault, None)
        # What came is kept; a changed file's old version stays, as recorded.
        assert _dl_part(data_dir).stat().st_size == at
        if shape == "new version, stalled":
            assert sha256(_dl_path(data_dir)) == sha256(old)
            assert _recorded_sha256(hub, data_dir) == sha256(old)
        resumed = _pull(hub, data_dir, DOWNLOAD_BOUND)
        assert resumed.json["fetched_bytes"] == size - at, resumed.stderr
    # The file is the Hub's version now, and its record says the same.
    assert sha256(_dl_path(data_dir)) == sha256(expected)
    assert _recorded_sha256(hub, data_dir) == sha256(expected)
    assert not _dl_part(data_dir).exists()
    return said, fake.bytes_sent - sent


def test_downloads_that_are_cut_stalled_or_changed(
    tmp_path, tiny_model, other_tiny_model, tally
):
    """``arbor models pull`` against a Hub that cuts, stalls, breaks every
    few bytes, or changes the file between two pulls (same size, other
    bytes), at random offsets: each failure one line within the bound, the
    next pull resuming (no byte sent twice) or fetching the new version, the
    recorded sha256 that of the bytes on disk."""
    rng = random.Random(4301)
    size = tiny_model.stat().st_size
    assert other_tiny_model.stat().st_size == size  # only a hash tells them apart
    shapes = list(DOWNLOAD_SHAPES) * R
    rng.shuffle(shapes)
    fake = FakeHub()
    fake.add(DL_REPO, {DL_FILE: tiny_model})
    with HubServer(fake) as hub:
        for n, shape in enumerate(shapes):
            fake.repos[DL_REPO].files[DL_FILE] = FakeFile(tiny_model)
            data_dir = tmp_path / f"pull-{n}"
            data_dir.mkdir()
            at = rng.randrange(1, size)
            said, sent = _one_download(
                shape, at, hub, data_dir, (tiny_model, other_tiny_model)
            )
            whole = 2 * size if shape.startswith("new version") else size
            tally.counts[f"downloads: {shape}"] += 1
            tally.counts["downloads: failures said in one line"] += said
            tally.counts["downloads: bytes the Hub sent twice"] += sent - whole
            tally.counts["downloads: record sha256 == bytes on disk"] += 1
            assert sent == whole, f"{shape} at {at}: {sent} bytes sent for {whole}"


def test_hub_searches_that_stall_or_ask_to_wait(tmp_path, tiny_model, tally):
    """``arbor models search`` against a Hub whose answer never comes, stops
    halfway, comes a byte at a time, or is a 503 first: one line within the
    bound, or the answer (asked again, quietly)."""
    shapes = [*API_STALLS, "busy once"] * R
    hubs = []
    with contextlib.ExitStack() as stack:
        for shape in shapes:
            fake = FakeHub()
            fake.add(DL_REPO, {DL_FILE: tiny_model})
            if shape == "busy once":
                fake.api_busy = 1
            else:
                fake.api_stall = shape
            hubs.append(stack.enter_context(HubServer(fake)))
        env = {"HF_HUB_DISABLE_TELEMETRY": "1", HUB_TIMEOUT_ENV: str(HUB_BOUND)}
        calls = [
            {
                "args": ("models", "search", "tiny"),
                "data_dir": tmp_path / f"search-{n}",
                "env": {**env, "HF_ENDPOINT": hub.url},
                "timeout": 60,
            }
            for n, hub in enumerate(hubs)
        ]
        results = run_parallel(calls)
    for shape, result in zip(shapes, results, strict=True):
        assert_clean(result)
        if shape == "busy once":
            assert [r["repo"] for r in result.json["repositories"]] == [DL_REPO]
            tally.counts["hub search: busy once, answered"] += 1
            continue
        assert result.rc == 1, result.describe()
        assert f"did not answer within {HUB_BOUND} s" in result.message
        assert result.seconds >= HUB_BOUND
        tally.counts[f"hub search: {shape}, one line"] += 1


# --- a worker that stops answering (issue 43) --------------------------------------


def test_a_sigstopped_worker_under_send_is_lost_within_the_bound(
    tmp_path, tiny_model, tally
):
    """``arbor --worker A --worker B send`` while one worker (either, at
    random) is SIGSTOPped mid-reply: declared lost in one line, not before
    ``ARBOR_WORKER_TIMEOUT`` and long before "for good" (the time it took is
    in the summary's notes), the message kept, the reply marked
    ``interrupted`` by the command as it exits."""
    # Seeded so that one round stops the first worker, the one that
    # test_cli_worker_lost does not stop.
    rng = random.Random(1)
    for n in range(R):
        data_dir = tmp_path / f"workers-{n}"
        data_dir.mkdir()
        addresses = [f"127.0.0.1:{port}" for port in free_ports(2)]
        which = rng.randrange(2)
        with running_worker(addresses[0]) as one, running_worker(addresses[1]) as two:
            stopped_process = (one, two)[which][0]
            workers = ["--worker", addresses[0], "--worker", addresses[1]]
            on_workers = ["--data-dir", data_dir, "--model", tiny_model, *workers]
            root = run_cli(*workers, "new", data_dir=data_dir, model=tiny_model)
            env = {**os.environ, WORKER_TIMEOUT_ENV: str(WORKER_BOUND_S)}
            sending, reply = _worker_sending(
                data_dir, on_workers, root.json["node"], env
            )
            try:
                _worker_streaming(data_dir, reply, sending)
                stopped_process.send_signal(signal.SIGSTOP)
                stopped = time.monotonic()
                out, err = sending.communicate(timeout=WORKER_WAIT_S)
                took = time.monotonic() - stopped
            finally:
                stopped_process.send_signal(signal.SIGCONT)
                if sending.poll() is None:  # hung: it goes, and its child too
                    os.killpg(sending.pid, signal.SIGKILL)
                    sending.communicate()
        lost = addresses[which]
        assert sending.returncode == 1, err
        assert err.splitlines()[-1] == (
            f"arbor: error: Worker {lost} was lost (it stopped answering). Your "
            "messages and checkpoints are saved."
        )
        assert len(err.splitlines()) <= 3, err  # llama.cpp's lines, then ours
        assert "Traceback" not in err and out == ""
        assert took >= WORKER_BOUND_S
        # Marked by the command as it exited, before anything opened the file.
        assert _worker_status(data_dir, reply) == "interrupted"
        shown = run_cli("show", reply, data_dir=data_dir, model=tiny_model)
        assert shown.json["messages"][1]["text"] == "Tell me a long story."
        tally.counts[f"workers: {('first', 'second')[which]} SIGSTOPped, lost"] += 1
        tally.notes.append(
            f"SIGSTOPped worker declared lost {took:.1f} s after the stop "
            f"(bound {WORKER_BOUND_S} s)"
        )
