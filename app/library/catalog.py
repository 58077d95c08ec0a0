"""The curated catalog: a handful of well-known instruct models, shipped as
data in ``resources/models/catalog.json`` and read here.

The file says where each of its claims comes from (``provenance``, for the
whole file and for each entry): the entries were written offline, and each
entry's ``tools`` mark was learned by Arbor's own tool-syntax learning from
llama.cpp's reference template of the entry's family (``tools_template``),
which ``tests/backend/test_catalog_tools.py`` repeats, so a wrong mark fails there.

**Pins.** A file of an entry may be pinned (``pins``): the Hub commit to
fetch it from and its exact sha256 and size. A pinned file is downloaded
from that commit and checked against the pin, not against whatever the Hub
serves under the same name today (``app.library.download``), so a file
re-uploaded on the Hub does not silently change what the catalog offers.
``tools/pin_catalog.py`` fills the pins from the Hub; an entry whose pins
could not be read from the Hub has none, and its provenance says so.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path, PurePath
from typing import Any

from app.library import names
from app.library.naming import file_model_name
from app.platform.assets import get_asset
from app.text.quantities import format_bytes

CATALOG_ASSET = "models/catalog.json"

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")  # a sha256 as the Hub writes it

# What an entry's ``tools`` may say: its family's template writes tool calls
# (Arbor reads the model's own syntax), it writes none (Arbor's generic JSON
# format), or no reference template of the family was at hand to tell.
TOOLS_MARKS = ("native", "generic", "unknown")


class CatalogError(ValueError):
    """The catalog file is malformed: a packaging bug, named precisely."""


@dataclass(frozen=True)
class FilePin:
    """One file of an entry as the catalog fixes it: the Hub commit it is
    fetched from (``revision``, 40 hex digits), its sha256 and its exact
    size in bytes."""

    file: str
    revision: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Provenance:
    """Where an entry's figures come from: what was checked (``checked``),
    from which page or API answer (``source``; None where nothing was
    fetched), on which day (``on``) and how (``how``)."""

    checked: str
    source: str | None
    on: str
    how: str


@dataclass(frozen=True)
class CatalogEntry:
    """One recommended model: where it is on the Hub and what it needs.

    ``kv_bytes_per_token`` is the f16 KV cache per token of context, so that
    the memory a model needs can be told before it is downloaded.
    ``welcome_rank`` orders the models the first start offers (None: not
    offered there).

    ``tools`` is one of :data:`TOOLS_MARKS`, learned from the llama.cpp
    reference template named by ``tools_template`` (None, and ``"unknown"``,
    where the family has none); it describes the family's template, not the
    file's own, which decides once the model is loaded
    (``ModelInfo.tool_format``). ``recommended_for_tools`` marks the
    catalog's pick for tool use. ``vision``: the model was published as
    seeing images (Arbor shows none yet).

    ``pins``: the pinned files (:class:`FilePin`; empty where none could be
    read from the Hub), ``provenance``: where the entry's figures come from.
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
    tools: str
    tools_template: str | None
    recommended_for_tools: bool
    vision: bool
    description: str
    pins: tuple[FilePin, ...] = ()
    provenance: Provenance | None = None


@dataclass(frozen=True)
class Catalog:
    """The catalog's entries, smallest first, the date they were written and
    where each kind of claim in them comes from (one line each)."""

    written: str
    entries: tuple[CatalogEntry, ...]
    provenance: tuple[str, ...] = ()

    def recommended_for_tools(self) -> CatalogEntry | None:
        """The entry recommended for tool use, or None."""
        return next((e for e in self.entries if e.recommended_for_tools), None)

    def pins_for(self, repo: str, parts: Iterable[str]) -> dict[str, FilePin]:
        """The pins of ``repo``'s files ``parts`` that the catalog fixes, by
        file name (empty for files no entry pins)."""
        wanted = set(parts)
        return {
            pin.file: pin
            for entry in self.entries
            if entry.repo == repo
            for pin in entry.pins
            if pin.file in wanted
        }

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
        """How to call the model in ``path``: its catalog name, else its file
        name tidied (``app.library.naming``, the one naming rule)."""
        return model_name(path, catalog=self)

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
    "str | None": (str, type(None)),
}


@functools.cache
def shipped_catalog() -> Catalog:
    """The catalog Arbor ships, read once."""
    return load_catalog()


