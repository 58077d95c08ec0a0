"""Helpers of the fault-injection suite (``tests/system/test_faults.py``).

The faults are done to the real thing: ``python -m app`` in its own process,
killed with SIGKILL, run side by side, pointed at damaged or foreign files.
These helpers start those processes, look at the database afterwards with
plain ``sqlite3`` (never through Arbor's own code, which is under test), and
keep the counts the suite prints at the end.

``ARBOR_FAULT_ROUNDS`` scales the number of rounds ("5", or "5x"); the
default (1) keeps the suite inside a normal ``make test`` run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DB_NAME = "arbor.sqlite3"

# Statuses of a reply that finished (whatever stopped it); a finished reply
# must survive anything that happens later.
FINISHED = ("complete", "stopped", "truncated")


def rounds() -> int:
    """The multiplier of every count in the suite (``ARBOR_FAULT_ROUNDS``)."""
    raw = os.environ.get("ARBOR_FAULT_ROUNDS", "1").strip().lower().rstrip("x")
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a CLI process: this checkout's code before any install.

    With ``PYTHONPATH`` the checkout shadows the editable install even when
    the process runs in another folder (the relative ``--data-dir`` case).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env.update(extra or {})
    return env


Arg = str | bytes | int | os.PathLike[str]


def cli_argv(
    *args: Arg, data_dir: Path | str | None = None, model: Path | None = None
) -> list[str | bytes]:
    """``python -m app [--data-dir D] [--model M] ARGS`` (bytes stay bytes)."""
    argv: list[str | bytes] = [sys.executable, "-m", "app"]
    if data_dir is not None:
        argv += ["--data-dir", str(data_dir)]
    if model is not None:
        # One thread each: llama.cpp's worker threads spin while they wait, so
        # two processes of two threads on two cores run ~5x slower, not 2x.
        argv += ["--model", str(model), "--threads", "1"]
    for arg in args:
        argv.append(arg if isinstance(arg, bytes) else str(arg))
    return argv


@dataclass
class CliResult:
    """Exit status and output of one ``arbor`` process."""

    argv: list[str | bytes]
    rc: int
    stdout: str
    stderr: str
    seconds: float

    def __iter__(self) -> Iterator[Any]:
        # ``rc, out, err = run_cli(...)`` reads naturally in tests.
        return iter((self.rc, self.stdout, self.stderr))

    @property
    def json(self) -> Any:
        """The JSON the command printed (it must have succeeded)."""
        assert self.rc == 0, self.describe()
        return json.loads(self.stdout)

    @property
    def message(self) -> str:
        """The error message, as the person reads it."""
        return self.stderr.strip()

    def describe(self) -> str:
        """The command and what it said, for assertion messages."""
        shown = " ".join(
            a.decode("utf-8", "backslashreplace") if isinstance(a, bytes) else a
            for a in self.argv[2:]
        )
        return f"`{shown}` -> rc {self.rc}, stderr: {self.stderr.strip()[-2000:]!r}"


def assert_clean(result: CliResult) -> CliResult:
    """The CLI contract: 0, or nonzero with one human line; never a traceback.

    A negative status is a death by signal (a native crash): never clean.
    """
    assert "Traceback" not in result.stderr, result.describe()
    assert result.rc >= 0, f"killed by signal {-result.rc}: " + result.describe()
    if result.rc != 0:
        lines = result.message.splitlines()
        assert len(lines) == 1, "not a one-line message: " + result.describe()
        assert lines[0].startswith("arbor"), result.describe()
    return result


def finish(
    process: subprocess.Popen[bytes], argv: list[str | bytes], started: float
) -> CliResult:
    """Collect a started CLI process that ran to its end."""
    out, err = process.communicate()
    return CliResult(
        argv,
        process.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        time.monotonic() - started,
    )


def run_cli(
    *args: Arg,
    data_dir: Path | str | None = None,
    model: Path | None = None,
    cwd: Path = ROOT,
    timeout: float = 120,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> CliResult:
    """Run the CLI to its end; assert the contract (``assert_clean``) unless
    ``check`` is false. ``env`` adds to its environment (``cli_env``); a
    process still running after ``timeout`` is killed, which the contract
    calls a death by signal."""
    argv = cli_argv(*args, data_dir=data_dir, model=model)
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        err += f"\n(fault harness: killed after {timeout} s)".encode()
    result = CliResult(
        argv,
        process.returncode,
        out.decode("utf-8", "replace"),
        err.decode("utf-8", "replace"),
        time.monotonic() - started,
    )
    return assert_clean(result) if check else result


def spawn_cli(
    *args: Arg, data_dir: Path | None = None, model: Path | None = None
) -> tuple[subprocess.Popen[bytes], list[str | bytes], float]:
    """Start the CLI without waiting (to kill it, or to race it)."""
    argv = cli_argv(*args, data_dir=data_dir, model=model)
    process = subprocess.Popen(
        argv, cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    return process, argv, time.monotonic()


# Imports the CLI, waits for a line on stdin, then runs it on its arguments:
# the same ``app.cli.commands.run`` as ``python -m app`` (whose ``main`` only adds
# ``sys.exit``), minus the second of start-up, so a race can be aimed.
_ARMED = (
    "import sys\n"
    "from app.cli.commands import run\n"
    "sys.stdin.readline()\n"
    "sys.exit(run(sys.argv[1:]))\n"
)


class ArmedCli:
    """A CLI process started ahead, that acts when ``fire()`` is called."""

    def __init__(self, *args: Arg, data_dir: Path | None = None) -> None:
        argv = cli_argv(*args, data_dir=data_dir)
        self.argv: list[str | bytes] = [sys.executable, "-c", _ARMED, *argv[3:]]
        self.process = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=cli_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.started = time.monotonic()

    def fire(self) -> None:
        """Let it run its command now."""
        stdin = self.process.stdin
        assert stdin is not None
        # Forgotten by the Popen once closed: communicate() would flush it.
        self.process.stdin = None
        with contextlib.suppress(BrokenPipeError):  # it may have died already
            stdin.write(b"go\n")
            stdin.close()

    def result(self) -> CliResult:
        """Wait for its end (firing it first if nobody did)."""
        if self.process.stdin is not None:
            self.fire()
        return finish(self.process, self.argv, self.started)


def run_parallel(calls: Sequence[dict[str, Any]], workers: int = 2) -> list[CliResult]:
    """Run independent CLI calls a few at a time (each dict: ``run_cli`` kwargs
    with its positional arguments under ``"args"``); results in order.

    Only for calls that do not interact: the point is wall time on a
    two-core machine, not a race (the race tests start processes themselves).
    """

    def one(call: dict[str, Any]) -> CliResult:
        kwargs = dict(call)
        args = kwargs.pop("args")
        kwargs["check"] = False
        return run_cli(*args, **kwargs)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, calls))


# --- looking at a database from outside ------------------------------------------


@contextlib.contextmanager
def sqlite(path: Path, readonly: bool = False) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection, closed afterwards (``with con:`` only commits)."""
    if readonly:
        con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=30)
    else:
        con = sqlite3.connect(path, timeout=30)
    try:
        yield con
    finally:
        con.close()


