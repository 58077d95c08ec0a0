"""``arbor models …``: the model library on the command line.

``list`` (installed), ``catalog`` (recommended, with the fit for this
machine), ``search QUERY`` (the Hub), ``pull REPO [FILE]`` (or a catalog id),
``add PATH`` and ``rm NAME``. JSON on stdout like every other command;
download progress on stderr.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from app.cli.arguments import CliParser, UsageError, path_type, text_type
from app.cli.interrupt import StopRequest
from app.cli.output import emit
from app.library import names
from app.library.catalog import CatalogEntry, shipped_catalog
from app.library.download import DownloadStopped, Progress, pull
from app.library.fit import assess, machine_memory
from app.library.hub import (
    BASE_MODEL_NOTE,
    HubError,
    RemoteFile,
    list_files,
    search,
)
from app.library.installed import (
    MODELS_DIR_ENV,
    InstalledModel,
    ModelLibrary,
    models_dir_for,
)
from app.platform import paths
from app.platform.starter_model import starter_model_path
from app.text.quantities import format_bytes, format_duration


def add_parser(sub: Any) -> None:
    """Add ``models`` and its commands to the CLI's subparsers ``sub``."""
    models = sub.add_parser("models", help="find, download and manage models")
    models.set_defaults(handler=_cmd_models)
    models.add_argument(
        "--models-dir",
        type=path_type("models folder"),
        help=f"where downloads go (default: ${MODELS_DIR_ENV}, else DATA_DIR/models)",
    )
    actions = models.add_subparsers(dest="models_command", parser_class=CliParser)
    actions.add_parser("list", help="the models on this machine")
    actions.add_parser(
        "catalog", help="recommended models, and whether each fits this machine"
    )
    find = actions.add_parser("search", help="GGUF repositories on the Hub")
    find.add_argument("query", type=text_type("search"))
    find.add_argument("--limit", type=int, default=10, help="repositories (10)")
    find.add_argument(
        "--files", type=int, default=5, help="list the files of the first N (5)"
    )
    get = actions.add_parser(
        "pull", help="download REPO's FILE (or a catalog id), resuming a partial one"
    )
    get.add_argument("repo", type=text_type("repository"))
    get.add_argument("file", nargs="?", type=text_type("file"))
    get.add_argument("--revision", type=text_type("revision"))
    add = actions.add_parser("add", help="add a GGUF file you have, by path")
    add.add_argument("path", type=path_type("model"))
    remove = actions.add_parser(
        "rm",
        help="remove a model (a downloaded file is deleted, an added one forgotten)",
    )
    remove.add_argument("name", type=text_type("model name"))


def _cmd_models(args: argparse.Namespace) -> int:
    if args.models_command is None:
        raise UsageError("name a models command: list, catalog, search, pull, add, rm")
    data_dir = args.data_dir or paths.default_data_dir()
    return emit(run(args, data_dir))


def run(args: argparse.Namespace, data_dir: Path) -> Any:
    """Run one ``models`` command; return what to print as JSON."""
    library = ModelLibrary(data_dir, _models_dir(args, data_dir), shipped_catalog())
    command = args.models_command
    if command == "list":
        return _list(library)
    if command == "catalog":
        return _catalog(library, args.settings.n_ctx)
    if command == "search":
        return _search(args, args.settings.n_ctx)
    if command == "pull":
        return _pull(library, args)
    if command == "add":
        return _model_json(library.add_file(args.path))
    if command == "rm":
        model = library.find(args.name, starter_model_path())
        freed = library.remove(model)
        return {"removed": model.path, "bytes_freed": freed}
    raise HubError("name a models command: list, catalog, search, pull, add or rm")


def _models_dir(args: argparse.Namespace, data_dir: Path) -> Path:
    # --models-dir, else ARBOR_MODELS_DIR, else the window's Settings.
    if args.models_dir is not None:
        return Path(args.models_dir)
    if os.environ.get(MODELS_DIR_ENV):
        return models_dir_for(data_dir, None)
    from app.platform.paths import database_path
    from app.preferences import load_preferences
    from storage.db import open_database

    db = open_database(database_path(data_dir))
    try:
        return models_dir_for(data_dir, load_preferences(db).models_dir)
    finally:
        db.close()


def _list(library: ModelLibrary) -> dict[str, Any]:
    return {
        "models_dir": str(library.models_dir),
        "models": [_model_json(m) for m in library.models(starter_model_path())],
    }


def _model_json(model: InstalledModel) -> dict[str, Any]:
    return {
        "name": model.name,
        "path": model.path,
        "size": model.size,
        "quantization": model.quantization,
        "source": model.source,
        "repo": model.repo,
        "sha256": model.sha256,
        "catalog_id": model.catalog_id,
        "last_used": _iso(model.last_used),
        "present": model.present,
    }


def _catalog(library: ModelLibrary, n_ctx: int) -> dict[str, Any]:
    installed = {Path(m.path).name for m in library.models()}
    memory = machine_memory()
    return {
        "written": library.catalog.written,
        "provenance": list(library.catalog.provenance),
        "memory_bytes": memory,
        "n_ctx": n_ctx,
        "models": [
            {
                **_entry_json(entry),
                "fit": _fit_json(entry.size_bytes, n_ctx, entry.kv_bytes_per_token),
                "installed": entry.file in installed,
            }
            for entry in library.catalog.entries
        ],
    }


