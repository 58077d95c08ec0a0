"""User preferences: one table of defaults, loaded from and saved to the database.

Qt-free. Every preference is one key of the database's settings table with a
JSON value, so a database carries its user's choices with it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.presets import STARTER_PRESETS, Preset, presets_from_stored
from app.server import DEFAULT_PORT
from storage import setting_rows
from storage.db import Database

if TYPE_CHECKING:
    from app.conversation.service import ConversationService

# How many model files the recent-models list remembers.
RECENT_MODELS_LIMIT = 8

# key -> default (JSON-compatible). The single source of truth for defaults.
DEFAULTS: dict[str, Any] = {
    "model_path": None,
    "recent_models": [],
    "backend": BackendSettings().as_dict(),
    "sampling": SamplingParams().as_dict(),
    "system_prompt": "",
    # Checkpoints beyond this are evicted, least recently used first; 0: no limit.
    "checkpoint_budget_mb": 2048,
    # How the tree panel shows the conversation: "list" or "graph".
    "tree_view": "list",
    # Where downloaded models go; None: the models folder of the data folder.
    "models_dir": None,
    # The window's text size, in percent of the system's (one of TEXT_SCALES).
    "text_scale": 100,
    # Named system prompts with their sampling, to pick per conversation.
    "presets": [preset.as_dict() for preset in STARTER_PRESETS],
    # Tools -> Local server: where it listens, and whether the window starts
    # it. Its API key is not stored (a secret, in plain text).
    "local_server": {"host": "127.0.0.1", "port": DEFAULT_PORT, "at_start": False},
}
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


@dataclass(frozen=True)
class Preferences:
    """Everything a user sets in the settings and storage dialogs."""

    model_path: str | None
    recent_models: tuple[str, ...]
    backend: BackendSettings
    sampling: SamplingParams
    system_prompt: str
    checkpoint_budget_mb: int
    tree_view: str = "list"
    models_dir: str | None = None
    text_scale: int = 100
    presets: tuple[Preset, ...] = STARTER_PRESETS
    local_server: LocalServerPrefs = field(default_factory=LocalServerPrefs)

    @property
    def checkpoint_budget_bytes(self) -> int | None:
        """The budget in bytes, or None for no limit."""
        return (
            self.checkpoint_budget_mb * 1024 * 1024
            if self.checkpoint_budget_mb > 0
            else None
        )

    def with_model(self, path: str) -> Preferences:
        """These preferences with ``path`` as the model, first in the recent list."""
        recent = [path, *(p for p in self.recent_models if p != path)]
        return replace(
            self, model_path=path, recent_models=tuple(recent[:RECENT_MODELS_LIMIT])
        )


def load_preferences(db: Database) -> Preferences:
    """Read the preferences; unset or invalid ones fall back to the defaults."""
    values = {
        key: setting_rows.get_setting(db, key, default)
        for key, default in DEFAULTS.items()
    }
    try:
        backend = BackendSettings.from_dict(
            {**DEFAULTS["backend"], **values["backend"]}
        )
    except (TypeError, ValueError):
        backend = BackendSettings()
    try:
        sampling = SamplingParams.from_dict(
            {**DEFAULTS["sampling"], **values["sampling"]}
        )
    except (TypeError, ValueError):
        sampling = SamplingParams()
    return Preferences(
        model_path=values["model_path"],
        recent_models=tuple(str(p) for p in values["recent_models"] or ()),
        backend=backend,
        sampling=sampling,
        system_prompt=str(values["system_prompt"] or ""),
        checkpoint_budget_mb=max(0, int(values["checkpoint_budget_mb"] or 0)),
        tree_view=values["tree_view"] if values["tree_view"] in TREE_VIEWS else "list",
        models_dir=str(values["models_dir"]) if values["models_dir"] else None,
        text_scale=_text_scale(values["text_scale"]),
        presets=presets_from_stored(values["presets"]),
        local_server=LocalServerPrefs.from_stored(values["local_server"]),
    )


def _text_scale(value: Any) -> int:
    """A stored text size, or 100 where it is not one of ``TEXT_SCALES``
    (a database edited by hand, or by a later version with other steps)."""
    return value if isinstance(value, int) and value in TEXT_SCALES else 100


def save_preferences(db: Database, prefs: Preferences) -> None:
    """Write every preference."""
    setting_rows.set_setting(db, "model_path", prefs.model_path)
    setting_rows.set_setting(db, "recent_models", list(prefs.recent_models))
    setting_rows.set_setting(db, "backend", prefs.backend.as_dict())
    setting_rows.set_setting(db, "sampling", prefs.sampling.as_dict())
    setting_rows.set_setting(db, "system_prompt", prefs.system_prompt)
    setting_rows.set_setting(db, "checkpoint_budget_mb", prefs.checkpoint_budget_mb)
    setting_rows.set_setting(db, "tree_view", prefs.tree_view)
    setting_rows.set_setting(db, "models_dir", prefs.models_dir)
    setting_rows.set_setting(db, "text_scale", prefs.text_scale)
    setting_rows.set_setting(db, "presets", [p.as_dict() for p in prefs.presets])
    setting_rows.set_setting(db, "local_server", asdict(prefs.local_server))


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
