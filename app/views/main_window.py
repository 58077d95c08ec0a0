"""``MainWindow``: conversations, transcript, composer, tree and status bar.

The window is the only place that decides: widgets emit requests, the window
turns them into jobs for the engine worker (``EngineController``) and updates
every view when a job finishes. Reads of the tree and the list go straight to
the repository (cheap, and WAL keeps them from blocking on the worker).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, Slot
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QInputDialog,
    QLabel,
    QMainWindow,
    QMessageBox,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.backend.values import SamplingParams
from app.models.conversation_list import ConversationListModel
from app.models.conversation_tree import ConversationTreeModel
from app.models.tree_snapshot import TreeSnapshot
from app.preferences import Preferences, save_preferences
from app.views import exchange_actions
from app.views.about import about_text
from app.views.composer import Composer
from app.views.dialogs.context_full import WayOn, offer_ways_on
from app.views.dialogs.errors import confirm, show_error
from app.views.dialogs.new_conversation import NewConversationDialog
from app.views.dialogs.search import SearchDialog
from app.views.dialogs.settings import SettingsDialog
from app.views.dialogs.storage import StorageDialog
from app.views.message_card import TIMES
from app.views.sidebar import Sidebar
from app.views.status_bar import ArborStatusBar
from app.views.theme import app_icon, icon
from app.views.transcript import TranscriptView
from app.views.tree_panel import TreePanel
from app.views.welcome import WelcomePage, choose_model_file
from app.workers import jobs
from app.workers.engine_thread import EngineController
from app.workers.jobs import GENERATING_KINDS, JobResult
from storage import repository
from storage.db import Database
from storage.errors import NotFound, StorageUnavailable

log = logging.getLogger(__name__)

FAILURE_TITLES = {
    "load": "Could not load the model",
    "new": "Could not create the conversation",
    "summary": "Could not continue from a summary",
    "restore": "Could not go to that message",
    "delete": "Could not delete the branch",
    "reasoning": "Could not change the reasoning setting",
}
BUSY_TEXTS = {
    "load": "Loading the model…",
    "restore": "Restoring…",
    "delete": "Deleting…",
}
# How many replies "Regenerate last reply N times" generates together (a reply's
# own regenerate menu offers 2 to 4).
DEFAULT_ALTERNATIVES = 3
# A keyboard move through the tree: (tree, active node) → node to activate.
Move = Callable[[TreeSnapshot, int], "int | None"]
SHORTCUTS_HELP = (
    "Ctrl+Enter\tsend (Enter inserts a new line)\n"
    "Esc\tstop generating / cancel editing\n"
    "Ctrl+N\tnew conversation\n"
    "Ctrl+Shift+N\tnew conversation with a system prompt\n"
    "Ctrl+O\topen a model file\n"
    "Ctrl+,\tsettings\n"
    "Ctrl+F\tfilter conversations\n"
    "Ctrl+Shift+F\tfind in all conversations\n"
    "F2\trename the conversation\n"
    "Alt+Left / Alt+Right\tprevious / next branch at the nearest fork\n"
    "Alt+Up / Alt+Down\tparent / newest child message\n"
    "Ctrl+R\tregenerate the last reply (a new sibling)\n"
    "Ctrl+Shift+R\tregenerate it 3 times, side by side (three new siblings)\n"
    "Ctrl+E\tedit your last message\n"
    "Ctrl+Shift+T\tfocus the conversation tree\n"
    "Ctrl+T\tshow or hide the conversation tree\n"
    "Del\t(in the tree) delete a branch"
)


class MainWindow(QMainWindow):
    """Arbor's main window.

    Parameters
    ----------
    db
        The open database.
    engine
        The engine thread's controller; the window shuts it down when closed.
    prefs
        The user's preferences (saved back when they change).
    gpu_supported
        Whether this llama.cpp build can offload layers (for the settings).
    """

    def __init__(
        self,
        db: Database,
        engine: EngineController,
        prefs: Preferences,
        gpu_supported: bool,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.db = db
        self.engine = engine
        self.prefs = prefs
        self._gpu_supported = gpu_supported
        self.model_info = None
        self._loading_model: str | None = None
        self.conversation_id: int | None = None
        self.active_id: int | None = None
        self._generating_job: jobs.Job | None = None
        self._pending_text: str | None = None
        # The shown conversation's stored reasoning choice (None: the default).
        self._reasoning: str | None = None

        self.setWindowTitle("Arbor")
        self.setWindowIcon(app_icon())
        self.resize(1280, 800)
        self.list_model = ConversationListModel(db, self)
        self.tree_model = ConversationTreeModel(self)
        self._build_widgets()
        self._build_actions()
        self._connect()
        self._update_composer()

    # --- construction -----------------------------------------------------------------

    def _build_widgets(self) -> None:
        self.sidebar = Sidebar(self.list_model)
        self.transcript = TranscriptView()
        self.composer = Composer()
        self.tree_panel = TreePanel(self.tree_model)
        self.tree_panel.set_mode(self.prefs.tree_view)
        self.welcome = WelcomePage()
        self.welcome.set_recent(list(self.prefs.recent_models))

        chat = QWidget()
        chat_layout = QVBoxLayout(chat)
        chat_layout.setContentsMargins(0, 0, 0, 0)
        chat_layout.setSpacing(0)
        # A database on read-only media still opens, for reading: say so once,
        # above the conversation, rather than in an error per action.
        self.read_only_banner = QLabel(
            f"Read-only: you can read, not write — {self.db.read_only_reason}."
        )
        self.read_only_banner.setObjectName("ReadOnlyBanner")
        self.read_only_banner.setWordWrap(True)
        self.read_only_banner.setVisible(self.db.read_only)
        chat_layout.addWidget(self.read_only_banner)
        chat_layout.addWidget(self.transcript, 1)
        chat_layout.addWidget(self.composer)
        self.center = QStackedWidget()
        self.center.addWidget(self.welcome)
        self.center.addWidget(chat)
        self.chat_page = chat

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(self.center)
        self.splitter.addWidget(self.tree_panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([240, 660, 380])
        self.splitter.setChildrenCollapsible(False)
        self.setCentralWidget(self.splitter)
        self.status = ArborStatusBar()
        self.setStatusBar(self.status)

    def _action(
        self, text: str, slot, shortcut=None, icon_name: str | None = None
    ) -> QAction:
        action = QAction(text, self)
        if icon_name:
            action.setIcon(icon(icon_name))
        if shortcut is not None:
            shortcuts = shortcut if isinstance(shortcut, list) else [shortcut]
            action.setShortcuts([QKeySequence(s) for s in shortcuts])
        action.triggered.connect(slot)
        self.addAction(action)  # shortcuts work even with the menu bar hidden
        return action

    def _build_actions(self) -> None:
        self.new_action = self._action(
            "&New conversation", self._on_new_action_triggered, "Ctrl+N", "plus"
        )
        self.new_with_prompt_action = self._action(
            "New conversation with system &prompt…",
            self._on_new_with_prompt_action_triggered,
            "Ctrl+Shift+N",
        )
        self.open_model_action = self._action(
            "&Open model file…",
            self._on_open_model_action_triggered,
            "Ctrl+O",
            "folder",
        )
        self.settings_action = self._action(
            "&Settings…", self._on_settings_action_triggered, "Ctrl+,", "settings"
        )
        self.storage_action = self._action(
            "S&torage…", self._on_storage_action_triggered, None, "storage"
        )
        self.quit_action = self._action(
            "&Quit", self.close, QKeySequence.StandardKey.Quit
        )
        self.send_action = self._action(
            "&Send",
            self._on_send_action_triggered,
            ["Ctrl+Return", "Ctrl+Enter"],
            "send",
        )
        self.stop_action = self._action(
            "S&top generating", self._on_stop_action_triggered, "Esc", "stop"
        )
        self.rename_action = self._action(
            "&Rename conversation…", self._on_rename_action_triggered, "F2"
        )
        self.delete_conversation_action = self._action(
            "&Delete conversation…",
            self._on_delete_conversation_action_triggered,
            None,
            "delete",
        )
        self.filter_action = self._action(
            "&Filter conversations", self._on_filter_action_triggered, "Ctrl+F"
        )
        self._build_search_and_exchange_actions()
        self.tree_action = self._action(
            "Show conversation &tree", self._on_tree_action_toggled, "Ctrl+T"
        )
        self.tree_action.setCheckable(True)
        self.tree_action.setChecked(True)
        self.shortcuts_action = self._action(
            "&Keyboard shortcuts", self._on_shortcuts_action_triggered
        )
        self.about_action = self._action(
            "&About Arbor", self._on_about_action_triggered
        )
        self.about_action.setMenuRole(QAction.MenuRole.AboutRole)
        self._build_navigation_actions()

        menu = self.menuBar()
        file_menu = menu.addMenu("&File")
        file_menu.addActions([self.new_action, self.new_with_prompt_action])
        file_menu.addSeparator()
        file_menu.addActions([self.import_action, self.export_action])
        file_menu.addSeparator()
        file_menu.addAction(self.open_model_action)
        self.recent_menu = file_menu.addMenu("Recent &models")
        self._fill_recent_menu()
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)
        chat_menu = menu.addMenu("&Conversation")
        chat_menu.addActions([self.send_action, self.stop_action])
        chat_menu.addSeparator()
        chat_menu.addActions(
            [self.rename_action, self.delete_conversation_action, self.filter_action]
        )
        chat_menu.addAction(self.find_action)
        tools = menu.addMenu("&Tools")
        tools.addActions([self.settings_action, self.storage_action])
        chat_menu.addSeparator()
        chat_menu.addActions(
            [self.regenerate_action, self.alternatives_action, self.edit_last_action]
        )
        view = menu.addMenu("&View")
        view.addAction(self.tree_action)
        view.addAction(self.focus_tree_action)
        go_menu = menu.addMenu("&Go")
        go_menu.addActions(self.navigation_actions)
        help_menu = menu.addMenu("&Help")
        help_menu.addAction(self.shortcuts_action)
        help_menu.addSeparator()
        help_menu.addAction(self.about_action)

    def _build_navigation_actions(self) -> None:
        # Each move maps (tree, active node) to the node to activate, or None.
        moves: list[tuple[str, str, Move]] = [
            ("&Previous branch", "Alt+Left", lambda t, n: t.sibling_step(n, -1)),
            ("&Next branch", "Alt+Right", lambda t, n: t.sibling_step(n, 1)),
            ("P&arent message", "Alt+Up", TreeSnapshot.parent_of),
            ("Newest &child message", "Alt+Down", TreeSnapshot.newest_child),
        ]
        self.navigation_actions = [
            self._action(text, lambda _=False, m=move: self._navigate(m), key)
            for text, key, move in moves
        ]
        self.regenerate_action = self._action(
            "&Regenerate last reply", self._on_regenerate_action_triggered, "Ctrl+R"
        )
        self.alternatives_action = self._action(
            f"Regenerate last reply {TIMES}{DEFAULT_ALTERNATIVES} (side by side)",
            self._on_alternatives_action_triggered,
            "Ctrl+Shift+R",
        )
        self.edit_last_action = self._action(
            "&Edit last message", self._on_edit_last_action_triggered, "Ctrl+E"
        )
        self.focus_tree_action = self._action(
            "&Focus conversation tree",
            self._on_focus_tree_action_triggered,
            "Ctrl+Shift+T",
        )

    def _build_search_and_exchange_actions(self) -> None:
        self._search_dialog: SearchDialog | None = None
        self.find_action = self._action(
            "F&ind in all conversations…",
            self._on_find_action_triggered,
            "Ctrl+Shift+F",
        )
        self.export_action = self._action(
            "&Export conversation…", self._on_export_action_triggered
        )
        self.import_action = self._action(
            "&Import conversation…", self._on_import_action_triggered
        )

    def _connect(self) -> None:
        self.engine.started.connect(self._on_engine_started)
        self.engine.token_received.connect(self._on_engine_token_received)
        self.engine.thinking_received.connect(self._on_engine_thinking_received)
        self.engine.alternative_received.connect(self.transcript.append_alternative)
        self.engine.failed.connect(self._on_engine_failed)
        self.engine.finished.connect(self._on_engine_finished)
        self.sidebar.conversation_selected.connect(
            self._on_sidebar_conversation_selected
        )
        self.sidebar.new_requested.connect(self._on_new_action_triggered)
        self.sidebar.rename_requested.connect(self._on_sidebar_rename_requested)
        self.sidebar.delete_requested.connect(self._on_sidebar_delete_requested)
        self.tree_panel.node_activated.connect(self._on_tree_panel_node_activated)
        self.tree_panel.delete_requested.connect(self._on_tree_panel_delete_requested)
        self.tree_panel.mode_changed.connect(self._on_tree_panel_mode_changed)
        self.transcript.sibling_requested.connect(self._on_transcript_sibling_requested)
        self.transcript.edit_requested.connect(self._on_transcript_edit_requested)
        self.transcript.regenerate_requested.connect(
            self._on_transcript_regenerate_requested
        )
        self.transcript.alternatives_requested.connect(
            self._on_transcript_alternatives_requested
        )
        self.transcript.branch_requested.connect(self._on_tree_panel_node_activated)
        self.composer.send_clicked.connect(self._on_send_action_triggered)
        self.composer.stop_clicked.connect(self._on_stop_action_triggered)
        self.composer.reasoning_changed.connect(self._on_composer_reasoning_changed)
        self.welcome.model_chosen.connect(self._on_welcome_model_chosen)

    # --- startup ----------------------------------------------------------------------

    def start(self, model: Path | None) -> None:
        """Show the most recent conversation (or a new one) and load ``model``.

        With no model, the welcome page asks for one.
        """
        self.sidebar.refresh(None)
        if self.list_model.rowCount():
            self.show_conversation(self.list_model.record(0).id)
        elif not self.db.read_only:
            self.engine.submit(jobs.NewConversation(self.prefs.system_prompt or None))
        if self.db.read_only:
            # Nothing can be written, so no reply can be made: no model needed.
            self.center.setCurrentWidget(self.chat_page)
        elif model is not None:
            self.load_model(model)
        else:
            self.center.setCurrentWidget(self.welcome)

    def load_model(self, path: Path) -> None:
        """Load a model in the background (the composer waits for it)."""
        self._loading_model = str(path)
        self.status.set_busy(BUSY_TEXTS["load"])  # at once: loading can take a while
        self._update_composer()
        self.engine.load_model(path, self.prefs.backend)

    # --- state ------------------------------------------------------------------------

    @property
    def generating(self) -> bool:
        """Whether a reply is being generated."""
        return self._generating_job is not None

    def show_conversation(
        self, conversation_id: int, node_id: int | None = None
    ) -> None:
        """Show a conversation at ``node_id`` (by default, its active node)."""
        try:
            record = repository.get_conversation(self.db, conversation_id)
        except (StorageUnavailable, NotFound) as exc:
            show_error(self, "Could not open the conversation", str(exc))
            return
        self.conversation_id = conversation_id
        self._reasoning = record.reasoning
        self.composer.set_reasoning(record.reasoning)
        self.setWindowTitle(f"{record.title} — Arbor")
        self.sidebar.select(conversation_id)
        self._reload_tree()
        if node_id not in self.tree_model.snapshot:
            node_id = record.active_node_id or self.tree_model.snapshot.root_id
        self.activate(node_id)

    def activate(
        self, node_id: int | None, restore: bool = True, follow: bool = True
    ) -> None:
        """Make ``node_id`` the active node: the views follow at once and the
        engine restores to it in the background.

        ``follow`` False leaves the transcript where the user scrolled to.
        """
        snapshot = self.tree_model.snapshot
        if node_id is None or node_id not in snapshot:
            node_id = snapshot.root_id
        self.active_id = node_id
        self.tree_model.set_active(node_id)
        self.tree_panel.show_active(node_id)
        if node_id is not None:
            self.transcript.show_path(
                snapshot.transcript(node_id),
                {n: snapshot.siblings(n) for n in snapshot.path(node_id)},
                self._path_thinking(node_id),
                follow=follow,
            )
            try:
                if not self.db.read_only:  # where to reopen: worth no error
                    repository.set_active_node(self.db, node_id)
            except (StorageUnavailable, NotFound) as exc:
                show_error(self, "Could not save your place", str(exc))
            if restore and self.model_info is not None:
                self.engine.submit(jobs.Restore(node_id))
        self._update_composer()

    def _reload_tree(self) -> None:
        if self.conversation_id is None:
            self.tree_model.set_snapshot(TreeSnapshot.empty())
            return
        try:
            nodes = repository.tree(self.db, self.conversation_id)
        except (StorageUnavailable, NotFound) as exc:
            show_error(self, "Could not read the conversation", str(exc))
            return
        self.tree_model.set_snapshot(TreeSnapshot(self.conversation_id, nodes))

    def _path_thinking(self, node_id: int) -> dict[int, str]:
        """The reasoning of the replies on the path to ``node_id``, by node id."""
        snapshot = self.tree_model.snapshot
        return {
            nid: snapshot.nodes[nid].thinking
            for nid in snapshot.path(node_id)
            if snapshot.nodes[nid].thinking
        }

    def _active_role(self) -> str | None:
        snapshot = self.tree_model.snapshot
        return (
            snapshot.nodes[self.active_id].role if self.active_id in snapshot else None
        )

    def _update_composer(self) -> None:
        generating = self.generating
        self.composer.set_generating(generating)
        if self.db.read_only:
            self.composer.set_available(False, "Read-only: you can read, not write.")
        elif self._loading_model is not None:
            self.composer.set_available(False, "Loading the model…")
        elif self.model_info is None:
            self.composer.set_available(
                False,
                "Choose a model to start chatting (File → Open model file, Ctrl+O).",
            )
        elif self._active_role() == "user":
            self.composer.set_available(
                True, "Ctrl+Enter generates a reply to the message above."
            )
        else:
            self.composer.set_available(True, "Write a message…  (Ctrl+Enter to send)")
        idle = not generating
        writable = idle and not self.db.read_only
        for widget in (self.sidebar, self.tree_panel.view):
            widget.setEnabled(idle)
        for widget in (self.tree_panel.delete_button, self.composer.reasoning_box):
            widget.setEnabled(writable)
        self.open_model_action.setEnabled(writable)
        for action in self.navigation_actions:
            action.setEnabled(idle)
        for action in (
            self.regenerate_action,
            self.edit_last_action,
            self.new_action,
            self.new_with_prompt_action,
            self.settings_action,
            self.storage_action,
            self.rename_action,
            self.delete_conversation_action,
            self.import_action,
        ):
            action.setEnabled(writable)
        self.transcript.set_actions_enabled(writable and self.model_info is not None)

    # --- generating -------------------------------------------------------------------

    def _sampling(self) -> SamplingParams:
        return self.prefs.sampling

    def _begin_generation(
        self, job: jobs.Job, prefix_id: int, pending_text: str | None
    ) -> None:
        snapshot = self.tree_model.snapshot
        self.transcript.show_path(
            snapshot.transcript(prefix_id),
            {n: snapshot.siblings(n) for n in snapshot.path(prefix_id)},
            self._path_thinking(prefix_id),
        )
        if isinstance(job, jobs.RegenerateParallel):
            self.transcript.begin_alternatives(job.n)
        else:
            self.transcript.begin_stream(pending_text)
        self._generating_job = job
        self._pending_text = pending_text
        self._update_composer()
        self.engine.submit(job)

    def _end_generation(self, result: JobResult) -> None:
        self._generating_job = None
        if result.reply is not None:
            stats = result.reply.stats
            self.status.set_speed(stats.tokens_per_second)
            self.status.set_context(stats.context_tokens, stats.n_ctx)
            if stats.restored_tokens or stats.reprocessed_tokens:
                self.status.set_restore(stats)
            target = result.node_id
        else:
            # The user's message may have been saved before the failure; show
            # wherever the conversation now stands, and give back unsent text.
            if self._pending_text and not self.composer.text:
                self.composer.edit.setPlainText(self._pending_text)
            target = self._stored_active_node()
        self._pending_text = None
        self._reload_tree()
        # Same path, now complete: a user reading higher up stays there.
        self.activate(target, restore=False, follow=False)
        self.sidebar.refresh(self.conversation_id)
        cut = result.reply is not None and result.reply.stats.stop_reason == (
            "context_full"
        )
        if result.context_full or cut:
            self._offer_ways_on(result.error or "The reply was cut off.")

    def _offer_ways_on(self, message: str) -> None:
        """The branch filled the context: let the user choose how to go on."""
        if self.model_info is None or self.active_id is None:
            return
        offer_ways_on(
            self,
            message,
            self.model_info.n_ctx,
            self.model_info.n_ctx_train,
            self._on_way_on_chosen,
        )

    def _on_way_on_chosen(self, choice: WayOn, size: int | None) -> None:
        if choice is WayOn.BRANCH:
            self._on_focus_tree_action_triggered()
            self.status.showMessage("Click an earlier message to branch from it.")
        elif choice is WayOn.RAISE and size is not None:
            backend = replace(self.prefs.backend, n_ctx=size)
            self.apply_preferences(replace(self.prefs, backend=backend))
        elif choice is WayOn.SUMMARY and self.active_id is not None:
            self.status.set_busy("Summarizing this branch…")
            self.engine.submit(
                jobs.ContinueWithSummary(self.active_id, self._sampling())
            )

    def _stored_active_node(self) -> int | None:
        if self.conversation_id is None:
            return None
        try:
            return repository.get_conversation(
                self.db, self.conversation_id
            ).active_node_id
        except (StorageUnavailable, NotFound):
            return self.active_id

    # --- engine signals ---------------------------------------------------------------

    @Slot(str)
    def _on_engine_started(self, kind: str) -> None:
        self.status.set_busy(
            "Generating…" if kind in GENERATING_KINDS else BUSY_TEXTS.get(kind)
        )

    @Slot(str)
    def _on_engine_token_received(self, piece: str) -> None:
        self.transcript.append_stream(piece)

    @Slot(str)
    def _on_engine_thinking_received(self, piece: str) -> None:
        self.transcript.append_thinking(piece)

    @Slot(str, str)
    def _on_engine_failed(self, kind: str, message: str) -> None:
        show_error(
            self, FAILURE_TITLES.get(kind, "Could not generate a reply"), message
        )

    @Slot(object)
    def _on_engine_finished(self, result: JobResult) -> None:
        if not self.engine.busy:
            self.status.set_busy(None)
        if result.kind == "load":
            self._on_model_loaded(result)
        elif result.kind in GENERATING_KINDS:
            self._end_generation(result)
        elif result.kind in ("new", "summary") and result.conversation_id is not None:
            self.sidebar.refresh(result.conversation_id)
            self.show_conversation(result.conversation_id)
        elif result.kind == "restore" and result.sync is not None:
            self.status.set_restore(result.sync)
            self.status.set_context(result.context_tokens, result.n_ctx)
            if result.sync.reprocessed_tokens:
                # Reprocessing renders spans and writes checkpoints: show them.
                self._reload_tree()
                self.sidebar.refresh(self.conversation_id)
        elif result.kind == "delete":
            self._reload_tree()
            self.activate(result.node_id or self._stored_active_node(), restore=False)
            self.sidebar.refresh(self.conversation_id)
        elif result.kind == "reasoning" and result.error is not None:
            self._show_stored_reasoning()
        self._update_composer()

    def _on_model_loaded(self, result: JobResult) -> None:
        path, self._loading_model = self._loading_model, None
        if result.model is None:
            if self.model_info is None:
                self.welcome.set_message(
                    "That model could not be loaded. Choose another .gguf file "
                    "(the details are in the message)."
                )
                self.center.setCurrentWidget(self.welcome)
            return
        self.model_info = result.model
        self.status.set_model(result.model)
        self.composer.set_reasoning_choices(
            result.model.reasoning_choices, result.model.reasoning_default
        )
        self.composer.set_reasoning(self._reasoning)
        self.status.set_context(0, result.n_ctx)
        if path is not None:
            self._save_prefs(self.prefs.with_model(path))
        self.center.setCurrentWidget(self.chat_page)
        self.composer.edit.setFocus()
        if self.active_id is not None:
            self.engine.submit(jobs.Restore(self.active_id))

    # --- user actions -----------------------------------------------------------------

    @Slot()
    def _on_send_action_triggered(self) -> None:
        if (
            self.generating
            or self.model_info is None
            or self._loading_model
            or self.active_id is None
        ):
            return
        text = self.composer.text.strip()
        editing = self.composer.editing_node
        snapshot = self.tree_model.snapshot
        if editing is not None and editing in snapshot:
            if not text:
                return
            parent = snapshot.nodes[editing].parent_id
            assert parent is not None
            self.composer.end_edit()
            self.composer.clear()
            self._begin_generation(
                jobs.Edit(
                    editing, text, self._sampling(), self.prefs.checkpoint_budget_bytes
                ),
                parent,
                text,
            )
        elif self._active_role() == "user":
            self._begin_generation(
                jobs.GenerateReply(
                    self.active_id, self._sampling(), self.prefs.checkpoint_budget_bytes
                ),
                self.active_id,
                None,
            )
        elif text:
            self.composer.clear()
            self._begin_generation(
                jobs.Send(
                    self.active_id,
                    text,
                    self._sampling(),
                    self.prefs.checkpoint_budget_bytes,
                ),
                self.active_id,
                text,
            )

    @Slot()
    def _on_stop_action_triggered(self) -> None:
        if self.generating:
            self.engine.stop()
        elif self.composer.editing_node is not None:
            self.composer.end_edit()
            self.composer.clear()

    @Slot(object)
    def _on_composer_reasoning_changed(self, choice: str | None) -> None:
        if self.conversation_id is None or choice == self._reasoning:
            return
        self._reasoning = choice
        self.engine.submit(jobs.SetReasoning(self.conversation_id, choice))

    def _show_stored_reasoning(self) -> None:
        # After a failed change: show what is stored, not what was asked for.
        if self.conversation_id is None:
            return
        try:
            record = repository.get_conversation(self.db, self.conversation_id)
        except (StorageUnavailable, NotFound):
            return
        self._reasoning = record.reasoning
        self.composer.set_reasoning(record.reasoning)

    @Slot(int)
    def _on_transcript_regenerate_requested(self, node_id: int) -> None:
        if self.generating or self.model_info is None:
            return
        parent = self.tree_model.snapshot.nodes[node_id].parent_id
        assert parent is not None
        self._begin_generation(
            jobs.Regenerate(
                node_id, self._sampling(), self.prefs.checkpoint_budget_bytes
            ),
            parent,
            None,
        )

    @Slot(int, int)
    def _on_transcript_alternatives_requested(self, node_id: int, n: int) -> None:
        if self.generating or self.model_info is None:
            return
        parent = self.tree_model.snapshot.nodes[node_id].parent_id
        assert parent is not None
        self._begin_generation(
            jobs.RegenerateParallel(
                node_id, self._sampling(), n, self.prefs.checkpoint_budget_bytes
            ),
            parent,
            None,
        )

    @Slot(int)
    def _on_transcript_edit_requested(self, node_id: int) -> None:
        if not self.generating:
            self.composer.begin_edit(
                node_id, self.tree_model.snapshot.nodes[node_id].text
            )

    @Slot(int)
    def _on_transcript_sibling_requested(self, node_id: int) -> None:
        if not self.generating:
            self.activate(self.tree_model.snapshot.latest_leaf(node_id))

    @Slot(int)
    def _on_tree_panel_node_activated(self, node_id: int) -> None:
        if not self.generating and node_id != self.active_id:
            self.activate(node_id)

    @Slot(str)
    def _on_tree_panel_mode_changed(self, mode: str) -> None:
        if not self.db.read_only:
            self._save_prefs(replace(self.prefs, tree_view=mode))

    @Slot(int)
    def _on_tree_panel_delete_requested(self, node_id: int) -> None:
        snapshot = self.tree_model.snapshot
        below = self._count_below(snapshot, node_id)
        text = "Delete this message"
        text += (
            f" and the {below} message{'s' if below != 1 else ''} below it?"
            if below
            else "?"
        )
        if not self.generating and confirm(
            self, "Delete branch", text + " This cannot be undone.", "Delete"
        ):
            self.engine.submit(jobs.DeleteBranch(node_id))

    @staticmethod
    def _count_below(snapshot: TreeSnapshot, node_id: int) -> int:
        pending, count = list(snapshot.children.get(node_id, [])), 0
        while pending:
            count += 1
            pending.extend(snapshot.children.get(pending.pop(), []))
        return count

    @Slot(int)
    def _on_sidebar_conversation_selected(self, conversation_id: int) -> None:
        if conversation_id != self.conversation_id:
            self.composer.end_edit()
            self.show_conversation(conversation_id)

    @Slot()
    def _on_new_action_triggered(self) -> None:
        self.engine.submit(jobs.NewConversation(self.prefs.system_prompt or None))

    @Slot()
    def _on_new_with_prompt_action_triggered(self) -> None:
        dialog = NewConversationDialog(self.prefs.system_prompt, self)
        if dialog.exec() == NewConversationDialog.DialogCode.Accepted:
            self.engine.submit(jobs.NewConversation(dialog.system_prompt, dialog.title))

    @Slot()
    def _on_rename_action_triggered(self) -> None:
        if self.conversation_id is not None:
            self._on_sidebar_rename_requested(self.conversation_id)

    @Slot(int)
    def _on_sidebar_rename_requested(self, conversation_id: int) -> None:
        row = self.list_model.row_of(conversation_id)
        if row < 0:
            return
        title, ok = QInputDialog.getText(
            self,
            "Rename conversation",
            "Title:",
            text=self.list_model.record(row).title,
        )
        if ok and title.strip():
            self.rename_conversation(conversation_id, title.strip())

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Give a conversation a new title."""
        try:
            self.list_model.rename(self.list_model.row_of(conversation_id), title)
        except (StorageUnavailable, NotFound) as exc:
            show_error(self, "Could not rename the conversation", str(exc))
            return
        if conversation_id == self.conversation_id:
            self.setWindowTitle(f"{title} — Arbor")

    @Slot()
    def _on_delete_conversation_action_triggered(self) -> None:
        if self.conversation_id is not None:
            self._on_sidebar_delete_requested(self.conversation_id)

    @Slot(int)
    def _on_sidebar_delete_requested(self, conversation_id: int) -> None:
        row = self.list_model.row_of(conversation_id)
        title = self.list_model.record(row).title if row >= 0 else "this conversation"
        if confirm(
            self,
            "Delete conversation",
            f"Delete “{title}” with all its branches? This cannot be undone.",
            "Delete",
        ):
            self.delete_conversation(conversation_id)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation; show the next most recent one (or a new one)."""
        try:
            repository.delete_conversation(self.db, conversation_id)
        except (StorageUnavailable, NotFound) as exc:
            show_error(self, "Could not delete the conversation", str(exc))
            return
        self.sidebar.refresh(None)
        if conversation_id != self.conversation_id:
            self.sidebar.select(self.conversation_id)
            return
        self.conversation_id = None
        if self.list_model.rowCount():
            self.show_conversation(self.list_model.record(0).id)
        else:
            self._reload_tree()
            self.engine.submit(jobs.NewConversation(self.prefs.system_prompt or None))

    @Slot()
    def _on_filter_action_triggered(self) -> None:
        self.sidebar.filter_edit.setFocus()
        self.sidebar.filter_edit.selectAll()

    @Slot()
    def _on_find_action_triggered(self) -> None:
        if self._search_dialog is None:
            self._search_dialog = SearchDialog(self.db, self)
            self._search_dialog.hit_chosen.connect(self._on_search_dialog_hit_chosen)
        self._search_dialog.open_search()

    @Slot(int, int)
    def _on_search_dialog_hit_chosen(self, conversation_id: int, node_id: int) -> None:
        assert self._search_dialog is not None
        if self.generating:
            # As for a click in the tree: the path cannot change mid-reply.
            self._search_dialog.set_note(
                "A reply is being generated: stop it (Esc) or wait, then open "
                "the message."
            )
            return
        self._search_dialog.hide()
        if conversation_id != self.conversation_id:
            self.composer.end_edit()
            self.show_conversation(conversation_id, node_id)
        elif node_id != self.active_id:
            self.activate(node_id)

    @Slot()
    def _on_export_action_triggered(self) -> None:
        if self.conversation_id is None:
            return
        path = exchange_actions.export_conversation(
            self, self.db, self.conversation_id, self.active_id
        )
        if path is not None:
            self.statusBar().showMessage(f"Exported to {path}", 5000)

    @Slot()
    def _on_import_action_triggered(self) -> None:
        if self.generating:
            return
        conversation_id = exchange_actions.import_conversation(self, self.db)
        if conversation_id is not None:
            self.composer.end_edit()
            self.sidebar.refresh(conversation_id)
            self.show_conversation(conversation_id)

    @Slot(bool)
    def _on_tree_action_toggled(self, checked: bool) -> None:
        self.tree_panel.setVisible(checked)

    def _navigate(self, move: Move) -> None:
        """Activate where ``move`` leads from the active node, if anywhere."""
        snapshot = self.tree_model.snapshot
        if self.generating or self.active_id not in snapshot:
            return
        target = move(snapshot, self.active_id)
        if target is not None:
            self.activate(target)

    @Slot()
    def _on_regenerate_action_triggered(self) -> None:
        snapshot = self.tree_model.snapshot
        if self.active_id in snapshot:
            reply = snapshot.last_of_role(self.active_id, "assistant")
            if reply is not None:
                self._on_transcript_regenerate_requested(reply)

    @Slot()
    def _on_alternatives_action_triggered(self) -> None:
        snapshot = self.tree_model.snapshot
        if self.active_id in snapshot:
            reply = snapshot.last_of_role(self.active_id, "assistant")
            if reply is not None:
                self._on_transcript_alternatives_requested(reply, DEFAULT_ALTERNATIVES)

    @Slot()
    def _on_edit_last_action_triggered(self) -> None:
        snapshot = self.tree_model.snapshot
        if self.active_id in snapshot:
            message = snapshot.last_of_role(self.active_id, "user")
            if message is not None:
                self._on_transcript_edit_requested(message)
                self.composer.edit.setFocus()

    @Slot()
    def _on_focus_tree_action_triggered(self) -> None:
        self.tree_action.setChecked(True)
        self.tree_panel.show()
        self.tree_panel.view.setFocus()

    @Slot()
    def _on_about_action_triggered(self) -> None:
        QMessageBox.about(self, "About Arbor", about_text())

    @Slot()
    def _on_shortcuts_action_triggered(self) -> None:
        QMessageBox.information(self, "Keyboard shortcuts", SHORTCUTS_HELP)

    @Slot()
    def _on_open_model_action_triggered(self) -> None:
        path = choose_model_file(
            self,
            str(Path(self.prefs.model_path).parent) if self.prefs.model_path else "",
        )
        if path is not None:
            self.load_model(path)

    @Slot(str)
    def _on_welcome_model_chosen(self, path: str) -> None:
        self.load_model(Path(path))

    @Slot()
    def _on_settings_action_triggered(self) -> None:
        dialog = SettingsDialog(self.prefs, self._gpu_supported, self)
        if dialog.exec() == SettingsDialog.DialogCode.Accepted:
            self.apply_preferences(dialog.preferences())

    def apply_preferences(self, prefs: Preferences) -> None:
        """Save new preferences; reload the model if it or its settings changed."""
        old = self.prefs
        self._save_prefs(prefs)
        model_changed = (
            prefs.model_path != old.model_path or prefs.backend != old.backend
        )
        if prefs.model_path and (model_changed or self.model_info is None):
            self.load_model(Path(prefs.model_path))

    @Slot()
    def _on_storage_action_triggered(self) -> None:
        dialog = StorageDialog(self.db, self.prefs.checkpoint_budget_mb, self)
        dialog.exec()
        self._save_prefs(replace(self.prefs, checkpoint_budget_mb=dialog.budget_mb))
        self._reload_tree()
        self.sidebar.refresh(self.conversation_id)

    def _save_prefs(self, prefs: Preferences) -> None:
        self.prefs = prefs
        self.welcome.set_recent(list(prefs.recent_models))
        self._fill_recent_menu()
        try:
            save_preferences(self.db, prefs)
        except StorageUnavailable as exc:
            show_error(self, "Could not save the settings", str(exc))

    def _fill_recent_menu(self) -> None:
        self.recent_menu.clear()
        for path in self.prefs.recent_models:
            action = self.recent_menu.addAction(Path(path).name)
            action.setToolTip(path)
            action.triggered.connect(
                lambda _checked=False, p=path: self.load_model(Path(p))
            )
        self.recent_menu.setEnabled(bool(self.prefs.recent_models))

    # --- closing ----------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:
        # Stop the reply (the service keeps what was generated, marked
        # "stopped"), free the model and end the engine thread before closing.
        self.engine.shut_down()
        super().closeEvent(event)
