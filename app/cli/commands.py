"""The headless command line: every service operation, printing JSON.

For scripting, tests and benchmarks. Bad input, and a failure a person can
act on (a locked or full database, an operation SQLite refused), exits
non-zero with a one-line message on stderr, never a traceback. The commands
that write checkpoints keep them within the budget the window's Storage
dialog sets. Here: parsing, dispatch to the command's body (each family's
module, named by ``app.cli.parser``) and the failures' one-line messages.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Callable, Sequence

from app.backend.errors import ContextFullError, Interrupted, InvalidSetting
from app.cli.arguments import UsageError, sampling_given
from app.cli.guarded import bound_worker_waits, needs_guard, run_guarded
from app.cli.parser import backend_settings, build_parser
from app.conversation.errors import USER_ERRORS
from app.library.errors import LIBRARY_ERRORS

log = logging.getLogger(__name__)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit status."""
    try:
        args = _parse(argv)
        if needs_guard(args.workers):
            # A lost worker aborts the process that uses it: not this one.
            return run_guarded(sys.argv[1:] if argv is None else argv, args.workers)
        if args.workers:
            # The child: a worker that stops answering ends it within a bound.
            bound_worker_waits(args.workers)
        _init_logging(args.verbose)
        # The databases a command opens are closed when it ends, so that
        # what their writers hold back (a restore's bookkeeping) is written.
        with contextlib.ExitStack() as args.closing:
            handler: Callable[[argparse.Namespace], int] = args.handler
            return handler(args)
    except UsageError as exc:
        print(f"arbor: usage error: {exc} (see arbor --help)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (e.g. `arbor tree 1 | head`): not an error.
        sys.stderr.close()
        return 0
    except ContextFullError as exc:
        print(f"arbor: error: {_context_full_line(exc)}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        # Ctrl+C while a prompt was read: as Stop in the window, what was
        # sent stays stored, unanswered (``send`` then answers it).
        print(f"arbor: stopped: {exc} Nothing was answered.", file=sys.stderr)
        return 130
    except (*USER_ERRORS, *LIBRARY_ERRORS) as exc:
        print(f"arbor: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        refused = _database_refusal(exc)
        if refused is None:
            raise
        log.debug("the database refused the command", exc_info=True)
        print(f"arbor: error: {refused}", file=sys.stderr)
        return 1


def _context_full_line(exc: ContextFullError) -> str:
    """What a full context says here: the service's words (a larger context
    named only where one holds the message and the model reads it), and the
    option that gives it, since the CLI's context size is ``--n-ctx``."""
    size = exc.raise_to
    return f"{exc}" if size is None else f"{exc} Here: --n-ctx {size}."


def _database_refusal(exc: Exception) -> str | None:
    """The line to print for an operation SQLite refused, or None for others.

    ``storage.db.translate_errors`` turns the failures it knows (locked,
    full, read-only, corrupt, ...) into ``StorageUnavailable``; an
    OperationalError it lets through is one it has no sentence for, such as
    a limit of SQLite reached (too many levels of trigger recursion, too
    many variables). That is no bad input, but the CLI still owes a script
    one line, not a traceback; ``--verbose`` logs the traceback.
    """
    import sqlite3

    # Imported here, on the way out: ``list`` starts without SQLAlchemy.
    from sqlalchemy.exc import OperationalError

    cause = exc.orig if isinstance(exc, OperationalError) else exc
    if not isinstance(cause, sqlite3.OperationalError):
        return None
    return f"the database could not do this: {cause}."


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse and check the command line; every mistake is a ``UsageError``.

    The backend and sampling settings are built here, before any model is
    loaded, so that a bad value fails at once with its own message.
    """
    args = build_parser().parse_args(argv)
    if args.command is None:
        raise UsageError("name a command")
    try:
        args.settings = backend_settings(args)
        # Only the commands that generate have sampling flags.
        args.sampling = sampling_given(args) if hasattr(args, "temperature") else None
    except InvalidSetting as exc:
        raise UsageError(str(exc)) from exc
    return args


def _init_logging(verbose: bool) -> None:
    if verbose:
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    else:
        # Without a handler Python prints warnings and errors to stderr; the
        # CLI's stderr is one line per failure, whose message already carries
        # what llama.cpp said.
        logging.getLogger().addHandler(logging.NullHandler())
