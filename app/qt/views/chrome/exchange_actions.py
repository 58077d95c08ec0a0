"""File → Export conversation… and File → Import conversation…: ask, then do.

The questions (which file?) are module-level functions so that tests can
answer them without a native file dialog. Both open in the folder a
conversation file was last chosen in, this session, else the home folder
(``conversation_folder``). Exporting reads the database (``storage.exchange``);
importing reads the file here, refusing one that is not an Arbor export with a
message that names it, and leaves the checks of its messages and the writing
to the engine worker (an ``ImportConversation`` job). Failures a person can
act on go to ``show_error``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QFileDialog, QWidget

from app.qt.views.dialogs.errors import show_error
from storage import conversation_rows, exchange
from storage.db import Database
from storage.errors import ExchangeError, NotFound, StorageUnavailable

MARKDOWN_FILTER = "Markdown (*.md)"
JSON_FILTER = "Arbor conversation, whole tree (*.json)"
_FORMAT_BY_FILTER = {MARKDOWN_FILTER: "markdown", JSON_FILTER: "json"}
_SUFFIX = {"markdown": ".md", "json": ".json"}

# What an export or an import can fail with, short of a bug.
_EXPECTED = (ExchangeError, StorageUnavailable, NotFound, OSError)

# The folder a conversation file was last exported to or imported from, for
# this session only. Remembering it across sessions would make it a
# preference, and preferences are saved by the presenter (through the engine
# worker, not on a read-only database), which these functions are not given;
# a setting written here behind its back would be lost at its next save,
# which writes every preference from its own copy.
_last_folder: Path | None = None


def conversation_folder() -> Path:
    """Where the import and export dialogs open: the folder a conversation file
    was last chosen in (this session, if it still exists), else the home folder.

    Never the working folder, where a dialog given no folder opens: launched
    from a bundle or a virtual environment, that is deep in site-packages.
    """
    folder = _last_folder
    return folder if folder is not None and folder.is_dir() else Path.home()


def _remember_folder(path: Path) -> None:
    global _last_folder
    _last_folder = path.parent


def ask_export_path(parent: QWidget, suggested: Path) -> tuple[Path, str] | None:
    """Ask where to export; return the file and "markdown" or "json", or None.

    The format is the chosen filter's, unless the name typed ends in the
    other format's extension.
    """
    name, chosen = QFileDialog.getSaveFileName(
        parent,
        "Export conversation",
        str(suggested),
        ";;".join([MARKDOWN_FILTER, JSON_FILTER]),
    )
    if not name:
        return None
    path = Path(name)
    _remember_folder(path)
    fmt = format_for(path, _FORMAT_BY_FILTER.get(chosen, "markdown"))
    if not path.suffix:
        path = path.with_suffix(_SUFFIX[fmt])
    return path, fmt


def ask_import_path(parent: QWidget) -> Path | None:
    """Ask for a conversation file to import; None if the user cancels."""
    name, _chosen = QFileDialog.getOpenFileName(
        parent,
        "Import conversation",
        str(conversation_folder()),
        f"{JSON_FILTER};;All files (*)",
    )
    if not name:
        return None
    path = Path(name)
    _remember_folder(path)
    return path


def format_for(path: Path, default: str) -> str:
    """The export format a file name asks for (its extension), else ``default``."""
    suffix = path.suffix.lower()
    if suffix in (".md", ".markdown"):
        return "markdown"
    if suffix == ".json":
        return "json"
    return default


def export_conversation(
    parent: QWidget,
    db: Database,
    conversation_id: int,
    node_id: int | None,
) -> Path | None:
    """Ask for a file and export to it: Markdown of the path to ``node_id``, or
    the whole tree as JSON. Returns the file written, or None."""
    try:
        title = conversation_rows.get_conversation(db, conversation_id).title
    except (StorageUnavailable, NotFound) as exc:
        show_error(parent, "Could not export the conversation", str(exc))
        return None
    answer = ask_export_path(parent, conversation_folder() / f"{_file_stem(title)}.md")
    if answer is None:
        return None
    path, fmt = answer
    try:
        if fmt == "json":
            text = exchange.dumps_json(exchange.export_json(db, conversation_id))
        else:
            text = exchange.export_markdown(db, conversation_id, node_id)
        exchange.write_text_file(path, text)
    except _EXPECTED as exc:
        show_error(parent, "Could not export the conversation", _reason(exc))
        return None
    return path


def read_import(parent: QWidget) -> Any | None:
    """Ask for a conversation file and read its JSON; None if the user cancels,
    or it cannot be read or is not an Arbor export (the error, naming the
    file, is shown). The worker imports it."""
    path = ask_import_path(parent)
    if path is None:
        return None
    try:
        return exchange.read_json_file(path)
    except _EXPECTED as exc:
        show_error(parent, "Could not import the conversation", _reason(exc))
        return None


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        return f"{exc.filename}: {exc.strerror}."
    return str(exc)


def _file_stem(title: str) -> str:
    # A title is free text; a file name cannot hold some of it on some systems.
    kept = "".join(ch if ch.isalnum() or ch in " -_." else " " for ch in title)
    return " ".join(kept.split())[:80].strip(" .") or "conversation"
