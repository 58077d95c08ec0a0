"""Entry point of the ``arbor`` command.

``arbor`` alone (or with only global flags such as ``--data-dir`` and
``--model``) opens the window; every subcommand goes to the headless CLI.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Sequence


def wants_window(argv: Sequence[str]) -> bool:
    """Whether the command line names no subcommand (and asks for no help)."""
    if any(arg in ("-h", "--help") for arg in argv):
        return False
    from app.cli.arguments import UsageError
    from app.cli.parser import build_parser

    try:
        args = build_parser().parse_args(list(argv))
    except UsageError:
        return False  # the CLI reports the mistake
    return args.command is None


def main() -> None:
    """Run Arbor with the process's arguments and exit with its status."""
    # A frozen build starts the engine's child process (app/runner, when a
    # model is placed on workers) as this same program: there, this runs
    # the child instead of Arbor (PyInstaller's documented entry point).
    multiprocessing.freeze_support()
    argv = sys.argv[1:]
    if wants_window(argv):
        from app.cli.parser import build_parser
        from app.platform.qt_deps import check_xcb

        missing = check_xcb()
        if missing:  # Qt would abort with a message nobody can act on
            print(missing, file=sys.stderr)
            sys.exit(1)
        from app.qt.gui import run_gui

        args = build_parser().parse_args(argv)
        sys.exit(run_gui(args.data_dir, args.model, args.verbose))
    from app.cli.commands import run

    sys.exit(run(argv))


if __name__ == "__main__":
    main()
