"""A command that uses workers runs in a child process of its own (issue 25).

llama.cpp's RPC client has no way to fail softly: a worker that stops
answering while a model is loaded on it aborts the process that uses it.
The window runs its engine in a child process for that (``app/runner``);
the command line runs the whole command there: ``arbor --worker … chat``
starts this Arbor again with ``GUARDED`` set, hands it the terminal, and
returns its exit status. If that process is ended by a signal (llama.cpp's
abort), the user reads one line naming the worker that no longer answers,
not llama.cpp's abort; what the command stored before is in the database,
and the reply it was writing is marked ``interrupted`` before this process
exits, as the window marks it (issue 43), not left ``generating`` until the
next process opens the database.

A worker that stops answering without closing its connection (SIGSTOP, a
frozen machine, a network gone) is bounded the same way in both: the child
gives llama.cpp's sockets to the workers a timeout of
``worker_sockets.worker_timeout()`` (60 s; ``ARBOR_WORKER_TIMEOUT``), after
which llama.cpp aborts it as for a worker that is gone, and this process
says which worker was lost, within that bound and the hello that names it.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from app.platform.launch import arbor_command

# Set in the child: it runs the command itself.
GUARDED = "ARBOR_GUARDED"

log = logging.getLogger(__name__)


def needs_guard(workers: Sequence[str]) -> bool:
    """Whether a command with ``workers`` must run in a child: it names
    workers, and this process is not that child already."""
    return bool(workers) and not os.environ.get(GUARDED)


def bound_worker_waits(workers: Sequence[str]) -> None:
    """In the child, bound every wait for a worker from now on
    (``worker_sockets``), before llama.cpp connects to one."""
    from app.runner.worker_sockets import WorkerSockets

    WorkerSockets(workers).start()


def run_guarded(argv: Sequence[str], workers: Sequence[str]) -> int:
    """Run ``arbor ARGV`` in a child process; its exit status, or 1 with a
    line on stderr if llama.cpp ended it (a worker lost)."""
    child = subprocess.Popen(
        [*arbor_command(), *argv], env={**os.environ, GUARDED: "1"}
    )

    def forward(signum: int, _frame: FrameType | None) -> None:
        # A service manager's SIGTERM is the child's to act on (it writes its
        # checkpoints out and stops); Ctrl+C reaches it from the terminal.
        child.send_signal(signum)

    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
        signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
    }
    try:
        code = child.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if code >= 0:
        return code
    # Imported here: they load ggml's library, needed only now.
    from app.runner.child_process import lost_message, unanswering

    lost = unanswering(workers)
    _mark_cut_reply(argv)
    print(f"arbor: error: {lost_message(lost, code)}", file=sys.stderr)
    return 1


def _mark_cut_reply(argv: Sequence[str]) -> None:
    """Mark the reply the child was writing ``interrupted``, as the next
    process to open the database would (``mark_interrupted_generations``).

    Its database is the one its command line names; that command line was
    checked here before the child started, so it parses again.
    """
    from app.cli.arguments import UsageError
    from app.cli.parser import build_parser
    from app.platform.paths import database_path
    from storage import node_rows
    from storage.db import open_database
    from storage.errors import StorageUnavailable

    try:
        args: argparse.Namespace = build_parser().parse_args(list(argv))
    except UsageError:  # cannot be: it parsed before the child started
        log.exception("the command line of the lost child")
        return
    path = database_path(args.data_dir)
    if not path.is_file():
        return  # it died before it made one: nothing to mark
    try:
        db = open_database(path)
        try:
            node_rows.mark_interrupted_generations(db)
        finally:
            db.close()
    except StorageUnavailable as exc:
        # The loss is what the user hears of; the next open marks it.
        log.error("the cut reply is not marked interrupted: %s", exc)