def integrity(path: Path) -> tuple[str, list[Any]]:
    """``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check`` of a database."""
    with sqlite(path) as con:
        check = " ".join(r[0] for r in con.execute("PRAGMA integrity_check"))
        foreign = con.execute("PRAGMA foreign_key_check").fetchall()
    return check, foreign


def assert_intact(path: Path) -> None:
    """The database is sound: integrity ok, no dangling reference, no orphan."""
    check, foreign = integrity(path)
    assert check == "ok", f"integrity_check: {check}"
    assert foreign == [], f"foreign_key_check: {foreign}"
    with sqlite(path) as con:
        orphans = con.execute(
            "SELECT id FROM node WHERE parent_id IS NOT NULL AND parent_id NOT IN "
            "(SELECT id FROM node)"
        ).fetchall()
        blobless = con.execute(
            "SELECT checkpoint_id FROM checkpoint_blob WHERE checkpoint_id NOT IN "
            "(SELECT id FROM checkpoint)"
        ).fetchall()
    assert orphans == [], f"nodes whose parent is gone: {orphans}"
    assert blobless == [], f"blobs of no checkpoint: {blobless}"


@dataclass(frozen=True)
class Row:
    """A node as read straight from the table."""

    id: int
    conversation_id: int
    parent_id: int | None
    role: str
    text: str
    status: str


def nodes(path: Path) -> dict[int, Row]:
    """Every node of the database, by id."""
    with sqlite(path) as con:
        rows = con.execute(
            "SELECT id, conversation_id, parent_id, role, text, status FROM node"
        ).fetchall()
    return {r[0]: Row(*r) for r in rows}


def finished_replies(path: Path) -> dict[int, str]:
    """The text of every reply that finished, by id."""
    return {
        n.id: n.text
        for n in nodes(path).values()
        if n.role == "assistant" and n.status in FINISHED
    }


