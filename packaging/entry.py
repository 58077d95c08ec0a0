"""The script PyInstaller freezes: the same ``main`` as the ``arbor`` command."""

from app.__main__ import main

if __name__ == "__main__":
    main()
