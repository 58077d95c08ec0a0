"""``SettingsDialog``: model file, backend, sampling, the default system prompt,
the text size, the workers and the tools (MCP servers).

It edits a ``Preferences`` value and validates it inline (the backend's own
dataclasses say what is invalid); the window persists the result and reloads
the model when the model or its settings changed. The tools' servers are
edited beside it (``tool_servers``): they are no preference but a value of
their own, stored by the window when they changed.

Each tab scrolls, and only up and down: on a small or scaled screen (720x450
logical pixels, a 1440x900 one at 200 %) a tab taller than the dialog keeps
its texts whole and wrapped to the dialog's width, where the layout squeezed
them before and cut them mid-sentence (issue 41).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.backend.errors import InvalidSetting
from app.backend.settings import KV_CACHE_TYPES, BackendSettings
from app.backend.values import ModelInfo
from app.library.catalog import shipped_catalog
from app.mcp.config import ServerConfig
from app.preferences import TEXT_SCALES, Preferences
from app.qt.views.dialogs.gpu_layers import NO_GPU_EXPLANATION, GpuLayersField
from app.qt.views.dialogs.sampling_form import SamplingForm
from app.qt.views.dialogs.tools_tab import ToolsTab
from app.qt.views.dialogs.workers_tab import WorkersTab
from app.qt.views.library.welcome import choose_model_file

__all__ = ["NO_GPU_EXPLANATION", "THREADS_NOTE", "SettingsDialog"]

THREADS_NOTE = (
    "Automatic uses the cores other programs leave free, but one, counted "
    "again before each step: llama.cpp's threads wait for one another, so on "
    "a busy computer fewer threads are faster than one per core."
)


# The share of its screen the dialog takes at most (the rest: its frame).
SCREEN_SHARE = 0.9


class SettingsDialog(QDialog):
    """Edit preferences; ``preferences()`` returns the result after ``accept``.

    Parameters
    ----------
    prefs
        The current preferences.
    gpu_supported
        Whether llama.cpp found a GPU to offload layers to.
    parent
        The Qt parent.
    folder_for
        Where Browse… opens, given the model file shown (``start_folder``).
    loaded
        The loaded model, whose trained context the model line tells.
    default_models_dir
        Where downloads go unless a models folder is chosen (shown greyed).
    tool_servers
        The MCP servers as stored (Settings → Tools edits them).
    """

    def __init__(
        self,
        prefs: Preferences,
        gpu_supported: bool,
        parent: QWidget | None = None,
        folder_for: Callable[[str], str] | None = None,
        loaded: ModelInfo | None = None,
        default_models_dir: str = "",
        tool_servers: Sequence[ServerConfig] = (),
    ) -> None:
        super().__init__(parent)
        self._default_models_dir = default_models_dir
        self._folder_for = folder_for or (
            lambda current: str(Path(current).parent) if current else ""
        )
        self._loaded = loaded
        self.setObjectName("SettingsDialog")
        self.setWindowTitle("Settings")
        self.setMinimumWidth(520)
        self._prefs = prefs
        tabs = QTabWidget()
        self.tabs = tabs
        self._add_tab(self._model_tab(prefs, gpu_supported), "Model")
        self.sampling_form = SamplingForm(prefs.sampling)
        self._add_tab(self.sampling_form, "Sampling")
        self._add_tab(self._chat_tab(prefs), "Chat")
        self.workers_tab = WorkersTab(prefs.workers, loaded)
        self._add_tab(self.workers_tab, "Workers")
        self.tools_tab = ToolsTab(tool_servers)
        self._add_tab(self.tools_tab, "Tools")
        self.error_label = QLabel()
        self.error_label.setObjectName("SettingsError")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b;")
        self.error_label.hide()
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self._on_buttons_accepted)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(tabs)
        layout.addWidget(self.error_label)
        layout.addWidget(buttons)
        self._result = prefs
        # What the tabs ask for, within the screen: left to Qt, a dialog
        # whose tabs scroll gets two thirds of the screen's height at most.
        room = self.screen().availableSize() * SCREEN_SHARE
        self.resize(self.sizeHint().boundedTo(room))

    # --- tabs -------------------------------------------------------------------

    def _add_tab(self, page: QWidget, title: str) -> None:
        """Add ``page`` as a tab that scrolls up and down (see the top)."""
        scroll = QScrollArea()
        scroll.setObjectName("SettingsPage")
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        # The page takes the area's width, and its wrapped texts the height
        # they need for it; only that height scrolls.
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(page)
        # The tab's own background, not the window's behind the area.
        scroll.viewport().setAutoFillBackground(False)
        page.setAutoFillBackground(False)
        self.tabs.addTab(scroll, title)

    def page(self, index: int) -> QWidget:
        """The page of the tab at ``index`` (inside its scroll area)."""
        scroll = self.tabs.widget(index)
        assert isinstance(scroll, QScrollArea)
        page = scroll.widget()
        assert page is not None
        return page

    def show_page(self, page: QWidget) -> None:
        """Show the tab of ``page`` (``self.workers_tab``, …)."""
        for index in range(self.tabs.count()):
            if self.page(index) is page:
                self.tabs.setCurrentIndex(index)
                return
        raise ValueError("not a page of this dialog")

    def _model_tab(self, prefs: Preferences, gpu_supported: bool) -> QWidget:
        page = QWidget()
        form = QFormLayout(page)
        row = QHBoxLayout()
        # The files by name, each path in its tooltip: the starter model's
        # path runs through site-packages, longer than the field. A path typed
        # or pasted in is taken as it is (``model_path``).
        self.model_combo = QComboBox()
        self.model_combo.setObjectName("ModelFile")
        self.model_combo.setEditable(True)
        # Enter does not list a typed path under its own text (and no path).
        self.model_combo.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.model_combo.setMinimumContentsLength(24)
        for path in dict.fromkeys(
            [p for p in (prefs.model_path, *prefs.recent_models) if p]
        ):
            self._add_model(path)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._on_browse_button_clicked)
        row.addWidget(self.model_combo, 1)
        row.addWidget(browse)
        form.addRow("Model file", row)
        # The file's name, quantization, size and trained context: a path in
        # an installed package says none of that.
        self.model_summary = QLabel()
        self.model_summary.setObjectName("ModelSummary")
        self.model_summary.setWordWrap(True)
        form.addRow("", self.model_summary)
        self.model_combo.currentTextChanged.connect(self._on_model_combo_text_changed)
        self._on_model_combo_text_changed(self.model_combo.currentText())
        folder_row = QHBoxLayout()
        self.models_dir_edit = QLineEdit(prefs.models_dir or "")
        self.models_dir_edit.setPlaceholderText(self._default_models_dir)
        self.models_dir_edit.setToolTip(
            "Where Models… downloads go. Models downloaded before stay where they are."
        )
        folder_browse = QPushButton("Browse…")
        folder_browse.clicked.connect(self._on_folder_browse_button_clicked)
        folder_row.addWidget(self.models_dir_edit, 1)
        folder_row.addWidget(folder_browse)
        form.addRow("Models folder", folder_row)

        backend = prefs.backend
        self.n_ctx = QSpinBox()
        self.n_ctx.setRange(256, 1_048_576)
        self.n_ctx.setSingleStep(1024)
        self.n_ctx.setValue(backend.n_ctx)
        self.n_ctx.setSuffix(" tokens")
        self.gpu_layers = GpuLayersField(
            backend.n_gpu_layers, backend.n_ctx, self._loaded, gpu_supported
        )
        self.n_ctx.valueChanged.connect(self.gpu_layers.set_context)
        form.addRow("GPU layers", self.gpu_layers)
        form.addRow("Context size", self.n_ctx)
        self.threads = QSpinBox()
        self.threads.setRange(0, 256)
        self.threads.setSpecialValueText("automatic")
        self.threads.setValue(backend.n_threads)
        self.threads.setToolTip(THREADS_NOTE)
        form.addRow("CPU threads", self.threads)
        threads_note = QLabel(THREADS_NOTE)
        threads_note.setObjectName("Hint")
        threads_note.setWordWrap(True)
        form.addRow("", threads_note)
        self.flash_attn = QCheckBox("Use flash attention")
        self.flash_attn.setChecked(backend.flash_attn)
        self.flash_attn.setToolTip(
            "Always on while the model is on workers: without it, saving a "
            "checkpoint reads the workers one row at a time."
        )
        form.addRow("", self.flash_attn)
        self.kv_type = QComboBox()
        self.kv_type.addItems(list(KV_CACHE_TYPES))
        self.kv_type.setCurrentText(backend.kv_cache_type)
        self.kv_type.setToolTip(
            "Quantized types (q8_0, …) halve memory and need flash attention."
        )
        form.addRow("KV cache type", self.kv_type)
        return page

    def _chat_tab(self, prefs: Preferences) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        label = QLabel(
            "Default system prompt for new conversations (empty: the model's own):"
        )
        label.setWordWrap(True)
        layout.addWidget(label)
        self.system_prompt = QPlainTextEdit(prefs.system_prompt)
        layout.addWidget(self.system_prompt)
        # The zoom's steps (View → Zoom in, Ctrl++), and nothing between them:
        # a choice of these needs no check.
        self.text_scale = QComboBox()
        self.text_scale.setObjectName("TextScale")
        for scale in TEXT_SCALES:
            self.text_scale.addItem(f"{scale} %", scale)
        at = self.text_scale.findData(prefs.text_scale)
        self.text_scale.setCurrentIndex(at if at >= 0 else TEXT_SCALES.index(100))
        self.text_scale.setToolTip(
            "The size of the messages' text and of the text you write; "
            "View → Zoom in / Zoom out (Ctrl++ / Ctrl+-) change it too."
        )
        size_row = QFormLayout()
        size_row.addRow("Text size", self.text_scale)
        layout.addLayout(size_row)
        return page

    # --- result -----------------------------------------------------------------

    def preferences(self) -> Preferences:
        """The edited preferences (valid once the dialog is accepted)."""
        return self._result

    def tool_servers(self) -> list[ServerConfig] | None:
        """The MCP servers as edited, or None where they did not change
        (valid once the dialog is accepted)."""
        return self.tools_tab.servers() if self.tools_tab.changed() else None

    def _collect(self) -> Preferences:
        backend = BackendSettings(
            n_ctx=self.n_ctx.value(),
            n_gpu_layers=self.gpu_layers.value(),
            n_threads=self.threads.value(),
            n_batch=self._prefs.backend.n_batch,
            flash_attn=self.flash_attn.isChecked(),
            kv_cache_type=self.kv_type.currentText(),
        )
        workers = self.workers_tab.workers()
        if workers.use and not workers.addresses:
            raise InvalidSetting(
                "Use workers is on, but no worker is listed: add one or untick it."
            )
        if backend.kv_cache_type not in ("f16", "f32") and not backend.uses_flash_attn:
            raise InvalidSetting(
                "A quantized KV cache needs flash attention: tick it or choose f16."
            )
        sampling = self.sampling_form.params()
        model = self.model_path() or None
        if model is not None and not Path(model).is_file():
            raise InvalidSetting(f"There is no file at {model}.")
        # The split by hand is checked against the loaded model's layers; for
        # another model the engine checks it as it loads.
        same_model = self._loaded is not None and model in (None, self._loaded.path)
        if workers.use and same_model and self.workers_tab.split_problem():
            raise InvalidSetting(self.workers_tab.split_problem())
        models_dir = self.models_dir_edit.text().strip() or None
        if models_dir is not None:
            folder = Path(models_dir).expanduser()
            if folder.exists() and not folder.is_dir():
                raise InvalidSetting(f"{models_dir} is a file, not a folder.")
            models_dir = str(folder.resolve())
        prefs = replace(
            self._prefs,
            backend=backend,
            sampling=sampling,
            models_dir=models_dir,
            system_prompt=self.system_prompt.toPlainText().strip(),
            text_scale=int(self.text_scale.currentData()),
        )
        # The backend loads on the workers only with Use workers on.
        prefs = prefs.with_workers(workers)
        return prefs.with_model(model) if model else prefs

    @Slot()
    def _on_buttons_accepted(self) -> None:
        try:
            self._result = self._collect()
        except InvalidSetting as exc:  # shown inline; the dialog stays open
            self.error_label.setText(str(exc))
            self.error_label.show()
            return
        self.accept()

    def done(self, result: int) -> None:
        """Close the dialog, ending a worker check under way; a tools
        listing under way ends on its own, unreported."""
        self.workers_tab.stop()
        self.tools_tab.stop()
        super().done(result)

    def model_path(self) -> str:
        """The model file chosen: the path of the file named, or the path
        typed."""
        text = self.model_combo.currentText().strip()
        index = self.model_combo.findText(text)
        path = self.model_combo.itemData(index) if index >= 0 else None
        return str(path) if path else text

    def _add_model(self, path: str) -> int:
        """List ``path`` by its file name (the folder too where another file
        listed has that name); return its index."""
        combo = self.model_combo
        index = combo.findData(path)
        if index >= 0:
            return index
        name = Path(path).name
        if combo.findText(name) >= 0:
            name = f"{name} ({Path(path).parent})"
        combo.addItem(name, path)
        index = combo.count() - 1
        combo.setItemData(index, path, Qt.ItemDataRole.ToolTipRole)
        return index

    @Slot(str)
    def _on_model_combo_text_changed(self, _text: str) -> None:
        path = self.model_path()
        self.model_combo.setToolTip(path)
        if not path:
            self.model_summary.setText("")
            return
        loaded = self._loaded
        trained = loaded.n_ctx_train if loaded and loaded.path == path else None
        self.model_summary.setText(shipped_catalog().summary(path, trained))

    @Slot()
    def _on_folder_browse_button_clicked(self) -> None:
        start = self.models_dir_edit.text().strip() or self._default_models_dir
        folder = QFileDialog.getExistingDirectory(self, "Models folder", start)
        if folder:
            self.models_dir_edit.setText(folder)

    @Slot()
    def _on_browse_button_clicked(self) -> None:
        path = choose_model_file(self, self._folder_for(self.model_path()))
        if path is not None:
            self.model_combo.setCurrentIndex(self._add_model(str(path)))