def copy_database(source: Path, target: Path) -> Path:
    """Copy a closed database file (its folder is created)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(source.read_bytes())
    return target


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_snapshot(folder: Path) -> dict[str, str]:
    """Every file of a folder (not below it) with its SHA-256."""
    return {p.name: sha256(p) for p in sorted(folder.iterdir()) if p.is_file()}


# --- the machine: mounts ---------------------------------------------------------


def _mount(*args: str) -> str | None:
    """Run mount(8); None on success, else why not (for a skip reason)."""
    try:
        done = subprocess.run(
            ["mount", *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"mount could not run: {exc}"
    if done.returncode != 0:
        return f"mount {' '.join(args)} refused: {done.stderr.strip()}"
    return None


def unmount(target: Path) -> None:
    """Unmount (lazily if something still holds it open)."""
    done = subprocess.run(["umount", str(target)], capture_output=True, timeout=30)
    if done.returncode != 0:
        subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=30)


def mount_tmpfs(target: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` on ``target``; None, or why it cannot be done."""
    target.mkdir(parents=True, exist_ok=True)
    return _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target))


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[str | None]:
    """Make a file or folder read-only for the CLI; yields None, or why not.

    Root ignores permission bits, so as root the path is bind-mounted on
    itself read-only (the kernel then refuses writes with EROFS, to root too).
    Running the CLI as an unprivileged user would need the interpreter to be
    reachable by that user, which it is not everywhere (a pyenv under a 0700
    /root). Without root the permission bits are enough.
    """
    if os.geteuid() != 0:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield None
        finally:
            path.chmod(mode)
        return
    reason = _mount("--bind", str(path), str(path))
    if reason is not None:
        yield reason
        return
    try:
        reason = _mount("-o", "remount,bind,ro", str(path))
        yield reason
    finally:
        unmount(path)


class Problems:
    """Several checks of one scenario, reported together at the end.

    A scenario with stages (fill the disk, read, delete, retry) goes on past
    a broken stage, so one run shows every stage that breaks the contract.
    """

    def __init__(self) -> None:
        self.found: list[str] = []

    def check(self, condition: object, message: str) -> bool:
        """Note ``message`` when ``condition`` is false; return the condition."""
        if not condition:
            self.found.append(message)
        return bool(condition)

    def clean(self, result: CliResult, where: str = "") -> bool:
        """``assert_clean``, noted (after ``where``) rather than raised."""
        try:
            assert_clean(result)
        except AssertionError as exc:
            self.found.append(where + str(exc))
            return False
        return True

    def assert_none(self) -> None:
        """Fail with every problem noted, if any."""
        assert not self.found, "\n".join(
            f"{n}. {p}" for n, p in enumerate(self.found, 1)
        )


def snapshot_changes(before: dict[str, str], after: dict[str, str]) -> str:
    """What differs between two ``folder_snapshot``s, in words."""
    changes = [f"+{n}" for n in sorted(set(after) - set(before))]
    changes += [f"-{n}" for n in sorted(set(before) - set(after))]
    changes += [
        f"~{n} (sha256 changed)"
        for n in sorted(set(before) & set(after))
        if before[n] != after[n]
    ]
    return ", ".join(changes)


# --- counts ----------------------------------------------------------------------


@dataclass
class Tally:
    """What the suite did and saw, printed as its closing summary."""

    counts: Counter[str] = field(default_factory=Counter)
    damage: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The closing note: counts, then the damage table."""
        lines = [f"fault-injection summary (ARBOR_FAULT_ROUNDS={rounds()})"]
        for key in sorted(self.counts):
            lines.append(f"  {key:<44} {self.counts[key]:>6}")
        if self.damage:
            tried = len(self.damage)
            detected = sum(1 for d in self.damage.values() if d["detected"])
            repaired = sum(1 for d in self.damage.values() if d["repaired"])
            same = sum(1 for d in self.damage.values() if d["same_reply"])
            lines.append(
                f"  checkpoint damage: {tried} kinds tried, {detected} detected, "
                f"{repaired} repaired, {same} gave the undamaged reply"
            )
            lines.append(
                f"    {'kind':<28} {'rc':>3} {'detected':>9} {'repaired':>9} "
                f"{'same reply':>11}  fallback / message"
            )
            for kind, d in self.damage.items():
                lines.append(
                    f"    {kind:<28} {d['rc']:>3} {_yn(d['detected']):>9} "
                    f"{_yn(d['repaired']):>9} {_yn(d['same_reply']):>11}  "
                    f"{d['note'][:90]}"
                )
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


def _yn(value: bool | None) -> str:
    return "-" if value is None else ("yes" if value else "NO")
