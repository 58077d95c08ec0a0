"""Entry point of the ``arbor`` command."""

from __future__ import annotations

import sys


def main() -> None:
    """Run Arbor with the process's arguments and exit with its status."""
    from app.cli import run

    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