def _entry_json(entry: CatalogEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "name": entry.name,
        "parameters": entry.parameters,
        "repo": entry.repo,
        "file": entry.file,
        "quantization": entry.quantization,
        "size": entry.size_bytes,
        "context_length": entry.context_length,
        "license": entry.license,
        "reasoning": entry.reasoning,
        "tools": entry.tools,
        "recommended_for_tools": entry.recommended_for_tools,
        "vision": entry.vision,
    }


def _fit_json(size: int | None, n_ctx: int, kv_per_token: int | None) -> Any:
    if size is None:
        return None
    fit = assess(size, n_ctx, kv_per_token)
    return {
        "verdict": fit.verdict,
        "need_bytes": fit.need_bytes,
        "estimated": fit.estimated,
    }


def _search(args: argparse.Namespace, n_ctx: int) -> dict[str, Any]:
    repositories = search(args.query, limit=args.limit, with_files=args.files)
    return {
        "query": args.query,
        "repositories": [
            {
                "repo": r.repo,
                "downloads": r.downloads,
                "likes": r.likes,
                "gated": r.gated,
                "updated": r.updated,
                # What the Hub read from the GGUF (null: it said nothing),
                # and the flag for a GGUF without a chat template.
                "chat_template": r.chat_template,
                "architecture": r.architecture,
                "context_length": r.context_length,
                "base_model": r.base_model,
                "note": BASE_MODEL_NOTE if r.base_model else None,
                "files": [_file_json(f, n_ctx) for f in r.files],
            }
            for r in repositories
        ],
    }


def _file_json(file: RemoteFile, n_ctx: int) -> dict[str, Any]:
    return {
        "file": file.filename,
        "size": file.size,
        "quantization": file.quantization,
        "sha256": file.sha256,
        "parts": list(file.parts),
        "fit": _fit_json(file.size, n_ctx, None),
    }


def _pull(library: ModelLibrary, args: argparse.Namespace) -> dict[str, Any]:
    repo, filename = _what_to_pull(library, args.repo, args.file, args.revision)
    parts = names.split_siblings(filename)
    # Ctrl+C pauses: the part stays, and the same command resumes it.
    stop = StopRequest()
    signal.signal(signal.SIGINT, stop.request)
    bar = _StderrProgress()
    try:
        pulled = pull(
            repo,
            parts,
            library.models_dir,
            revision=args.revision,
            on_progress=bar.show,
            should_stop=stop,
        )
    except DownloadStopped:
        bar.close()
        raise HubError(
            f"stopped; what was downloaded is kept: run `arbor models pull {repo} "
            f"{filename}` again to resume"
        ) from None
    bar.close()
    model = library.record_download(pulled)
    return {
        **_model_json(model),
        "path": str(pulled.path),
        "sha256": pulled.sha256,
        "size": pulled.size,
        "filename": pulled.filename,
        "commit": pulled.commit,
        "fetched_bytes": pulled.fetched_bytes,
    }


def _what_to_pull(
    library: ModelLibrary, repo: str, filename: str | None, revision: str | None
) -> tuple[str, str]:
    """``(repo, file)`` from the arguments: a catalog id, or a repository and
    a file (which may be left out when the repository has one GGUF)."""
    entry = library.catalog.find(repo) if "/" not in repo else None
    if entry is not None:
        return entry.repo, filename or entry.file
    if "/" not in repo:
        raise HubError(
            f"{repo!r} is neither a catalog id (see arbor models catalog) nor a "
            "repository (owner/name)"
        )
    if filename is not None:
        return repo, filename
    files = list_files(repo, revision=revision)
    if len(files) == 1:
        return repo, files[0].filename
    if not files:
        raise HubError(f"{repo} has no GGUF model files")
    choices = ", ".join(
        f"{f.filename} ({format_bytes(f.size)})" if f.size else f.filename
        for f in files
    )
    raise HubError(f"{repo} has several GGUF files; name one: {choices}")


def _iso(stamp: float | None) -> str | None:
    if stamp is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(stamp))


class _StderrProgress:
    """Download progress on stderr: one line redrawn on a terminal, else a
    line every 10% (a log stays readable)."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._last_tenth = -1
        self._drawn = False

    def show(self, progress: Progress) -> None:
        """Draw ``progress``."""
        line = describe_progress(progress)
        if self._tty:
            sys.stderr.write("\r\x1b[2K" + line)
            sys.stderr.flush()
            self._drawn = True
            return
        tenth = int(10 * progress.done / progress.total) if progress.total else 0
        if tenth != self._last_tenth or progress.phase == "verifying":
            self._last_tenth = tenth
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        """End the redrawn line."""
        if self._drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


def describe_progress(progress: Progress) -> str:
    """``tiny.gguf: 43% of 2.5 GB, 12 MB/s, 1 min 40 s left`` (or verifying)."""
    if progress.phase == "verifying":
        return f"{progress.filename}: checking its sha256…"
    total = progress.total or 0
    percent = f"{100 * progress.done / total:.0f}% of {format_bytes(total)}"
    parts = [f"{progress.filename}: {percent}"]
    if progress.speed > 0:
        parts.append(f"{format_bytes(int(progress.speed))}/s")
    eta = progress.eta_seconds
    if eta is not None:
        parts.append(f"{format_duration(eta)} left")
    return ", ".join(parts)
