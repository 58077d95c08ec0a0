"""User preferences: one table of defaults, loaded from and saved to the database.

Qt-free. Every preference is one key of the database's settings table with a
JSON value, so a database carries its user's choices with it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from app.backend.errors import InvalidSetting
from app.backend.settings import BackendSettings, worker_address
from app.backend.values import SamplingParams
from app.conversation.presets import STARTER_PRESETS, Preset, presets_from_stored
from app.platform.ports import DEFAULT_PORT
from storage import setting_rows
from storage.db import Database

if TYPE_CHECKING:
    from app.conversation.service import ConversationService

# How many model files the recent-models list remembers.
RECENT_MODELS_LIMIT = 8

TREE_VIEWS = ("list", "graph")
# The text sizes zooming steps through, in percent, as a browser's zoom does:
# finer steps near 100 %, where a step is a larger share of what is read.
TEXT_SCALES = (80, 90, 100, 110, 125, 150, 175, 200)


def step_text_scale(scale: int, steps: int) -> int:
    """The text size ``steps`` zoom steps from ``scale`` (negative: smaller).

    It stops at the smallest and the largest of ``TEXT_SCALES``. A ``scale``
    between two steps counts as the nearest one.
    """
    at = min(range(len(TEXT_SCALES)), key=lambda i: abs(TEXT_SCALES[i] - scale))
    return TEXT_SCALES[max(0, min(len(TEXT_SCALES) - 1, at + steps))]


@dataclass(frozen=True)
class LocalServerPrefs:
    """Where the window's local server listens, and whether it starts with
    the window (on this computer's own address only: no key is stored)."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    at_start: bool = False

    @classmethod
    def from_stored(cls, value: Any) -> LocalServerPrefs:
        """The stored value, or the defaults where it is not a valid one."""
        if not isinstance(value, dict):
            return cls()
        host, port = value.get("host"), value.get("port")
        return cls(
            host if isinstance(host, str) and host.strip() else cls.host,
            port if isinstance(port, int) and 0 < port < 65536 else cls.port,
            value.get("at_start") is True,
        )


def _layer_counts(stored: Any, addresses: tuple[str, ...]) -> tuple[int, ...]:
    """The split by hand ``stored`` (a JSON list), where the backend takes it
    for ``addresses``; else none (the split by free memory)."""
    if not isinstance(stored, list) or not stored:
        return ()
    try:
        return BackendSettings(
            workers=addresses, worker_layers=tuple(stored)
        ).worker_layers
    except InvalidSetting:
        return ()


@dataclass(frozen=True)
class WorkerPrefs:
    """Settings → Workers: the ``arbor worker``s the user named, and whether
    the model loads on them.

    The list is kept with "Use workers" off, to be used again later; what a
    load uses is ``Preferences.backend.workers``, which ``with_workers``
    sets to ``used``. ``layers`` is the split by hand, one count per
    address (empty: split by free memory); the backend gets it with the
    workers (``used_layers``).
    """

    addresses: tuple[str, ...] = ()
    use: bool = False
    layers: tuple[int, ...] = ()

    @property
    def used(self) -> tuple[str, ...]:
        """The workers a load uses: the list when "Use workers" is on."""
        return self.addresses if self.use else ()

    @property
    def used_layers(self) -> tuple[int, ...]:
        """The split by hand a load uses: with the workers it uses."""
        return self.layers if self.use else ()

    def as_dict(self) -> dict[str, Any]:
        """Plain dict, for storing as JSON."""
        return {
            "addresses": list(self.addresses),
            "use": self.use,
            "layers": list(self.layers),
        }

    @classmethod
    def from_stored(cls, value: Any) -> WorkerPrefs:
        """The stored value; an address that is not a worker's is left out,
        and with it the split by hand (its counts would no longer match)."""
        if not isinstance(value, dict) or not isinstance(value.get("addresses"), list):
            return cls()
        addresses: list[str] = []
        for text in value["addresses"]:
            with contextlib.suppress(InvalidSetting):
                addresses.append(worker_address(text))
        unique = tuple(dict.fromkeys(addresses))
        # Counts are kept only for the very list they were typed for.
        same = unique == tuple(value["addresses"])
        layers = _layer_counts(value.get("layers"), unique) if same else ()
        return cls(unique, value.get("use") is True, layers)


@dataclass(frozen=True)
class Preferences:
    """Everything a user sets in the settings and storage dialogs.

    Each field is one key of the settings table, under the field's name, and
    its default is the field's: a new preference is one field. One whose
    value is not plain JSON also says in ``_STORED`` how it is stored and
    read back.
    """

    model_path: str | None = None
    recent_models: tuple[str, ...] = ()
    backend: BackendSettings = field(default_factory=BackendSettings)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    system_prompt: str = ""
    # Checkpoints beyond this are evicted, least recently used first; 0: no limit.
    checkpoint_budget_mb: int = 2048
    # How the tree panel shows the conversation: "list" or "graph".
    tree_view: str = "list"
    # Where downloaded models go; None: the models folder of the data folder.
    models_dir: str | None = None
    # The window's text size, in percent of the system's (one of TEXT_SCALES).
    text_scale: int = 100
    # Named system prompts with their sampling, to pick per conversation.
    presets: tuple[Preset, ...] = STARTER_PRESETS
    # Tools -> Local server: where it listens, and whether the window starts
    # it. Its API key is not stored (a secret, in plain text).
    local_server: LocalServerPrefs = field(default_factory=LocalServerPrefs)
    # Settings → Workers: other machines' devices for the model's layers.
    workers: WorkerPrefs = field(default_factory=WorkerPrefs)

    @property
    def checkpoint_budget_bytes(self) -> int | None:
        """The budget in bytes, or None for no limit."""
        return (
            self.checkpoint_budget_mb * 1024 * 1024
            if self.checkpoint_budget_mb > 0
            else None
        )

    def with_workers(self, workers: WorkerPrefs) -> Preferences:
        """These preferences with ``workers``, and the backend loading on the
        ones it uses, split as they say. Raises ``InvalidSetting`` where the
        backend cannot use them (no layer would go to them, or the split by
        hand does not fit them)."""
        backend = replace(
            self.backend, workers=workers.used, worker_layers=workers.used_layers
        )
        return replace(self, workers=workers, backend=backend)

    def with_model(self, path: str) -> Preferences:
        """These preferences with ``path`` as the model, first in the recent list."""
        recent = [path, *(p for p in self.recent_models if p != path)]
        return replace(
            self, model_path=path, recent_models=tuple(recent[:RECENT_MODELS_LIMIT])
        )


_DEFAULT = Preferences()
_NAMES = tuple(f.name for f in fields(Preferences))


@dataclass(frozen=True)
class _Stored:
    """How a preference is stored as JSON and read back. ``read`` raises
    ``TypeError``, ``ValueError`` or ``InvalidSetting`` for a value it cannot
    take (a database edited by hand, or by a later version): the default is
    used then."""

    write: Callable[[Any], Any]
    read: Callable[[Any], Any]


def _one_of(choices: tuple[Any, ...]) -> Callable[[Any], Any]:
    """A reader that takes only one of ``choices`` (of their type: 100.0 is
    no text size)."""

    def read(value: Any) -> Any:
        if not isinstance(value, type(choices[0])) or value not in choices:
            raise ValueError(f"not one of {choices}")
        return value

    return read


def _same(value: Any) -> Any:
    """The value as it is (plain JSON)."""
    return value


_STORED: dict[str, _Stored] = {
    "recent_models": _Stored(list, lambda v: tuple(str(p) for p in v)),
    "backend": _Stored(
        BackendSettings.as_dict,
        lambda v: BackendSettings.from_dict({**_DEFAULT.backend.as_dict(), **v}),
    ),
    "sampling": _Stored(
        SamplingParams.as_dict,
        lambda v: SamplingParams.from_dict({**_DEFAULT.sampling.as_dict(), **v}),
    ),
    "system_prompt": _Stored(_same, lambda v: str(v or "")),
    "checkpoint_budget_mb": _Stored(_same, lambda v: max(0, int(v or 0))),
    "tree_view": _Stored(_same, _one_of(TREE_VIEWS)),
    "models_dir": _Stored(_same, lambda v: str(v) if v else None),
    "text_scale": _Stored(_same, _one_of(TEXT_SCALES)),
    "presets": _Stored(lambda ps: [p.as_dict() for p in ps], presets_from_stored),
    "local_server": _Stored(asdict, LocalServerPrefs.from_stored),
    "workers": _Stored(WorkerPrefs.as_dict, WorkerPrefs.from_stored),
}
_PLAIN = _Stored(_same, _same)


def load_preferences(db: Database) -> Preferences:
    """Read the preferences, in one transaction; unset or invalid ones fall
    back to the defaults."""
    stored = setting_rows.get_settings(db, _NAMES)
    values: dict[str, Any] = {}
    for name in _NAMES:
        if name not in stored:
            continue
        # InvalidSetting: backend settings that no longer agree (a split by
        # hand for other workers), from a database edited by hand.
        with contextlib.suppress(TypeError, ValueError, InvalidSetting):
            values[name] = _STORED.get(name, _PLAIN).read(stored[name])
    return replace(_DEFAULT, **values)


def save_preferences(db: Database, prefs: Preferences) -> None:
    """Write every preference, in one transaction."""
    setting_rows.set_settings(
        db,
        {
            name: _STORED.get(name, _PLAIN).write(getattr(prefs, name))
            for name in _NAMES
        },
    )


def keep_checkpoints_within_budget(service: ConversationService) -> dict[str, int]:
    """Evict checkpoints beyond the Storage dialog's budget, as the window
    does after a reply; for the CLI and the server after theirs.

    Least recently used first, the checkpoints just written last. Returns
    ``{"evicted_bytes": N}`` when any were evicted, else ``{}``.
    """
    if service.db.read_only:
        return {}  # nothing was written, and nothing can be deleted
    budget = load_preferences(service.db).checkpoint_budget_bytes
    if budget is None:
        return {}
    evicted = service.evict_checkpoints(budget)
    return {"evicted_bytes": evicted} if evicted else {}
