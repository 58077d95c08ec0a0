"""The curated catalog: a handful of well-known instruct models, shipped as
data in ``resources/models/catalog.json`` and read here."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from app.library import names
from app.library.units import format_bytes
from app.platform.assets import get_asset

CATALOG_ASSET = "models/catalog.json"


class CatalogError(ValueError):
    """The catalog file is malformed: a packaging bug, named precisely."""


@dataclass(frozen=True)
class CatalogEntry:
    """One recommended model: where it is on the Hub and what it needs.

    ``kv_bytes_per_token`` is the f16 KV cache per token of context, so that
    the memory a model needs can be told before it is downloaded.
    ``welcome_rank`` orders the models the first start offers (None: not
    offered there).
    """

    id: str
    name: str
    family: str
    parameters: str
    repo: str
    file: str
    quantization: str
    size_bytes: int
    context_length: int
    kv_bytes_per_token: int
    license: str
    reasoning: bool
    welcome_rank: int | None
    description: str


@dataclass(frozen=True)
class Catalog:
    """The catalog's entries, smallest first, and the date it was reviewed."""

    reviewed: str
    entries: tuple[CatalogEntry, ...]

    def find(self, key: str) -> CatalogEntry | None:
        """The entry whose id is ``key`` (case-insensitive), or None."""
        key = key.lower()
        return next((e for e in self.entries if e.id == key), None)

    def for_file(self, repo: str | None, filename: str) -> CatalogEntry | None:
        """The entry for a file (by repository and name, or by name alone)."""
        for entry in self.entries:
            if entry.file == filename and (repo is None or entry.repo == repo):
                return entry
        return None

    def name_for(self, path: str) -> str:
        """How to call the model in ``path``: its catalog name, else a name
        made from the file name (never the file's own ``general.name``,
        which is often a build label like "Smollm2 135M 8k Lc100K Mix1")."""
        filename = Path(path).name
        entry = self.for_file(None, filename)
        return entry.name if entry is not None else names.display_name(filename)

    def summary(self, path: str, n_ctx_train: int | None = None) -> str:
        """One line about a model file: name, quantization, size, trained
        context (from the catalog, or ``n_ctx_train`` when it is loaded)."""
        filename = Path(path).name
        entry = self.for_file(None, filename)
        parts = [self.name_for(path)]
        quantization = names.quantization(filename)
        if quantization:
            parts.append(quantization)
        try:
            parts.append(format_bytes(Path(path).stat().st_size))
        except OSError:
            parts.append("the file is not there")
        trained = n_ctx_train or (entry.context_length if entry else None)
        if trained:
            parts.append(f"trained for {trained:,} tokens")
        return " · ".join(parts)

    def welcome_order(self) -> list[CatalogEntry]:
        """The entries the first start may offer, best first."""
        ranked = [e for e in self.entries if e.welcome_rank is not None]
        return sorted(ranked, key=lambda e: e.welcome_rank or 0)


_TYPES: dict[str, tuple[type, ...]] = {
    "int": (int,),
    "str": (str,),
    "bool": (bool,),
    "int | None": (int, type(None)),
}


@functools.cache
def shipped_catalog() -> Catalog:
    """The catalog Arbor ships, read once."""
    return load_catalog()


def load_catalog(path: Path | None = None) -> Catalog:
    """Read and check the catalog (the shipped one unless ``path`` is given).

    Raises
    ------
    CatalogError
        If an entry lacks a field, has one of the wrong type, or repeats an id.
    """
    source = path or get_asset(CATALOG_ASSET)
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CatalogError(f"cannot read the model catalog {source}: {exc}") from exc
    entries = tuple(_entry(raw) for raw in data.get("models", []))
    ids = [e.id for e in entries]
    if len(set(ids)) != len(ids):
        raise CatalogError("the model catalog repeats an id")
    return Catalog(reviewed=str(data.get("reviewed", "")), entries=entries)


def _entry(raw: object) -> CatalogEntry:
    if not isinstance(raw, dict):
        raise CatalogError(f"a catalog entry is not an object: {raw!r}")
    values: dict[str, Any] = {}
    for field in fields(CatalogEntry):
        if field.name not in raw:
            raise CatalogError(f"catalog entry {raw.get('id')!r} lacks {field.name!r}")
        value = raw[field.name]
        allowed = _TYPES[str(field.type)]
        # bool is an int in Python: a size of `true` must not pass.
        if not isinstance(value, allowed) or (
            isinstance(value, bool) and bool not in allowed
        ):
            raise CatalogError(
                f"catalog entry {raw.get('id')!r}: {field.name} should be "
                f"{field.type}, not {value!r}"
            )
        values[field.name] = value
    return CatalogEntry(**values)