def model_name(
    path: str,
    *,
    repo: str | None = None,
    general_name: str | None = None,
    catalog: Catalog | None = None,
) -> str:
    """How to call the model in ``path`` (a path or a file name; for a split
    model, its first part): its catalog entry's name, else its file's name
    tidied (``app.library.naming`` says the order).

    ``repo``: the Hub repository it comes from, when known (a catalog file is
    then matched by repository too); ``general_name``: the GGUF's
    ``general.name``, once the file is loaded; ``catalog``: the catalog to
    look in (None: the shipped one).
    """
    catalog = catalog if catalog is not None else shipped_catalog()
    entry = catalog.for_file(repo, PurePath(path).name)
    if entry is not None:
        return entry.name
    return file_model_name(path, general_name)


def load_catalog(path: Path | None = None) -> Catalog:
    """Read and check the catalog (the shipped one unless ``path`` is given).

    Raises
    ------
    CatalogError
        If an entry lacks a field, has one of the wrong type, or repeats an
        id; if a ``tools`` mark is not one of :data:`TOOLS_MARKS` or is not
        backed by a template (or a template backs "unknown"); if more than
        one entry, or one without native tool calls, is recommended for tools.
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
    for entry in entries:
        _check_tools(entry)
    if sum(e.recommended_for_tools for e in entries) > 1:
        raise CatalogError("the model catalog recommends more than one model for tools")
    provenance = data.get("provenance", [])
    if not isinstance(provenance, list) or not all(
        isinstance(line, str) for line in provenance
    ):
        raise CatalogError("the model catalog's provenance is not a list of lines")
    return Catalog(
        written=str(data.get("written", "")),
        entries=entries,
        provenance=tuple(provenance),
    )


def _check_tools(entry: CatalogEntry) -> None:
    # A mark without the template it came from would be a guess, and a
    # template with "unknown" a check that was not written down.
    if entry.tools not in TOOLS_MARKS:
        raise CatalogError(
            f"catalog entry {entry.id!r}: tools should be one of "
            f"{', '.join(TOOLS_MARKS)}, not {entry.tools!r}"
        )
    if (entry.tools == "unknown") != (entry.tools_template is None):
        raise CatalogError(
            f"catalog entry {entry.id!r}: tools {entry.tools!r} with "
            f'tools_template {entry.tools_template!r} (only "unknown" has none)'
        )
    if entry.recommended_for_tools and entry.tools != "native":
        raise CatalogError(
            f"catalog entry {entry.id!r} is recommended for tools but its "
            f"template's tool calls are {entry.tools!r}"
        )


def _entry(raw: object) -> CatalogEntry:
    if not isinstance(raw, dict):
        raise CatalogError(f"a catalog entry is not an object: {raw!r}")
    values: dict[str, Any] = {
        "pins": _pins(raw),
        "provenance": _provenance(raw),
    }
    for field in fields(CatalogEntry):
        if field.name in values:
            continue
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


def _pins(raw: dict[str, Any]) -> tuple[FilePin, ...]:
    # Each pin whole and well-formed, or the catalog does not load: a pin
    # with a bad hash would refuse every download of its file.
    pins = raw.get("pins", {})
    if not isinstance(pins, dict):
        raise CatalogError(f"catalog entry {raw.get('id')!r}: pins is not an object")
    parsed = []
    for name, pin in pins.items():
        where = f"catalog entry {raw.get('id')!r}, pin of {name!r}"
        if not isinstance(pin, dict) or set(pin) != {"revision", "sha256", "size"}:
            raise CatalogError(f"{where}: needs exactly revision, sha256 and size")
        revision, sha256, size = pin["revision"], pin["sha256"], pin["size"]
        if not isinstance(revision, str) or not _COMMIT.match(revision):
            raise CatalogError(f"{where}: revision is not a 40-hex commit")
        if not isinstance(sha256, str) or not SHA256_HEX.match(sha256):
            raise CatalogError(f"{where}: sha256 is not 64 lower-case hex digits")
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise CatalogError(f"{where}: size is not a positive number of bytes")
        parsed.append(FilePin(name, revision, sha256, size))
    return tuple(parsed)


def _provenance(raw: dict[str, Any]) -> Provenance | None:
    value = raw.get("provenance")
    if value is None:
        return None
    keys = {"checked", "source", "on", "how"}
    if not isinstance(value, dict) or set(value) != keys:
        raise CatalogError(
            f"catalog entry {raw.get('id')!r}: provenance needs exactly "
            "checked, source, on and how"
        )
    if not all(
        isinstance(value[k], str) or (k == "source" and value[k] is None) for k in keys
    ):
        raise CatalogError(
            f"catalog entry {raw.get('id')!r}: provenance's values are text "
            "(source may be null)"
        )
    return Provenance(value["checked"], value["source"], value["on"], value["how"])
