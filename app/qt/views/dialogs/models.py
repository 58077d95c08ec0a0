"""``ModelsDialog``: recommended models, the Hugging Face Hub, the models on this
computer, and the downloads under way.

*Recommended* lists the curated catalog with whether each model fits this
computer at the context size of the settings (a model too big is greyed, with
what it would need, rather than hidden: the user may free memory or lower
the context), and whether it calls tools in its own format (the one
recommended for tools says so). *Search the Hub* finds GGUF repositories,
flags those whose GGUF has no chat template (base models, which continue a
text rather than answer it) before anything is downloaded, and lists a
chosen one's files. *Installed* loads, removes and adds model files. The
downloads panel below the tabs shows every download with Pause, Resume,
Cancel and, once done, Load (after a failure: Try again where it can help,
and Remove).

Nothing here touches the network or writes a file on the GUI thread: Hub
requests and changes to the installed models go to the library thread
(``LibraryController``), downloads to the download thread
(``DownloadController``), and their answers come back as signals. The
installed models are read here (a small JSON file and a folder scan). A
download goes on when the dialog closes: the window owns the controllers.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.library import names
from app.library.catalog import CatalogEntry, model_name
from app.library.fit import Fit, assess, machine_memory
from app.library.hub import BASE_MODEL_NOTE, RemoteFile, RemoteRepository
from app.library.installed import InstalledModel
from app.qt.views.dialogs.errors import confirm
from app.qt.views.library.downloads import DownloadsPanel
from app.qt.views.library.welcome import catalog_fit, choose_model_file
from app.qt.workers.library_worker import ModelServices
from app.text.quantities import format_bytes

# Where in each table's first cell the row's object is kept.
_ROW_ROLE = Qt.ItemDataRole.UserRole

SOURCE_TEXT = {
    "downloaded": "Downloaded",
    "added": "Added by path",
    "starter": "Comes with Arbor",
}


def fit_text(fit: Fit) -> str:
    """A fit for a table cell: "fits · needs 3.1 GB" (the memory there is
    stands above the table)."""
    about = "about " if fit.estimated else ""
    where = {"all": " · all on the GPU", "part": " · partly on the GPU"}.get(
        fit.gpu, ""
    )
    return f"{fit.verdict} · needs {about}{format_bytes(fit.need_bytes)}{where}"


def too_big_text(fit: Fit) -> str:
    """Why a model is greyed: what it needs against what there is."""
    return (
        f"Too big for this computer: it needs {format_bytes(fit.need_bytes)} of "
        f"memory at this context, and there are {format_bytes(fit.have_bytes)}. "
        "A smaller context (Settings) needs less."
    )


def tools_text(entry: CatalogEntry) -> str:
    """An entry's Tools cell: "calls tools", "generic format", "" (not known),
    or "recommended" (which calls tools: only a native one is recommended)."""
    if entry.recommended_for_tools:
        return "recommended"
    return {"native": "calls tools", "generic": "generic format"}.get(entry.tools, "")


def tools_tip(entry: CatalogEntry) -> str:
    """What an entry's Tools mark means, and what it was learned from (wrapped:
    a plain-text tooltip is one line per line)."""
    checked = (
        f"Checked against llama.cpp's reference template {entry.tools_template}, "
        "not this file's own: once the model is loaded, its own template decides."
    )
    if entry.tools == "native":
        paragraphs = [
            "Calls tools: its family's chat template writes tool calls, so Arbor "
            "reads the model's own call syntax and holds each call to the tools' "
            "schemas with a grammar.",
            checked,
        ]
    elif entry.tools == "generic":
        paragraphs = [
            "Tools: generic format. Its family's chat template has no tool "
            "support, so tools use a generic JSON format described in the system "
            "prompt, which small models may follow poorly.",
            checked,
        ]
    else:
        paragraphs = [
            "Tool support not checked: llama.cpp has no reference template for "
            "this family. Once the model is loaded, its own template decides."
        ]
    if entry.recommended_for_tools:
        paragraphs.insert(
            0,
            "Recommended for tools: the catalog's pick for tool use on a typical "
            "laptop (a judgement, not a measurement).",
        )
    # A template's name stays whole: it is looked up as written.
    return "\n".join(
        textwrap.fill(p, 72, break_on_hyphens=False, break_long_words=False)
        for p in paragraphs
    )


def _table(headers: list[str], stretch: int = 0) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setWordWrap(False)
    # File and repository names differ at their ends (the quantization).
    table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
    return table


# Why a repository is flagged as a base model, for the flag's tooltip.
BASE_MODEL_TIP = (
    "The Hub finds no chat template in this repository's GGUF: it is a base "
    "model, trained to continue a text, not to answer one. Arbor would write "
    "the conversation in a guessed format, and its replies tend to ramble or "
    "go on with your side of the chat. Look for an instruct or chat version."
)


def _item(text: str, right: bool = False) -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    if right:
        item.setTextAlignment(
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
        )
    return item


def _repository_note(repository: RemoteRepository) -> QTableWidgetItem:
    """The Note cell of a search result: the base-model flag, or nothing."""
    if not repository.base_model:
        return _item("")
    note = _item(BASE_MODEL_NOTE)
    note.setToolTip(BASE_MODEL_TIP)
    return note


def _selected(table: QTableWidget) -> object | None:
    rows = table.selectionModel().selectedRows()
    if not rows:
        return None
    item = table.item(rows[0].row(), 0)
    return item.data(_ROW_ROLE) if item is not None else None


def _last_used(when: float | None) -> str:
    if not when:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(when))


class ModelsDialog(QDialog):
    """Find, download, load and remove models (non-modal; kept by the window).

    Parameters
    ----------
    services
        The library (read here), the downloads and the library tasks.
    n_ctx
        The context size of the settings, which the fit verdicts assume.
    parent
        The Qt parent (the window).

    Signals
    -------
    load_requested(str)
        The user asked to load the model at this path (the window loads it
        as File → Open model file does).
    """

    load_requested = Signal(str)

    def __init__(
        self, services: ModelServices, n_ctx: int, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.setObjectName("ModelsDialog")
        self.setWindowTitle("Models")
        # Wide enough for the catalog's nine columns without a scroll bar.
        self.resize(1000, 660)
        self._services = services
        self._n_ctx = n_ctx
        self._loaded: str | None = None
        self._gpu_bytes = 0
        self._installed: list[InstalledModel] = []
        # The search and listing whose answers are awaited (older ones are
        # dropped: the user asked something else since).
        self._search_id: int | None = None
        self._listing_id: int | None = None

        self.tabs = QTabWidget()
        self.tabs.addTab(self._recommended_tab(), "Recommended")
        self.tabs.addTab(self._search_tab(), "Search the Hub")
        self.tabs.addTab(self._installed_tab(), "Installed")
        self.error_label = QLabel()
        self.error_label.setObjectName("ModelsError")
        self.error_label.setTextFormat(Qt.TextFormat.PlainText)
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b;")
        self.error_label.hide()
        self.downloads_panel = DownloadsPanel(services.downloads)
        self.downloads_panel.load_requested.connect(
            self._on_downloads_panel_load_requested
        )
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.hide)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.error_label)
        layout.addWidget(self.downloads_panel)
        layout.addWidget(buttons)

        tasks, downloads = services.tasks, services.downloads
        tasks.search_finished.connect(self._on_tasks_search_finished)
        tasks.files_listed.connect(self._on_tasks_files_listed)
        tasks.request_failed.connect(self._on_tasks_request_failed)
        tasks.library_changed.connect(self._on_tasks_library_changed)
        tasks.library_failed.connect(self._on_tasks_library_failed)
        downloads.download_queued.connect(self._on_downloads_download_queued)
        downloads.download_started.connect(self._on_downloads_download_started)
        downloads.download_finished.connect(self._on_downloads_download_finished)
        downloads.download_failed.connect(self._on_downloads_download_failed)
        downloads.download_stopped.connect(self._on_downloads_download_stopped)
        self.refresh(n_ctx)

    # --- tabs ---------------------------------------------------------------------

    def _recommended_tab(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        self.fit_hint = QLabel()
        self.fit_hint.setObjectName("PanelHint")
        self.fit_hint.setWordWrap(True)
        layout.addWidget(self.fit_hint)
        self.catalog_table = _table(
            [
                "Model",
                "Parameters",
                "Quantization",
                "Size",
                "Licence",
                "Reasoning",
                "Tools",
                "Fit",
                "Status",
            ],
            # The Status column takes what is left: a stretched Model column
            # would be the one squeezed to "…" when the others need the room.
            stretch=8,
        )
        self.catalog_table.itemSelectionChanged.connect(
            self._on_catalog_table_selection_changed
        )
        layout.addWidget(self.catalog_table, 1)
        row = QHBoxLayout()
        self.description_label = QLabel()
        self.description_label.setWordWrap(True)
        row.addWidget(self.description_label, 1)
        self.catalog_download_button = QPushButton("Download")
        self.catalog_download_button.setEnabled(False)
        self.catalog_download_button.clicked.connect(
            self._on_catalog_download_button_clicked
        )
        row.addWidget(self.catalog_download_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(row)
        return page

    def _search_tab(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        row = QHBoxLayout()
        self.query_edit = QLineEdit()
        self.query_edit.setPlaceholderText(
            "Search GGUF models on the Hugging Face Hub, e.g. qwen3 4b"
        )
        self.query_edit.setClearButtonEnabled(True)
        self.query_edit.returnPressed.connect(self._on_query_edit_return_pressed)
        row.addWidget(self.query_edit, 1)
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self._on_query_edit_return_pressed)
        row.addWidget(self.search_button)
        layout.addLayout(row)
        self.search_status = QLabel(
            "Repositories with GGUF files, most downloaded first. Gated ones need "
            "their licence accepted on the Hub and HF_TOKEN set."
        )
        self.search_status.setObjectName("PanelHint")
        self.search_status.setWordWrap(True)
        layout.addWidget(self.search_status)
        # One above the other: repository and file names are long, and both
        # lists then have the dialog's whole width.
        splitter = QSplitter(Qt.Orientation.Vertical)
        self.repo_table = _table(["Repository", "Downloads", "Access", "Note"])
        self.repo_table.itemSelectionChanged.connect(
            self._on_repo_table_selection_changed
        )
        self.file_table = _table(["File", "Quantization", "Size", "Fit"])
        self.file_table.itemSelectionChanged.connect(
            self._on_file_table_selection_changed
        )
        splitter.addWidget(self.repo_table)
        splitter.addWidget(self.file_table)
        splitter.setSizes([240, 200])
        layout.addWidget(splitter, 1)
        row = QHBoxLayout()
        row.addStretch(1)
        self.file_download_button = QPushButton("Download")
        self.file_download_button.setEnabled(False)
        self.file_download_button.clicked.connect(self._on_file_download_button_clicked)
        row.addWidget(self.file_download_button)
        layout.addLayout(row)
        return page

    def _installed_tab(self) -> QWidget:
        page = QWidget()
        layout = QVBoxLayout(page)
        self.installed_table = _table(
            ["Model", "Quantization", "Size", "Source", "Last used"]
        )
        self.installed_table.itemSelectionChanged.connect(
            self._on_installed_table_selection_changed
        )
        self.installed_table.itemDoubleClicked.connect(
            self._on_installed_table_item_double_clicked
        )
        layout.addWidget(self.installed_table, 1)
        self.installed_note = QLabel()
        self.installed_note.setObjectName("PanelHint")
        self.installed_note.setWordWrap(True)
        self.installed_note.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.installed_note)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add a file…")
        self.add_button.clicked.connect(self._on_add_button_clicked)
        row.addWidget(self.add_button)
        row.addStretch(1)
        self.remove_button = QPushButton("Remove…")
        self.remove_button.clicked.connect(self._on_remove_button_clicked)
        row.addWidget(self.remove_button)
        self.load_button = QPushButton("Load")
        self.load_button.setDefault(True)
        self.load_button.clicked.connect(self._on_load_button_clicked)
        row.addWidget(self.load_button)
        layout.addLayout(row)
        return page

    # --- what the window calls ----------------------------------------------------

    def refresh(
        self, n_ctx: int, loaded: str | None = None, gpu_bytes: int = 0
    ) -> None:
        """Read the installed models again and judge the fits at ``n_ctx``,
        counting a GPU of ``gpu_bytes`` (0: none) beside the memory."""
        self._n_ctx = n_ctx
        self._loaded = loaded
        self._gpu_bytes = gpu_bytes
        gpu = f" and {format_bytes(gpu_bytes)} on the GPU" if gpu_bytes else ""
        self.fit_hint.setText(
            f"Whether each model fits this computer ({format_bytes(machine_memory())} "
            f"of memory{gpu}) with a context of {n_ctx:,} tokens, as set in "
            "Settings. A model too big is greyed: it needs more memory than there is."
        )
        self._fill_installed()
        self._fill_catalog()
        self._fill_files(self._files_shown)

    def show_error(self, text: str) -> None:
        """Say what failed, in one line below the tabs ("" hides it)."""
        self.error_label.setText(text)
        self.error_label.setToolTip(text)
        self.error_label.setVisible(bool(text))

    # --- recommended ----------------------------------------------------------------

    def _fill_catalog(self) -> None:
        entries = self._services.library.catalog.entries
        selected = _selected(self.catalog_table)
        table = self.catalog_table
        table.setRowCount(len(entries))
        greyed = self.palette().color(
            QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text
        )
        for row, entry in enumerate(entries):
            fit = catalog_fit(entry, self._n_ctx, self._gpu_bytes)
            cells = [
                _item(entry.name),
                _item(entry.parameters, right=True),
                _item(entry.quantization),
                _item(format_bytes(entry.size_bytes), right=True),
                _item(entry.license),
                _item("reasons" if entry.reasoning else ""),
                _item(tools_text(entry)),
                _item(fit_text(fit)),
                _item(self._catalog_status(entry)),
            ]
            cells[0].setData(_ROW_ROLE, entry)
            for column, cell in enumerate(cells):
                cell.setToolTip(entry.description)
                if not fit.fits:
                    cell.setForeground(greyed)
                    cell.setToolTip(too_big_text(fit))
                table.setItem(row, column, cell)
            # What the mark means is worth telling even on a greyed row.
            cells[6].setToolTip(tools_tip(entry))
            if entry.recommended_for_tools:
                font = cells[6].font()
                font.setBold(True)
                cells[6].setFont(font)
            if fit.fits:  # the memory it needs, of how much
                cells[7].setToolTip(fit.describe())
            if entry == selected:
                table.selectRow(row)
        self._on_catalog_table_selection_changed()

    def _catalog_status(self, entry: CatalogEntry) -> str:
        if self._installed_path(entry) is not None:
            return "installed"
        first = names.split_siblings(entry.file)[0]
        state = self._services.downloads.state(f"{entry.repo}/{first}")
        if state is None or state.status == "done":
            return ""
        if state.status == "failed":
            return "download failed"
        return state.status

    def _installed_path(self, entry: CatalogEntry) -> str | None:
        for model in self._installed:
            if model.catalog_id == entry.id and model.present:
                return model.path
        return None

    @Slot()
    def _on_catalog_table_selection_changed(self) -> None:
        entry = _selected(self.catalog_table)
        button = self.catalog_download_button
        if not isinstance(entry, CatalogEntry):
            self.description_label.setText("Choose a model to see what it is good at.")
            button.setText("Download")
            button.setEnabled(False)
            return
        about = [f"{entry.name}: {entry.description}"]
        if entry.recommended_for_tools:
            about.append("Recommended for tools.")
        if entry.vision:
            about.append("It can see images, which Arbor cannot show it yet.")
        self.description_label.setText(" ".join(about))
        fit = catalog_fit(entry, self._n_ctx, self._gpu_bytes)
        status = self._catalog_status(entry)
        if status == "installed":
            button.setText("Load")
            button.setEnabled(True)
        elif status in ("queued", "downloading", "verifying"):
            button.setText("Downloading…")
            button.setEnabled(False)
        else:
            button.setText(f"Download ({format_bytes(entry.size_bytes)})")
            button.setEnabled(fit.fits)
        button.setToolTip("" if fit.fits else too_big_text(fit))

    @Slot()
    def _on_catalog_download_button_clicked(self) -> None:
        entry = _selected(self.catalog_table)
        if not isinstance(entry, CatalogEntry):
            return
        path = self._installed_path(entry)
        if path is not None:
            self.load_requested.emit(path)
            return
        parts = tuple(names.split_siblings(entry.file))
        self._download(entry.repo, parts, entry.name, entry.size_bytes)

    def _download(
        self, repo: str, parts: tuple[str, ...], name: str, size: int | None
    ) -> None:
        self.show_error("")
        self._services.downloads.download(repo, parts, name, size)
        self._fill_catalog()

    # --- search ---------------------------------------------------------------------

    @property
    def _files_shown(self) -> list[RemoteFile]:
        items = [
            self.file_table.item(row, 0) for row in range(self.file_table.rowCount())
        ]
        files = [item.data(_ROW_ROLE) for item in items if item is not None]
        return [f for f in files if isinstance(f, RemoteFile)]

    @Slot()
    def _on_query_edit_return_pressed(self) -> None:
        query = self.query_edit.text().strip()
        if not query:
            return
        self.show_error("")
        self._search_id = self._services.tasks.search(query)
        self._listing_id = None
        self.repo_table.setRowCount(0)
        self.file_table.setRowCount(0)
        self.search_status.setText(f"Searching the Hub for “{query}”…")

    @Slot(int, object)
    def _on_tasks_search_finished(
        self, request_id: int, found: list[RemoteRepository]
    ) -> None:
        if request_id != self._search_id:
            return
        self._search_id = None
        table = self.repo_table
        table.setRowCount(len(found))
        for row, repository in enumerate(found):
            name = _item(repository.repo)
            name.setData(_ROW_ROLE, repository)
            downloads = repository.downloads
            access = _item("gated (HF_TOKEN)" if repository.gated else "open")
            if repository.gated:
                access.setToolTip(
                    "Accept the model's licence on its Hub page, then set HF_TOKEN "
                    "to a token of your account and start Arbor again."
                )
            table.setItem(row, 0, name)
            table.setItem(row, 1, _item(f"{downloads:,}" if downloads else "", True))
            table.setItem(row, 2, access)
            table.setItem(row, 3, _repository_note(repository))
        count = len(found)
        self.search_status.setText(
            f"{count} repositor{'y' if count == 1 else 'ies'} with GGUF files; "
            "choose one to see its files."
            if count
            else "No repository with GGUF files matches; try fewer words."
        )

    @Slot()
    def _on_repo_table_selection_changed(self) -> None:
        repository = _selected(self.repo_table)
        if not isinstance(repository, RemoteRepository):
            return
        self.file_table.setRowCount(0)
        self.file_download_button.setEnabled(False)
        self._listing_id = self._services.tasks.list_files(repository.repo)
        self.search_status.setText(f"Listing the files of {repository.repo}…")

    @Slot(int, str, object)
    def _on_tasks_files_listed(
        self, request_id: int, repo: str, files: list[RemoteFile]
    ) -> None:
        if request_id != self._listing_id:
            return
        self._listing_id = None
        self._fill_files(files)
        count = len(files)
        repository = _selected(self.repo_table)
        base = (
            " A base model (no chat template): it continues a text rather than "
            "answering it."
            if isinstance(repository, RemoteRepository)
            and repository.repo == repo
            and repository.base_model
            else ""
        )
        self.search_status.setText(
            f"{repo}: {count} model file{'' if count == 1 else 's'}.{base}"
            if count
            else f"{repo} has no GGUF model file."
        )

    def _fill_files(self, files: list[RemoteFile]) -> None:
        table = self.file_table
        table.setRowCount(len(files))
        catalog = self._services.library.catalog
        for row, file in enumerate(files):
            # The catalog knows the KV cache of its models; others are guessed.
            entry = catalog.for_file(file.repo, file.filename)
            per_token = entry.kv_bytes_per_token if entry else None
            fit = (
                None
                if file.size is None
                else assess(
                    file.size, self._n_ctx, per_token, gpu_bytes=self._gpu_bytes
                )
            )
            name = _item(file.filename)
            name.setData(_ROW_ROLE, file)
            if len(file.parts) > 1:
                name.setToolTip(f"Split into {len(file.parts)} files")
            size = format_bytes(file.size) if file.size is not None else "unknown"
            table.setItem(row, 0, name)
            table.setItem(row, 1, _item(file.quantization or ""))
            table.setItem(row, 2, _item(size, right=True))
            table.setItem(row, 3, _item(fit_text(fit) if fit else "size unknown"))
        self._on_file_table_selection_changed()

    @Slot()
    def _on_file_table_selection_changed(self) -> None:
        self.file_download_button.setEnabled(
            isinstance(_selected(self.file_table), RemoteFile)
        )

    @Slot()
    def _on_file_download_button_clicked(self) -> None:
        file = _selected(self.file_table)
        if isinstance(file, RemoteFile):
            catalog = self._services.library.catalog
            name = model_name(file.filename, repo=file.repo, catalog=catalog)
            self._download(file.repo, file.parts, name, file.size)

    @Slot(int, str)
    def _on_tasks_request_failed(self, request_id: int, message: str) -> None:
        if request_id not in (self._search_id, self._listing_id):
            return
        self._search_id = self._listing_id = None
        self.search_status.setText("The Hub did not answer as hoped: see below.")
        self.show_error(message)

    # --- installed ------------------------------------------------------------------

    def _fill_installed(self) -> None:
        library = self._services.library
        selected = _selected(self.installed_table)
        selected_path = selected.path if isinstance(selected, InstalledModel) else None
        self._installed = library.models(self._services.starter)
        table = self.installed_table
        table.setRowCount(len(self._installed))
        for row, model in enumerate(self._installed):
            name = model.name + (" (loaded)" if model.path == self._loaded else "")
            if not model.present:
                name += " (file missing)"
            first = _item(name)
            first.setData(_ROW_ROLE, model)
            first.setToolTip(model.path)
            table.setItem(row, 0, first)
            table.setItem(row, 1, _item(model.quantization or ""))
            table.setItem(row, 2, _item(format_bytes(model.size), right=True))
            table.setItem(row, 3, _item(SOURCE_TEXT.get(model.source, model.source)))
            table.setItem(row, 4, _item(_last_used(model.last_used)))
            if model.path == selected_path:
                table.selectRow(row)
        none_yet = (
            ""
            if self._installed
            else "No models yet: download one (Recommended, Search the Hub) or "
            "add a file you have. "
        )
        self.installed_note.setText(
            f"{none_yet}Downloads go to {library.models_dir}. A file added by "
            "path stays where it is: removing it only takes it off this list."
        )
        self._on_installed_table_selection_changed()

    def _selected_model(self) -> InstalledModel | None:
        model = _selected(self.installed_table)
        return model if isinstance(model, InstalledModel) else None

    @Slot()
    def _on_installed_table_selection_changed(self) -> None:
        model = self._selected_model()
        self.load_button.setEnabled(model is not None and model.present)
        removable = (
            model is not None
            and model.source != "starter"
            and model.path != self._loaded
        )
        self.remove_button.setEnabled(removable)
        self.remove_button.setToolTip(
            "The model in use: load another one first."
            if model is not None and model.path == self._loaded
            else ""
        )

    @Slot(QTableWidgetItem)
    def _on_installed_table_item_double_clicked(self, _item: QTableWidgetItem) -> None:
        self._on_load_button_clicked()

    @Slot()
    def _on_load_button_clicked(self) -> None:
        model = self._selected_model()
        if model is not None and model.present:
            self.load_requested.emit(model.path)

    @Slot()
    def _on_remove_button_clicked(self) -> None:
        model = self._selected_model()
        if model is None:
            return
        if model.source == "downloaded":
            text = (
                f"Remove {model.name}? Its file ({format_bytes(model.size)}) is "
                f"deleted from {Path(model.path).parent}."
            )
            action = "Delete"
        else:
            text = (
                f"Forget {model.name}? It was added by path, so only the entry "
                f"goes: the file stays at {model.path}."
            )
            action = "Forget"
        if confirm(self, "Remove model", text, action):
            self.show_error("")
            self._services.tasks.remove(model)

    @Slot()
    def _on_add_button_clicked(self) -> None:
        path = choose_model_file(self)
        if path is not None:
            self.show_error("")
            self._services.tasks.add_file(path)

    @Slot(str)
    def _on_tasks_library_changed(self, note: str) -> None:
        self._fill_installed()
        self._fill_catalog()
        if note:
            self.installed_note.setText(note)

    @Slot(str)
    def _on_tasks_library_failed(self, message: str) -> None:
        self.show_error(message)

    # --- downloads ------------------------------------------------------------------

    @Slot(str)
    def _on_downloads_panel_load_requested(self, path: str) -> None:
        self.load_requested.emit(path)

    @Slot(str)
    def _on_downloads_download_queued(self, _key: str) -> None:
        self._fill_catalog()

    @Slot(str)
    def _on_downloads_download_started(self, _key: str) -> None:
        self._fill_catalog()  # its status: from "queued" to "downloading"

    @Slot(str, str)
    def _on_downloads_download_finished(self, _key: str, _path: str) -> None:
        self._fill_installed()
        self._fill_catalog()

    @Slot(str, str)
    def _on_downloads_download_failed(self, _key: str, message: str) -> None:
        self.show_error(message)  # it names the file already
        self._fill_catalog()

    @Slot(str, bool)
    def _on_downloads_download_stopped(self, _key: str, _paused: bool) -> None:
        self._fill_catalog()
