"""``MainWindow``: conversations, transcript, composer, tree and status bar.

The window shows and asks; ``WindowPresenter`` (``app/window/presenter.py``, no Qt)
decides. Widgets and actions forward what the user asks for to the
presenter, after any question a dialog must ask first (a title, "delete?");
the presenter submits jobs to the engine worker and calls the window back
through the ``View`` methods below. The widgets are laid out by
``window_layout``; the actions come from the table in ``app.window.actions`` (each
is ``window.<name>_action``).

Models are found, downloaded and removed through ``ModelServices`` (the
download and library threads), which the window owns for its whole life: a
download goes on while the chat does and when the Models dialog is closed;
``DownloadStatus`` shows it in the status bar, and the welcome page's offer
of a recommended model.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Slot
from PySide6.QtGui import QCloseEvent, QResizeEvent, QTextCursor
from PySide6.QtWidgets import (
    QFileDialog,
    QInputDialog,
    QMainWindow,
    QMessageBox,
    QWidget,
)

from app.backend.values import ModelInfo
from app.conversation.tree_snapshot import TreeSnapshot
from app.library.installed import models_dir_for
from app.mcp.config import ServerConfig, load_servers
from app.preferences import LocalServerPrefs, Preferences
from app.qt.models.conversation_list import ConversationListModel
from app.qt.models.conversation_tree import ConversationTreeModel
from app.qt.views.chrome import exchange_actions
from app.qt.views.chrome.about import about_text
from app.qt.views.chrome.download_status import DownloadStatus
from app.qt.views.chrome.status_bar import ReplyFigures, SyncFigures
from app.qt.views.chrome.window_actions import build_actions, fill_recent_menu
from app.qt.views.chrome.window_layout import build_layout, fit_to_screen
from app.qt.views.chrome.zoom import TextZoom
from app.qt.views.dialogs.context_full import offer_shorter, offer_ways_on
from app.qt.views.dialogs.conversation_settings import ConversationSettingsDialog
from app.qt.views.dialogs.engine_lost import offer_reload
from app.qt.views.dialogs.errors import confirm, show_error
from app.qt.views.dialogs.models import ModelsDialog
from app.qt.views.dialogs.new_conversation import NewConversationDialog
from app.qt.views.dialogs.search import SearchDialog
from app.qt.views.dialogs.settings import SettingsDialog
from app.qt.views.dialogs.storage import StorageDialog
from app.qt.views.library.welcome import choose_model_file, start_folder
from app.qt.views.theme import app_icon
from app.qt.workers.engine_thread import EngineController
from app.qt.workers.library_worker import ModelServices
from app.text.attachments import AttachmentError, read_attachment, split
from app.window.actions import SHORTCUTS_HELP
from app.window.presenter import WayOn, WindowPresenter
from app.window.tool_turns import waiting_calls
from storage.conversation_listing import ConversationRecord
from storage.db import Database
from storage.errors import StorageUnavailable
from storage.values import Role

if TYPE_CHECKING:
    # Imported when the dialog first opens: the window starts without aiohttp.
    from app.qt.local_server import LocalServerController
    from app.qt.views.dialogs.local_server import LocalServerDialog


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
        Whether this llama.cpp build can offload layers (for the settings);
        None: as the engine thread found (False until it has asked).
    models
        The model library and its download and library threads; the window
        shuts them down when closed.
    """

    def __init__(
        self,
        db: Database,
        engine: EngineController,
        prefs: Preferences,
        gpu_supported: bool | None,
        models: ModelServices,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.db = db
        self.engine = engine
        self.models = models
        self._gpu_supported = gpu_supported
        self._search_dialog: SearchDialog | None = None
        # Where the file dialog for attachments opens: the last folder used.
        self._attach_folder = Path.home()
        self._models_dialog: ModelsDialog | None = None
        # The local server (Tools → Local server), made when first opened.
        self.local_server: LocalServerController | None = None
        self._local_server_dialog: LocalServerDialog | None = None
        self.presenter = WindowPresenter(db, engine, prefs, self)
        self.setWindowTitle("Arbor")
        self.setWindowIcon(app_icon())
        self.resize(1280, 800)
        fit_to_screen(self)  # a small or scaled screen (issue 22)
        self.list_model = ConversationListModel(db, self)
        self.tree_model = ConversationTreeModel(self)
        widgets = build_layout(self, db, prefs, self.list_model, self.tree_model)
        self.sidebar, self.transcript = widgets.sidebar, widgets.transcript
        self.composer, self.tree_panel = widgets.composer, widgets.tree_panel
        self.welcome, self.read_only_banner = widgets.welcome, widgets.read_only_banner
        self.model_offer = widgets.model_offer
        self.starter_offer = widgets.starter_offer
        self.center, self.chat_page = widgets.center, widgets.chat_page
        self.splitter, self.status = widgets.splitter, widgets.status
        # Until the user drags a divider, the panels keep their shares of the
        # window's width as it changes (see ``resizeEvent``).
        self._split_by_user = False
        self.splitter.splitterMoved.connect(self._on_splitter_splitter_moved)
        self._share_width()
        self.zoom = TextZoom(self, self)  # before the actions: the zoom's are its own
        self.actions_by_name, self.recent_menu = build_actions(self, self)
        self.download_status = DownloadStatus(
            models,
            self.welcome,
            self.starter_offer,
            self.status,
            prefs.backend.n_ctx,
            self,
        )
        self.preferences_changed(prefs)
        self._connect()
        self.state_changed()

    def _share_width(self) -> None:
        """Share the window's width between list, transcript and tree in the
        proportions of a wide window: otherwise a window made narrower than
        the splitter's first sizes takes it all from the transcript, and one
        made wider gives it all to the transcript."""
        width = self.width()
        self.splitter.setSizes([round(width * share) for share in (0.19, 0.52, 0.29)])

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if not self._split_by_user:
            self._share_width()

    @Slot(int, int)
    def _on_splitter_splitter_moved(self, _pos: int, _index: int) -> None:
        self._split_by_user = True

    def _connect(self) -> None:
        # The engine controller emits on the GUI thread: the presenter's
        # methods run there, like slots.
        presenter = self.presenter
        self.engine.started.connect(presenter.on_started)
        self.engine.failed.connect(presenter.on_failed)
        self.engine.finished.connect(presenter.on_finished)
        # Through the presenter, which keeps what streamed: the user may be
        # reading another conversation, and come back to the reply.
        self.engine.token_received.connect(presenter.on_token)
        self.engine.thinking_received.connect(presenter.on_thinking)
        self.engine.alternative_received.connect(presenter.on_alternative)
        self.engine.progress.connect(presenter.on_progress)
        self.sidebar.conversation_selected.connect(presenter.select_conversation)
        self.sidebar.new_requested.connect(presenter.new_conversation)
        self.sidebar.rename_requested.connect(self.ask_rename)
        self.sidebar.delete_requested.connect(self.ask_delete)
        self.tree_panel.node_activated.connect(presenter.choose_node)
        self.tree_panel.delete_requested.connect(self.ask_delete_branch)
        self.tree_panel.system_prompt_requested.connect(self.ask_branch_system_prompt)
        self.tree_panel.mode_changed.connect(self._on_tree_panel_mode_changed)
        self.transcript.sibling_requested.connect(presenter.choose_sibling)
        self.transcript.edit_requested.connect(self.edit_message)
        self.transcript.regenerate_requested.connect(presenter.regenerate)
        self.transcript.continue_requested.connect(presenter.continue_reply)
        self.transcript.alternatives_requested.connect(presenter.alternatives)
        self.transcript.branch_requested.connect(presenter.choose_node)
        self.transcript.example_chosen.connect(self._on_transcript_example_chosen)
        self.transcript.run_call_requested.connect(presenter.run_call)
        self.transcript.deny_call_requested.connect(presenter.deny_call)
        self.transcript.run_edited_call_requested.connect(presenter.run_edited_call)
        # The card's buttons go once the call is answered: the keyboard goes
        # back to the message box rather than to the window's first button.
        for answered in (
            self.transcript.run_call_requested,
            self.transcript.deny_call_requested,
            self.transcript.run_edited_call_requested,
        ):
            answered.connect(self._focus_composer)
        self.composer.tools_changed.connect(presenter.set_tools)
        self.composer.send_clicked.connect(self.send)
        self.composer.attach_clicked.connect(self.ask_attachments)
        self.composer.files_dropped.connect(self.attach_files)
        self.composer.attachment_removed.connect(presenter.detach)
        self.composer.stop_clicked.connect(self.stop)
        self.composer.reasoning_changed.connect(presenter.set_reasoning)
        self.welcome.model_chosen.connect(self._on_welcome_model_chosen)
        self.welcome.browse_requested.connect(self.open_models)
        self.starter_offer.browse_requested.connect(self.open_models)
        self.download_status.switch_requested.connect(
            self._on_download_status_switch_requested
        )
        self.model_offer.switch_requested.connect(presenter.switch_to_made_with)
        self.model_offer.keep_requested.connect(presenter.keep_loaded_model)
        self.download_status.load_requested.connect(
            self._on_download_status_load_requested
        )

    # --- what tests, tools and the composition root use -------------------------

    @property
    def prefs(self) -> Preferences:
        """The user's preferences (setting them stores nothing: see
        ``apply_preferences``)."""
        return self.presenter.prefs

    @prefs.setter
    def prefs(self, prefs: Preferences) -> None:
        self.presenter.prefs = prefs

    @property
    def model_info(self) -> ModelInfo | None:
        """The loaded model, if any."""
        return self.presenter.model_info

    @property
    def conversation_id(self) -> int | None:
        """The conversation shown."""
        return self.presenter.conversation_id

    @property
    def active_id(self) -> int | None:
        """The active node: the end of the path shown."""
        return self.presenter.active_id

    @property
    def generating(self) -> bool:
        """Whether a reply is being generated."""
        return self.presenter.generating

    def start(self, model: Path | None) -> None:
        """Show the most recent conversation and load ``model`` (see the presenter)."""
        self.presenter.start(model)

    def load_model(self, path: Path) -> None:
        """Load a model in the background."""
        self.presenter.load_model(path)

    def show_conversation(
        self, conversation_id: int, node_id: int | None = None
    ) -> None:
        """Show a conversation at ``node_id`` (by default, its active node)."""
        self.presenter.show_conversation(conversation_id, node_id)

    def activate(self, node_id: int | None) -> None:
        """Make ``node_id`` the active node (as a click on it does)."""
        self.presenter.activate(node_id)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Give a conversation a new title."""
        self.presenter.rename_conversation(conversation_id, title)

    def apply_preferences(self, prefs: Preferences) -> None:
        """Save new preferences; reload the model if it or its settings changed."""
        library = self.models.library
        # New downloads go to the chosen folder; those made go on where they are.
        library.models_dir = models_dir_for(library.data_dir, prefs.models_dir)
        self.presenter.apply_preferences(prefs)

    # --- View: what the presenter shows ------------------------------------------

    def conversation_shown(self, record: ConversationRecord) -> None:
        """A conversation is now shown: its title, its reasoning choice."""
        self.composer.set_reasoning(record.reasoning)
        self.setWindowTitle(f"{record.title} — Arbor")
        # The last move's and reply's figures were the conversation before's.
        self.status.clear_figures()
        self.sidebar.select(record.id)

    def show_title(self, conversation_id: int, title: str) -> None:
        """A conversation has this title now."""
        self.list_model.set_title(conversation_id, title)
        if conversation_id == self.presenter.conversation_id:
            self.setWindowTitle(f"{title} — Arbor")

    def show_tree(self, snapshot: TreeSnapshot) -> None:
        """Show the shown conversation's tree (an edit of a node gone from it ends)."""
        self.tree_model.set_snapshot(snapshot)
        if self.composer.editing_node not in (None, *snapshot.nodes):
            self.composer.end_edit()

    def show_path(self, node_id: int | None, follow: bool) -> None:
        """Show the path to the active node in the tree and the transcript."""
        self.tree_model.set_active(node_id)
        self.tree_panel.show_active(node_id)
        if node_id is not None:
            self._show_transcript(node_id, follow)

    def begin_reply(self, prefix_id: int, pending_text: str | None, n: int) -> None:
        """Show the path to ``prefix_id`` and room for the reply (or ``n`` of them)."""
        # What the status bar said of the last reply (a call that asks, the
        # step limit) is answered by this one.
        self.status.clearMessage()
        # No call waits while a job runs: the one asked about is being run.
        self._show_transcript(prefix_id, follow=True, waiting=False)
        if n:
            self.transcript.begin_alternatives(n)
        else:
            self.transcript.begin_stream(pending_text)

    def append_stream(self, piece: str) -> None:
        """A piece of the streaming reply's answer."""
        self.transcript.append_stream(piece)

    def append_thinking(self, piece: str) -> None:
        """A piece of the streaming reply's reasoning."""
        self.transcript.append_thinking(piece)

    def show_reply_progress(self, text: str) -> None:
        """Say in the streaming reply what it waits for."""
        self.transcript.show_reply_progress(text)

    def append_alternative(self, index: int, piece: str) -> None:
        """A piece of alternative ``index``'s answer."""
        self.transcript.append_alternative(index, piece)

    def show_generating(self, conversation_id: int, text: str | None) -> None:
        """Say in the conversation list that a reply is being written there."""
        self.list_model.set_progress(conversation_id, text)

    def show_progress(self, done: int, total: int) -> None:
        """How far the engine's long work got."""
        self.status.set_progress(done, total)

    def show_context_full(self) -> None:
        """The shown branch does not fit the loaded context."""
        self.status.set_context_full()

    def offer_choice(self, replies: list[tuple[int, str]]) -> None:
        """Show replies made together side by side, to keep one."""
        self.transcript.offer_choice(replies)

    def refresh_list(self, selected: int | None) -> None:
        """Re-read the conversation list."""
        self.sidebar.refresh(selected)

    def conversation_removed(self, conversation_id: int) -> None:
        """Take a conversation out of the list (the worker is deleting it)."""
        self.list_model.remove(conversation_id)

    def set_busy(self, text: str | None) -> None:
        """Say what the engine is doing."""
        self.status.set_busy(text)

    def show_message(self, text: str) -> None:
        """A passing note in the status bar."""
        self.status.showMessage(text)

    def show_error(self, title: str, text: str) -> None:
        """Something the user asked for failed."""
        show_error(self, title, text)

    def show_restore(self, stats: SyncFigures, context_tokens: int, n_ctx: int) -> None:
        """How the engine reached the active node, and how full the context is."""
        self.status.set_restore(stats)
        self.status.set_context(context_tokens, n_ctx)

    def show_reply_stats(self, stats: ReplyFigures) -> None:
        """A reply's speed and context (and how its parent was reached)."""
        self.status.set_speed(stats.tokens_per_second)
        self.status.set_context(stats.context_tokens, stats.n_ctx)
        if stats.restored_tokens or stats.reprocessed_tokens:
            self.status.set_restore(stats)
        else:
            # The reply went on from where the last move left the context:
            # that move's figures describe a place the user has left.
            self.status.clear_restore()

    def model_loaded(self, info: ModelInfo, n_ctx: int) -> None:
        """Show the loaded model, its reasoning choices and the chat."""
        self.status.set_model(info)
        # The last move was made on the model before.
        self.status.clear_restore()
        self.transcript.set_model(info)
        self.composer.set_reasoning_choices(
            info.reasoning_choices, info.reasoning_default
        )
        self.composer.set_reasoning(self.presenter.reasoning)
        self.status.set_context(0, n_ctx)
        self.center.setCurrentWidget(self.chat_page)
        self.composer.edit.setFocus()
        # "Last used" in the Models dialog; a file opened by path joins the list.
        self.models.tasks.touch(Path(info.path))
        self.download_status.set_starter_loaded(
            self.models.starter is not None and Path(info.path) == self.models.starter
        )

    def model_missing(self) -> None:
        """No model could be loaded: the welcome page asks for another."""
        self.transcript.set_model(None)
        self.welcome.set_message(
            "That model could not be loaded. Choose another .gguf file "
            "(the details are in the message)."
        )
        self.center.setCurrentWidget(self.welcome)

    def show_chat(self, chat: bool) -> None:
        """Show the chat page, or the welcome page that asks for a model."""
        self.center.setCurrentWidget(self.chat_page if chat else self.welcome)

    def give_back_text(self, text: str) -> None:
        """Put unsent text back in the composer (its files as chips again),
        unless something new is there."""
        composer = self.composer
        if not composer.text and not composer.attachments.files:
            typed, files = split(text)
            composer.edit.setPlainText(typed)
            composer.attachments.set_files(files)

    def attachment_counted(self, name: str, n_tokens: int) -> None:
        """Show what a file in the composer takes of the context."""
        self.composer.set_tokens(name, n_tokens)

    def refuse_attachment(self, name: str, reason: str) -> None:
        """Take a file out of the composer and say why."""
        self.composer.attachments.remove(name)
        if reason:
            show_error(self, "Could not attach the file", reason)

    def show_reasoning(self, choice: str | None) -> None:
        """Show the stored reasoning choice."""
        self.composer.set_reasoning(choice)

    def offer_ways_on(
        self, message: str, n_ctx: int, n_ctx_train: int, needed: int | None
    ) -> None:
        """The branch filled the context: ask how to go on (without blocking)."""
        offer_ways_on(
            self, message, n_ctx, n_ctx_train, self.presenter.way_on_chosen, needed
        )

    def offer_shorter(
        self, needed: int, n_ctx: int, n_ctx_train: int, stored: bool
    ) -> None:
        """A first message is longer than the context: say so (without
        blocking), with what can work."""
        offer_shorter(
            self, needed, n_ctx, n_ctx_train, self._on_too_long_chosen, stored
        )

    def _on_too_long_chosen(self, choice: WayOn, size: int | None) -> None:
        """The user's answer to a message too long: the Models dialog, the
        presenter's raise, or back to the composer to shorten it."""
        if choice is WayOn.MODELS:
            self.open_models()
        elif choice is WayOn.RAISE:
            self.presenter.way_on_chosen(choice, size)
        else:
            self.composer.edit.setFocus()

    def offer_reload(self, message: str, remaining: tuple[str, ...]) -> None:
        """The engine's process ended: no model is loaded (the status bar
        says so); ask where to load it again (without blocking)."""
        self.status.set_model(None)
        self.transcript.set_model(None)
        offer_reload(self, message, remaining, self.presenter.reload_after_loss)

    def offer_model_switch(self, made_with: str | None) -> None:
        """Offer the model the conversation was made with (None: hide)."""
        info = self.model_info
        self.model_offer.offer(made_with, info.path if info is not None else None)

    def focus_tree(self) -> None:
        """Show the tree and give it the keyboard."""
        self.actions_by_name["tree"].setChecked(True)
        self.tree_panel.show()
        self.tree_panel.view.setFocus()

    def preferences_changed(self, prefs: Preferences) -> None:
        """Show the recent models on the welcome page and in the File menu, and
        the model the welcome page offers (it depends on the context size),
        and the text at its size."""
        self.welcome.set_recent(list(prefs.recent_models))
        fill_recent_menu(self.recent_menu, prefs.recent_models, self.load_model)
        self.download_status.set_context_size(prefs.backend.n_ctx)
        self.zoom.set_scale(prefs.text_scale)

    def state_changed(self) -> None:
        """Enable what can be done now; the composer says what it takes."""
        presenter = self.presenter
        # Stop also stops a model being loaded.
        self.composer.set_generating(presenter.stoppable)
        self.composer.set_available(*presenter.composer_state())
        for name, enabled in presenter.action_states().items():
            self.actions_by_name[name].setEnabled(enabled)
        self.tree_panel.delete_button.setEnabled(presenter.writable)
        self.composer.reasoning_box.setEnabled(presenter.writable)
        self.transcript.set_actions_enabled(presenter.can_reply)
        self.transcript.set_tool_actions_enabled(presenter.can_reply)
        self.composer.set_tools(presenter.tool_choice, presenter.tools_available)

    # --- actions and requests that ask the user first -----------------------------

    def send(self) -> None:
        """Send the composer's text and files (or the edit, or a reply to the
        message above)."""
        composer = self.composer
        if self.presenter.send(composer.message, composer.editing_node):
            composer.end_edit()
            composer.clear()

    def stop(self) -> None:
        """Stop the reply being generated; else leave editing."""
        if not self.presenter.stop() and self.composer.editing_node is not None:
            self.composer.end_edit()
            self.composer.clear()

    def _focus_composer(self) -> None:
        self.composer.edit.setFocus()

    @Slot(int)
    def edit_message(self, node_id: int) -> None:
        """Put a user message in the composer, to send as its edited sibling;
        for a start, ask for the new system prompt."""
        if self.presenter.generating:
            return
        node = self.presenter.snapshot.nodes[node_id]
        if node.role == Role.ROOT:
            self.ask_branch_system_prompt(node_id)
        else:
            self.composer.begin_edit(node_id, node.text, node.role == Role.TOOL)

    def ask_attachments(self) -> None:
        """Ask for files to attach to the message being written."""
        paths, _chosen = QFileDialog.getOpenFileNames(
            self,
            "Attach files",
            str(self._attach_folder),
            "Text, code and PDF files (*);;PDF files (*.pdf)",
        )
        self.attach_files([Path(p) for p in paths])

    @Slot(list)
    def attach_files(self, paths: list[Path]) -> None:
        """Attach ``paths`` to the message being written; say which cannot be."""
        for path in paths:
            try:
                file = read_attachment(path)
            except AttachmentError as exc:
                show_error(self, "Could not attach the file", str(exc))
                continue
            self._attach_folder = path.parent
            self.composer.add_attachment(file)
            self.presenter.attach(file.name, file.text)

    def edit_last_message(self) -> None:
        """Edit the last user message on the active path."""
        message = self.presenter.last_of_role(Role.USER)
        if message is not None:
            self.edit_message(message)
            self.composer.edit.setFocus()

    def ask_new_conversation(self) -> None:
        """Ask for a system prompt and a title, then start a conversation."""
        prefs = self.prefs
        dialog = NewConversationDialog(prefs.system_prompt, prefs.presets, self)
        if dialog.exec() == NewConversationDialog.DialogCode.Accepted:
            self.presenter.new_conversation(
                dialog.system_prompt, dialog.title, dialog.preset
            )

    def ask_conversation_settings(self) -> None:
        """Edit the system prompt of the branch shown (a new branch) and the
        sampling of the conversation's replies, with presets."""
        if self.conversation_id is None:
            return
        sampling, preset = self.presenter.conversation_sampling()
        dialog = ConversationSettingsDialog(
            self.presenter.branch_system_prompt(),
            sampling,
            preset,
            self.prefs.presets,
            self.prefs.sampling,
            self.presenter.shown.context_size,
            self.prefs.backend.n_ctx,
            self,
        )
        accepted = dialog.exec() == ConversationSettingsDialog.DialogCode.Accepted
        # Presets saved or deleted in the dialog stay so, also after Cancel.
        if dialog.presets != self.prefs.presets:
            self.presenter.save_preferences(replace(self.prefs, presets=dialog.presets))
        if accepted:
            self.presenter.change_conversation_settings(
                dialog.system_prompt, dialog.sampling, dialog.preset
            )
            if not dialog.keeps_own_context:
                self.presenter.use_settings_context()

    @Slot(int)
    def ask_branch_system_prompt(self, root_id: int) -> None:
        """Edit the system prompt of the start ``root_id``, going there first
        when the branch shown starts elsewhere."""
        presenter = self.presenter
        active = presenter.active_id
        if active is None or presenter.snapshot.path(active)[0] != root_id:
            presenter.choose_node(root_id)
        self.ask_conversation_settings()

    def ask_rename_current(self) -> None:
        """Ask for a new title of the shown conversation."""
        if self.conversation_id is not None:
            self.ask_rename(self.conversation_id)

    @Slot(int)
    def ask_rename(self, conversation_id: int) -> None:
        """Ask for a new title of a conversation."""
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
            self.presenter.rename_conversation(conversation_id, title.strip())

    def ask_delete_current(self) -> None:
        """Ask whether to delete the shown conversation."""
        if self.conversation_id is not None:
            self.ask_delete(self.conversation_id)

    @Slot(int)
    def ask_delete(self, conversation_id: int) -> None:
        """Ask whether to delete a conversation with all its branches."""
        row = self.list_model.row_of(conversation_id)
        title = self.list_model.record(row).title if row >= 0 else "this conversation"
        if confirm(
            self,
            "Delete conversation",
            f"Delete “{title}” with all its branches? This cannot be undone.",
            "Delete",
        ):
            self.presenter.delete_conversation(conversation_id)

    @Slot(int)
    def ask_delete_branch(self, node_id: int) -> None:
        """Ask whether to delete a message and everything below it."""
        snapshot = self.presenter.snapshot
        below = snapshot.descendant_count(node_id)
        starts = snapshot.nodes[node_id].parent_id is None
        text = "Delete this system prompt" if starts else "Delete this message"
        text += (
            f" and the {below} message{'s' if below != 1 else ''} below it?"
            if below
            else "?"
        )
        if not self.generating and confirm(
            self, "Delete branch", text + " This cannot be undone.", "Delete"
        ):
            self.presenter.delete_branch(node_id)

    def focus_filter(self) -> None:
        """Put the keyboard in the conversation filter."""
        self.sidebar.filter_edit.setFocus()
        self.sidebar.filter_edit.selectAll()

    def open_search(self) -> None:
        """Open the search in all conversations."""
        if self._search_dialog is None:
            self._search_dialog = SearchDialog(self.db, self)
            fit_to_screen(self._search_dialog)
            self._search_dialog.hit_chosen.connect(self._on_search_dialog_hit_chosen)
        self._search_dialog.open_search()

    @Slot(int, int)
    def _on_search_dialog_hit_chosen(self, conversation_id: int, node_id: int) -> None:
        assert self._search_dialog is not None
        self.presenter.open_search_hit(conversation_id, node_id)
        self._search_dialog.hide()

    def ask_export(self) -> None:
        """Ask for a file and export the shown conversation to it."""
        if self.conversation_id is None:
            return
        path = exchange_actions.export_conversation(
            self, self.db, self.conversation_id, self.active_id
        )
        if path is not None:
            self.statusBar().showMessage(f"Exported to {path}", 5000)

    def ask_import(self) -> None:
        """Ask for a conversation file and import it."""
        if self.generating:
            return
        data = exchange_actions.read_import(self)
        if data is not None:
            self.presenter.import_conversation(data)

    def ask_model_file(self) -> None:
        """Ask for a model file and load it."""
        path = choose_model_file(self, self._model_folder(self.prefs.model_path))
        if path is not None:
            self.load_model(path)

    def open_models(self) -> None:
        """Show the Models dialog: recommended, the Hub, installed, downloads."""
        if self._models_dialog is None:
            self._models_dialog = ModelsDialog(
                self.models, self.prefs.backend.n_ctx, self
            )
            fit_to_screen(self._models_dialog)
            self._models_dialog.load_requested.connect(
                self._on_models_dialog_load_requested
            )
        info = self.model_info
        self._models_dialog.refresh(
            self.prefs.backend.n_ctx,
            info.path if info is not None else None,
            info.offload_total_bytes if info is not None else 0,
        )
        self._models_dialog.show()
        self._models_dialog.raise_()
        self._models_dialog.activateWindow()

    def _model_folder(self, current: str | None) -> str:
        """Where a model file dialog opens (see ``start_folder``)."""
        return start_folder(
            current, self.models.starter, self.models.library.models_dir
        )

    def open_settings(self) -> None:
        """Edit the preferences."""
        library = self.models.library
        dialog = SettingsDialog(
            self.prefs,
            self._gpu_supported
            if self._gpu_supported is not None
            else bool(self.engine.gpu_supported),
            self,
            folder_for=self._model_folder,
            loaded=self.model_info,
            default_models_dir=str(models_dir_for(library.data_dir, None)),
            tool_servers=self._tool_servers(),
        )
        if dialog.exec() == SettingsDialog.DialogCode.Accepted:
            self.apply_preferences(dialog.preferences())
            servers = dialog.tool_servers()
            if servers is not None:
                self.presenter.save_tool_servers(servers)

    def _tool_servers(self) -> list[ServerConfig]:
        """The MCP servers as stored (none when the database cannot be read:
        the dialog opens anyway)."""
        try:
            return load_servers(self.db)
        except StorageUnavailable as exc:
            show_error(self, "Cannot read the tool servers", str(exc))
            return []

    def open_storage(self) -> None:
        """Show what checkpoints cost; evict or clear them, set the budget."""
        dialog = StorageDialog(
            self.db, self.engine, self.prefs.checkpoint_budget_mb, self
        )
        fit_to_screen(dialog)
        dialog.exec()
        dialog.deleteLater()
        # The tree and the list are read again when its jobs are done (the
        # presenter), not here: one may still be running.
        if dialog.budget_mb != self.prefs.checkpoint_budget_mb:
            self.presenter.save_preferences(
                replace(self.prefs, checkpoint_budget_mb=dialog.budget_mb)
            )

    def open_local_server(self) -> None:
        """Show the local server's switch, URL and request log (not modal:
        the server runs on when it is closed)."""
        from app.qt.views.dialogs.local_server import LocalServerDialog

        if self._local_server_dialog is None:
            self._local_server_dialog = LocalServerDialog(
                self._local_server(),
                self.prefs.local_server,
                self._remember_local_server,
                self,
            )
        self._local_server_dialog.show()
        self._local_server_dialog.raise_()

    def start_local_server_if_asked(self) -> None:
        """Start the local server when the user asked for it at start (on
        127.0.0.1 only); a failure is said in the status bar."""
        wanted = self.prefs.local_server
        if not wanted.at_start:
            # Asked before the import: the server's modules (aiohttp, and the
            # certificates its import loads) took 0.3-0.5 s of the GUI thread
            # at every start, while the window waited for its first frame.
            return
        from app.server.serve import Listen, ServeError, is_loopback

        if not is_loopback(wanted.host):
            return
        try:
            url = self._local_server().start(Listen(wanted.host, wanted.port))
        except ServeError as exc:
            self.statusBar().showMessage(f"Local server not started: {exc}", 15000)
            return
        self.statusBar().showMessage(f"Local server at {url}", 8000)

    def _local_server(self) -> LocalServerController:
        from app.qt.local_server import LocalServerController

        if self.local_server is None:
            self.local_server = LocalServerController(
                self.engine.submit,
                lambda: self.model_info.path if self.model_info else None,
                lambda: self.presenter.loading_model is not None,
                self,
            )
        return self.local_server

    def _remember_local_server(self, wanted: LocalServerPrefs) -> None:
        self.presenter.save_preferences(replace(self.prefs, local_server=wanted))

    def show_shortcuts(self) -> None:
        """List the keyboard shortcuts."""
        QMessageBox.information(self, "Keyboard shortcuts", SHORTCUTS_HELP)

    def show_about(self) -> None:
        """Say what Arbor is."""
        QMessageBox.about(self, "About Arbor", about_text())

    @Slot(str)
    def _on_tree_panel_mode_changed(self, mode: str) -> None:
        self.presenter.save_preferences(replace(self.prefs, tree_view=mode))

    @Slot(str)
    def _on_transcript_example_chosen(self, text: str) -> None:
        # In the composer, to change or send: an example is never sent unasked.
        self.composer.edit.setPlainText(text)
        self.composer.edit.moveCursor(QTextCursor.MoveOperation.End)
        self.composer.edit.setFocus()

    @Slot(str)
    def _on_welcome_model_chosen(self, path: str) -> None:
        self.load_model(Path(path))

    @Slot(str)
    def _on_models_dialog_load_requested(self, path: str) -> None:
        assert self._models_dialog is not None
        if not self.presenter.writable:
            # As for File → Open model file: not while a reply is made.
            self._models_dialog.show_error(
                "A reply is being generated: stop it (Esc) or wait, then load "
                "the model."
            )
            return
        self._models_dialog.hide()
        self.activateWindow()  # the chat is where the user goes next
        self.load_model(Path(path))

    @Slot(str)
    def _on_download_status_switch_requested(self, path: str) -> None:
        if not self.presenter.writable:
            self.status.showMessage(
                "A reply is being generated: stop it (Esc) or wait, then switch.",
                8000,
            )
            return
        self.load_model(Path(path))

    @Slot(str)
    def _on_download_status_load_requested(self, path: str) -> None:
        # The model offered on the welcome page is here. It loads unless the
        # user chose another one meanwhile: that one stays.
        if self.model_info is None and self.presenter.loading_model is None:
            self.load_model(Path(path))

    def _show_transcript(
        self, node_id: int, follow: bool, waiting: bool = True
    ) -> None:
        """Show the path to ``node_id`` with the reasoning of its replies (and
        the calls that wait for the user, unless ``waiting`` is False)."""
        snapshot = self.presenter.snapshot
        path = snapshot.path(node_id)
        self.transcript.set_waiting_calls(
            waiting_calls(snapshot, node_id) if waiting else {}
        )
        self.transcript.show_path(
            snapshot.transcript(node_id),
            {n: snapshot.siblings(n) for n in path},
            {n: snapshot.nodes[n].thinking for n in path if snapshot.nodes[n].thinking},
            follow=follow,
        )

    # --- closing ----------------------------------------------------------------------

    def closeEvent(self, event: QCloseEvent) -> None:
        # Pause the downloads (their parts stay: the next start resumes them),
        # stop the reply (the service keeps what was generated, marked
        # "stopped"), free the model and end the threads before closing.
        self.models.shut_down()
        if self.local_server is not None:
            self.local_server.stop()
        self.engine.shut_down()
        super().closeEvent(event)
