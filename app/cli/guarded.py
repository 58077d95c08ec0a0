"""A command that uses workers runs in a child process of its own (issue 25).

llama.cpp's RPC client has no way to fail softly: a worker that stops
answering while a model is loaded on it aborts the process that uses it.
The window runs its engine in a child process for that (``app/runner``);
the command line runs the whole command there: ``arbor --worker … chat``
starts this Arbor again with ``GUARDED`` set, hands it the terminal, and
returns its exit status. If that process is ended by a signal (llama.cpp's
abort), the user reads one line naming the worker that no longer answers,
not llama.cpp's abort; what the command stored before is in the database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from types import FrameType

from app.platform.launch import arbor_command

# Set in the child: it runs the command itself.
GUARDED = "ARBOR_GUARDED"


def needs_guard(workers: Sequence[str]) -> bool:
    """Whether a command with ``workers`` must run in a child: it names
    workers, and this process is not that child already."""
    return bool(workers) and not os.environ.get(GUARDED)


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

    print(f"arbor: error: {lost_message(unanswering(workers), code)}", file=sys.stderr)
    return 1
