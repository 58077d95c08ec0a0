"""The model session: which model is loaded or loading, and with what.

``ModelSession`` holds the loaded model (its ``ModelInfo``, the backend
settings it runs with and its checkpoint profile), the one being loaded,
what was lost with an engine process that ended, the user's preferences
(they name the model and its settings), and whether any tool server is
enabled. It submits the jobs that load a model and save preferences; the
presenter decides when, and does what a load means for the conversation
shown (its tree's checkpoint marks are the new model's).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from app import jobs
from app.backend.settings import BackendSettings
from app.backend.values import ModelInfo
from app.jobs.results import Failed, ModelLoaded
from app.library.catalog import shipped_catalog
from app.mcp.config import ServerConfig, load_servers
from app.preferences import Preferences
from app.window.shown_conversation import ShownConversation
from app.window.view import Engine, View
from storage.db import Database
from storage.errors import StorageUnavailable


@dataclass(frozen=True)
class LostEngine:
    """The model the engine held when its process ended, and where."""

    path: Path
    settings: BackendSettings
    # The workers of ``settings`` that still answered after the loss.
    remaining: tuple[str, ...]


class ModelSession:
    """The model the window works with, and the preferences it comes from.

    Parameters
    ----------
    db
        The open database (read for the tool servers; not written here).
    engine
        Where the load and save jobs go.
    prefs
        The user's preferences.
    view
        The window.
    shown
        The conversation shown: a model loads with its context size, where
        one was raised for it.
    """

    def __init__(
        self,
        db: Database,
        engine: Engine,
        prefs: Preferences,
        view: View,
        shown: ShownConversation,
    ) -> None:
        self.db = db
        self.engine = engine
        self.prefs = prefs
        self.view = view
        self.model_info: ModelInfo | None = None
        # The settings the loaded model runs with (a failed reload keeps them).
        self._loaded_backend: BackendSettings | None = None
        # The loaded model's backend profile: the tree marks its checkpoints.
        self.profile_id: int | None = None
        self.loading_model: str | None = None
        # After the engine's process ended (a worker lost): the model and
        # settings it ran, to load again where the user chooses.
        self.after_loss: LostEngine | None = None
        # Whether any MCP server is enabled (the composer offers their tools).
        self.tools_available = self._any_tool_server()
        self.shown = shown
        # Whether the loaded (or loading) model's context is a conversation's
        # own rather than the Settings' (a failed load then keeps the
        # Settings' size: it was never theirs).
        self._loaded_own = False
        self._loading_own = False

    def unavailable(self) -> str | None:
        """Why no message can be written for want of a model (None: one is
        loaded), as the empty composer says it."""
        if self.loading_model is not None:
            return "Loading the model…"
        if self.model_info is None and self.after_loss is not None:
            return (
                "A worker was lost, so no model is loaded: load it again on the "
                "remaining workers or on this computer (Settings → Workers), or "
                "open a model (Ctrl+O)."
            )
        if self.model_info is None:
            return "Choose a model to start chatting (File → Open model file, Ctrl+O)."
        return None

    # --- loading ------------------------------------------------------------------

    @property
    def backend(self) -> BackendSettings:
        """The settings a model loads with now: the preferences', with the
        shown conversation's own context size where it has one."""
        own = self.shown.context_size
        if own is None:
            return self.prefs.backend
        return replace(self.prefs.backend, n_ctx=own)

    def load_model(self, path: Path, settings: BackendSettings | None = None) -> None:
        """Load a model in the background (the composer waits for it), with
        ``settings`` (by default, ``backend``)."""
        job = jobs.LoadModel(path, settings or self.backend)
        self._loading_own = settings is None and self.shown.context_size is not None
        self.loading_model = str(path)
        self.view.set_busy(job.busy)  # at once: loading can take a while
        self.view.state_changed()
        self.engine.submit(job)

    def loaded(self, result: ModelLoaded | Failed) -> bool:
        """A load's job ended; True when it loaded a model (the tree's
        checkpoint marks are then the new model's)."""
        path, self.loading_model = self.loading_model, None
        if isinstance(result, Failed):
            self._load_failed(result)
            return False
        job = result.job
        # A ModelLoaded answers a LoadModel (its ``result_type``); the result
        # names it as any job, so that the results need not import the jobs.
        assert isinstance(job, jobs.LoadModel)
        self._loaded_backend = job.settings
        self._loaded_own = self._loading_own
        self.after_loss = None
        self.model_info = result.model
        self.profile_id = result.profile_id
        self.view.model_loaded(result.model, result.n_ctx)
        if path is not None:
            self.save_preferences(self.prefs.with_model(path))
        return True

    def _load_failed(self, result: Failed) -> None:
        # A failed load keeps the model there was, unless it could not come
        # back (the worker loads it again, unless the load was to run
        # elsewhere: on workers, or no longer on them), and the settings it
        # runs with: saved ones that failed would fail at the next start too.
        if result.model_lost:
            self.model_info = None
        if result.stopped and self.model_info is not None:
            name = shipped_catalog().name_for(self.model_info.path)
            self.view.show_message(f"Loading stopped; {name} is loaded again.")
        elif result.stopped:
            self.view.show_message("Loading stopped.")
        if self.model_info is None:
            if not result.engine_lost:  # else the offer to load it again
                self.view.model_missing()
        elif self._loaded_backend is not None:
            kept = self._loaded_backend
            if self._loaded_own:  # a conversation's size, not the Settings'
                kept = replace(kept, n_ctx=self.prefs.backend.n_ctx)
            if kept != self.prefs.backend:
                self.save_preferences(replace(self.prefs, backend=kept))
        self.view.state_changed()

    @property
    def loading_own(self) -> bool:
        """Whether the model being loaded gets a conversation's own context."""
        return self.loading_model is not None and self._loading_own

    def follow_context(self) -> bool:
        """Load the model again when the loaded one's context size is not
        the one the shown conversation asks for (``backend``). True when
        a load began (a restore waits for it)."""
        info, loaded = self.model_info, self._loaded_backend
        if info is None or loaded is None or self.loading_model is not None:
            return False
        wanted = self.backend.n_ctx
        if loaded.n_ctx == wanted or self.db.read_only:
            return False
        # The placement it runs with (workers, layers) stays as it is.
        self.load_model(Path(info.path), replace(loaded, n_ctx=wanted))
        self._loading_own = self.shown.context_size is not None
        return True

    def engine_lost(self, failed: Failed) -> None:
        """The engine's process ended under ``failed.job`` (a worker was
        lost): no model is loaded; offer to load it again.

        Not loaded again without asking: a model spread over workers may not
        fit on fewer machines, nor on this one, and the user may rather
        start the lost worker again.
        """
        job = failed.job
        if isinstance(job, jobs.LoadModel):
            path, settings = job.path, job.settings
        elif self.model_info is not None and self._loaded_backend is not None:
            path, settings = Path(self.model_info.path), self._loaded_backend
        else:  # pragma: no cover - a child runs only after a load on workers
            self.view.show_error(job.failure, failed.error)
            return
        self.model_info = None
        remaining = tuple(w for w in settings.workers if w not in failed.lost_workers)
        self.after_loss = LostEngine(Path(path), settings, remaining)
        self.view.offer_reload(failed.error, remaining)

    def reload_after_loss(self, on_workers: bool) -> None:
        """Load the model lost with its engine again: on the workers that
        still answer (``on_workers``), or on this computer alone.

        The preferences keep their workers: the lost one may come back, and
        the next start tries them all again.
        """
        lost = self.after_loss
        if lost is None or self.loading_model or self.db.read_only:
            return
        workers = lost.remaining if on_workers else ()
        # A split by hand counted the lost worker too: the workers left share
        # the layers by their free memory.
        settings = replace(lost.settings, workers=workers, worker_layers=())
        self.load_model(lost.path, settings)

    # --- the context filled -------------------------------------------------------

    def offer_ways_on(
        self, active_id: int | None, message: str, needed: int | None = None
    ) -> None:
        """The branch to ``active_id`` filled the context: the view lets the
        user choose how on (a larger context only where one holds ``needed``
        tokens). With no node shown there is no branch to go on from."""
        info = self.model_info
        if info is not None and active_id is not None:
            self.view.offer_ways_on(message, info.n_ctx, info.n_ctx_train, needed)

    def offer_shorter(self, needed: int, stored: bool) -> None:
        """A first message is longer than the context: the view says so."""
        info = self.model_info
        if info is not None:
            self.view.offer_shorter(needed, info.n_ctx, info.n_ctx_train, stored)

    # --- preferences and tool servers ---------------------------------------------

    def save_preferences(self, prefs: Preferences) -> None:
        """Use ``prefs`` now; the worker stores them (not on a read-only database)."""
        self.prefs = prefs
        self.view.preferences_changed(prefs)
        if not self.db.read_only:
            self.engine.submit(jobs.SavePreferences(prefs))

    def apply_preferences(self, prefs: Preferences) -> None:
        """Save new preferences; reload the model if it or its settings changed."""
        old, before = self.prefs, self.backend
        self.save_preferences(prefs)
        # Only what changes the settings a model loads with now: a context
        # size in Settings changes nothing while a conversation has its own.
        model_changed = prefs.model_path != old.model_path or self.backend != before
        if prefs.model_path and (model_changed or self.model_info is None):
            self.load_model(Path(prefs.model_path))

    def save_tool_servers(self, servers: list[ServerConfig]) -> None:
        """Store the MCP servers as Settings → Tools left them."""
        self.engine.submit(jobs.SaveToolServers(tuple(servers)))
        self.tools_available = any(server.enabled for server in servers)
        self.view.state_changed()

    def _any_tool_server(self) -> bool:
        try:
            return any(server.enabled for server in load_servers(self.db))
        except StorageUnavailable:
            return False
