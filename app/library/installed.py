"""The models on this machine: downloaded into the models folder, or added
by path from wherever the user keeps them (never copied).

A small JSON manifest in the data folder records each model's origin, its
verified sha256 and when it was last used; the models folder is scanned as
well, so a file put there by hand shows up too. Removing a model deletes the
file only if Arbor downloaded it; a file added by path is only forgotten.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from app.library import names
from app.library.catalog import Catalog, CatalogEntry, model_name
from app.library.download import PulledFile

MANIFEST_FILENAME = "models.json"
MODELS_DIRNAME = "models"
# Where downloads go, for this process: above the user's choice in Settings.
MODELS_DIR_ENV = "ARBOR_MODELS_DIR"

_log = logging.getLogger(__name__)


class LibraryError(Exception):
    """A request the library cannot carry out (unknown model, unreadable file)."""


@dataclass(frozen=True)
class InstalledModel:
    """One model file on this machine.

    ``source`` is ``"downloaded"``, ``"added"`` (by path) or ``"starter"``.
    ``sha256`` is set when the bytes were verified against the Hub.
    """

    path: str
    name: str
    size: int
    source: str
    quantization: str | None = None
    repo: str | None = None
    filename: str | None = None
    sha256: str | None = None
    catalog_id: str | None = None
    added_at: float = 0.0
    last_used: float | None = None

    @property
    def present(self) -> bool:
        """True while the file is still where it was recorded."""
        return Path(self.path).is_file()


class ModelLibrary:
    """The manifest of installed models for one data folder.

    Parameters
    ----------
    data_dir
        Where the manifest lives (beside the database).
    models_dir
        Where downloads go; ``data_dir/models`` unless the user picked another.
    catalog
        To name models by their catalog entry.
    """

    def __init__(
        self, data_dir: Path, models_dir: Path | None, catalog: Catalog
    ) -> None:
        self.data_dir = data_dir
        self.manifest_path = data_dir / MANIFEST_FILENAME
        self.models_dir = models_dir or data_dir / MODELS_DIRNAME
        self.catalog = catalog
        # Each write reads the manifest, changes it and writes it whole; the
        # window writes from two threads (downloads, and adds and removals),
        # so one write must not start from what another is replacing.
        self._writing = threading.RLock()

    def models(self, starter: Path | None = None) -> list[InstalledModel]:
        """Every known model, the most recently used first.

        Files found in the models folder but not in the manifest are listed
        as downloaded (someone put them there); ``starter`` is listed last.
        """
        records = self._read()
        known = {r.path for r in records}
        if self.models_dir.is_dir():
            for path in sorted(self.models_dir.rglob("*.gguf")):
                part = names.split_part(path.name)
                if str(path) in known or (part is not None and part[0] != 1):
                    continue
                records.append(self._describe(path, "downloaded"))
        if starter is not None:
            # The starter keeps its kind once used (touch() records it too).
            used = [r for r in records if r.path == str(starter)]
            records = [r for r in records if r.path != str(starter)]
            base = used[0] if used else self._describe(starter, "starter")
            records.append(replace(base, source="starter"))
        return sorted(
            records,
            key=lambda r: (r.source == "starter", -(r.last_used or r.added_at)),
        )

    def record_download(self, pulled: PulledFile) -> InstalledModel:
        """Remember a finished, verified download."""
        entry = self.catalog.for_file(pulled.repo, pulled.filename)
        model = replace(
            self._describe(pulled.path, "downloaded", entry),
            size=pulled.size,
            repo=pulled.repo,
            filename=pulled.filename,
            sha256=pulled.sha256,
        )
        with self._writing:
            self._upsert(model)
        return model

    def add_file(self, path: Path) -> InstalledModel:
        """Add a GGUF file the user already has, by path (it is not copied)."""
        path = path.expanduser().resolve()
        if not path.is_file():
            raise LibraryError(f"{path} is not a file")
        if not names.is_gguf(path.name):
            raise LibraryError(f"{path.name} is not a .gguf file")
        with self._writing:
            existing = self._find(str(path))
            if existing is not None:
                return existing
            model = self._describe(path, "added")
            self._upsert(model)
        return model

    def touch(self, path: Path) -> None:
        """Note that the model at ``path`` was just loaded."""
        path = path.expanduser().resolve()
        with self._writing:
            record = self._find(str(path))
            if record is None:
                inside = path.is_relative_to(self.models_dir.resolve())
                record = self._describe(path, "downloaded" if inside else "added")
            self._upsert(replace(record, last_used=time.time()))

    def find(self, key: str, starter: Path | None = None) -> InstalledModel:
        """The model named by ``key``: its path, file name, name or catalog id."""
        models = self.models(starter)
        for test in (
            lambda m: m.path == key or m.path == str(Path(key).expanduser().resolve()),
            lambda m: Path(m.path).name == key,
            lambda m: m.catalog_id == key.lower(),
            lambda m: m.name.lower() == key.lower(),
        ):
            matches = [m for m in models if test(m)]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                raise LibraryError(
                    f"{key!r} names {len(matches)} models; give the path instead"
                )
        raise LibraryError(
            f"no installed model is called {key!r} (see arbor models list)"
        )

    def remove(self, model: InstalledModel) -> int:
        """Forget ``model``; delete its file(s) if Arbor downloaded them.

        Returns the bytes freed on disk (0 for a model added by path).
        """
        if model.source == "starter":
            raise LibraryError(
                "the starter model comes with Arbor and cannot be removed"
            )
        freed = 0
        if model.source == "downloaded":
            path = Path(model.path)
            for part in names.split_siblings(path.name):
                file = path.with_name(part)
                with contextlib.suppress(FileNotFoundError):
                    freed += file.stat().st_size
                    file.unlink()
            _prune_empty(path.parent, self.models_dir)
        with self._writing:
            self._write([r for r in self._read() if r.path != model.path])
        return freed

    def _describe(
        self, path: Path, source: str, entry: CatalogEntry | None = None
    ) -> InstalledModel:
        entry = entry or self.catalog.for_file(None, path.name)
        size = sum(
            path.with_name(p).stat().st_size
            for p in names.split_siblings(path.name)
            if path.with_name(p).is_file()
        )
        return InstalledModel(
            path=str(path),
            name=entry.name if entry else model_name(path.name, catalog=self.catalog),
            size=size,
            source=source,
            quantization=names.quantization(path.name),
            filename=path.name,
            catalog_id=entry.id if entry else None,
            added_at=time.time(),
        )

    def _find(self, path: str) -> InstalledModel | None:
        return next((r for r in self._read() if r.path == path), None)

    def _upsert(self, model: InstalledModel) -> None:
        records = [r for r in self._read() if r.path != model.path]
        self._write([*records, model])

    def _read(self) -> list[InstalledModel]:
        try:
            data = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError):
            # A damaged manifest loses only names and dates: the files are
            # found again by the folder scan.
            return []
        records = []
        for raw in data.get("models", []) if isinstance(data, dict) else []:
            with contextlib.suppress(TypeError):
                records.append(InstalledModel(**_known_fields(raw)))
        return records

    def _write(self, records: list[InstalledModel]) -> None:
        # Written whole to a temporary file, then renamed: a crash leaves the
        # old manifest or the new one, never half of one.
        self.manifest_path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"models": [asdict(r) for r in records]}, indent=1)
        fd, tmp = tempfile.mkstemp(
            dir=self.manifest_path.parent, prefix=".models-", suffix=".json"
        )
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, self.manifest_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def models_dir_for(data_dir: Path, chosen: str | None) -> Path:
    """Where downloads go: ``ARBOR_MODELS_DIR``, else the folder the user
    chose in Settings (``chosen``), else the data folder's ``models``."""
    folder = os.environ.get(MODELS_DIR_ENV) or chosen
    if folder:
        return Path(folder).expanduser().resolve()
    return data_dir / MODELS_DIRNAME


def note_model_used(data_dir: Path, path: Path, catalog: Catalog) -> None:
    """Record that ``path`` was loaded, for "last used"; never fails a load.

    The manifest is a convenience: a disk that refuses it (full, read-only)
    is logged, and the model is used all the same.
    """
    try:
        ModelLibrary(data_dir, None, catalog).touch(path)
    except OSError as exc:
        _log.warning("could not note the model's use in the manifest: %s", exc)


def _known_fields(raw: Any) -> dict[str, Any]:
    fields = InstalledModel.__dataclass_fields__
    return (
        {k: v for k, v in raw.items() if k in fields} if isinstance(raw, dict) else {}
    )


def _prune_empty(folder: Path, root: Path) -> None:
    # Empty owner/name folders left by a removal go too, up to the root.
    root = root.resolve()
    folder = folder.resolve()
    while folder != root and folder.is_relative_to(root):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
