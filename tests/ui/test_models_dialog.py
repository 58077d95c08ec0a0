"""The Models dialog and the welcome page's offer, on the real stack: real widgets,
the real library and download threads, a Hub of our own on 127.0.0.1
(``tests/helpers/fake_hub.py``) serving the tiny GGUF, and the real engine loading it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QTableWidget

from app.library.catalog import load_catalog
from app.preferences import load_preferences
from app.qt.views.dialogs.models import ModelsDialog
from app.qt.views.library.welcome import welcome_offer
from app.qt.workers.download_worker import DownloadState
from tests.helpers.fake_hub import FakeHub, HubServer
from tests.ui.conftest import WAIT_MS, send, wait_idle

CTRL_SHIFT = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
LEFT = Qt.MouseButton.LeftButton
TINY = ("arbor/tiny-GGUF", "tiny-Q8_0.gguf")
BIG = ("arbor/big-GGUF", "big-Q4_K_M.gguf")
GATED = ("arbor/gated-GGUF", "gated-Q4_K_M.gguf")
MIB = 1024 * 1024
# A slow line for the big file: 12 MiB in about 6 s, read in 1 MiB pieces.
SLOW = 2_000_000


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 MiB that are no model: large enough to pause between reads (the
    library reads 1 MiB at a time), never loaded."""
    path = tmp_path_factory.mktemp("big") / "big.gguf"
    path.write_bytes(os.urandom(12 * MIB))
    return path


@pytest.fixture
def hub(tiny_model: Path, big_file: Path) -> Iterator[HubServer]:
    """A Hub with an open tiny model, a big file and a gated repository."""
    fake = FakeHub()
    fake.add(TINY[0], {TINY[1]: tiny_model}, downloads=120)
    fake.add(BIG[0], {BIG[1]: big_file}, downloads=50)
    fake.add(GATED[0], {GATED[1]: tiny_model}, gated=True, downloads=10)
    with HubServer(fake) as server:
        yield server


@pytest.fixture
def window(hub: HubServer, make_window):
    """A window on the tiny model whose Hub is ``hub`` (closed before the Hub)."""
    return make_window(hub_endpoint=hub.url)


def _open_models(qtbot, window) -> ModelsDialog:
    qtbot.keyClick(window.composer.edit, Qt.Key.Key_M, CTRL_SHIFT)
    dialog = window._models_dialog
    assert dialog is not None and dialog.isVisible()
    return dialog


def _column(table: QTableWidget, column: int = 0) -> list[str]:
    return [table.item(row, column).text() for row in range(table.rowCount())]


def _search(qtbot, dialog: ModelsDialog, query: str) -> None:
    dialog.tabs.setCurrentIndex(1)
    dialog.query_edit.clear()
    qtbot.keyClicks(dialog.query_edit, query)
    qtbot.keyClick(dialog.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: dialog._search_id is None, timeout=WAIT_MS)


def _choose_repo(qtbot, dialog: ModelsDialog, repo: str) -> None:
    dialog.repo_table.selectRow(_column(dialog.repo_table).index(repo))
    qtbot.waitUntil(lambda: dialog.file_table.rowCount() > 0, timeout=WAIT_MS)


def _start_download(qtbot, window, dialog: ModelsDialog, repo: str) -> str:
    """Search for ``repo``, choose its first file and click Download."""
    _search(qtbot, dialog, repo.split("/")[1])
    _choose_repo(qtbot, dialog, repo)
    dialog.file_table.selectRow(0)
    with qtbot.waitSignal(window.models.downloads.download_queued) as queued:
        qtbot.mouseClick(dialog.file_download_button, LEFT)
    return queued.args[0]


def _state(window, key: str) -> DownloadState:
    state = window.models.downloads.state(key)
    assert state is not None
    return state


def _destination(data_dir: Path, repo: str, filename: str) -> Path:
    return data_dir / "models" / repo / filename


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _wait_for_bytes(qtbot, window, key: str, count: int) -> None:
    qtbot.waitUntil(lambda: _state(window, key).done >= count, timeout=WAIT_MS)


# --- search -----------------------------------------------------------------------


def test_search_lists_repositories_and_a_chosen_ones_files(qtbot, window):
    dialog = _open_models(qtbot, window)
    _search(qtbot, dialog, "GGUF")
    assert _column(dialog.repo_table) == [TINY[0], BIG[0], GATED[0]]  # by downloads
    assert _column(dialog.repo_table, 1) == ["120", "50", "10"]
    assert _column(dialog.repo_table, 2) == ["open", "open", "gated (HF_TOKEN)"]

    _choose_repo(qtbot, dialog, TINY[0])
    assert _column(dialog.file_table) == [TINY[1]]
    assert _column(dialog.file_table, 1) == ["Q8_0"]
    assert _column(dialog.file_table, 2) == ["440 kB"]
    assert _column(dialog.file_table, 3)[0].startswith("fits · needs about ")
    assert not dialog.file_download_button.isEnabled()  # no file chosen yet
    dialog.file_table.selectRow(0)
    assert dialog.file_download_button.isEnabled()

    _search(qtbot, dialog, "no-such-model")
    assert dialog.repo_table.rowCount() == 0 and dialog.file_table.rowCount() == 0
    assert dialog.search_status.text().startswith("No repository")
    assert not dialog.error_label.isVisible()


# --- downloads --------------------------------------------------------------------


def test_a_download_is_verified_listed_and_loads(qtbot, window, data_dir, tiny_model):
    dialog = _open_models(qtbot, window)
    downloads = window.models.downloads
    with qtbot.waitSignal(downloads.download_finished, timeout=WAIT_MS) as finished:
        key = _start_download(qtbot, window, dialog, TINY[0])
    path = _destination(data_dir, *TINY)
    assert finished.args == [key, str(path)]
    assert _sha256(path) == _sha256(tiny_model)
    assert list(path.parent.iterdir()) == [path]  # no part, no note, no lock

    dialog.tabs.setCurrentIndex(2)
    listed = _column(dialog.installed_table)
    assert "Tiny" in listed
    row = listed.index("Tiny")
    assert dialog.installed_table.item(row, 3).text() == "Downloaded"
    assert dialog.installed_table.item(row, 2).text() == "440 kB"

    panel_row = dialog.downloads_panel.rows[key]
    assert panel_row.load_button.isVisible()
    assert not panel_row.pause_button.isVisible()
    assert panel_row.detail_label.text() == "Downloaded and verified — 440 kB"
    qtbot.mouseClick(panel_row.load_button, LEFT)
    assert not dialog.isVisible()  # out of the way of the chat
    wait_idle(qtbot, window)
    # Loaded as File → Open model file loads: the preference, the recent list.
    assert window.model_info is not None and window.model_info.path == str(path)
    prefs = load_preferences(window.db)
    assert prefs.model_path == str(path) and prefs.recent_models[0] == str(path)
    library = window.models.library

    def used() -> bool:
        return bool(next(m for m in library.models() if m.path == str(path)).last_used)

    qtbot.waitUntil(used, timeout=WAIT_MS)  # "last used", written by the worker

    # Installed → Load brings back the model opened by path at the start.
    dialog = _open_models(qtbot, window)
    dialog.tabs.setCurrentIndex(2)
    table = dialog.installed_table
    assert _column(table, 3)[_column(table).index("Tiny (loaded)")] == "Downloaded"
    row = _column(table).index("Tiny")
    assert table.item(row, 3).text() == "Added by path"
    table.selectRow(row)
    qtbot.mouseClick(dialog.load_button, LEFT)
    wait_idle(qtbot, window)
    assert window.model_info.path == str(tiny_model)


def test_pause_then_resume_fetches_only_the_rest(qtbot, window, hub, data_dir):
    hub.hub.rate = SLOW
    dialog = _open_models(qtbot, window)
    key = _start_download(qtbot, window, dialog, BIG[0])
    _wait_for_bytes(qtbot, window, key, 2 * MIB)  # two reads: a speed
    row = dialog.downloads_panel.rows[key]
    assert row.pause_button.text() == "Pause"
    assert "MB/s" in row.detail_label.text()
    assert window.status.download_label.text().startswith("Downloading Big — ")

    with qtbot.waitSignal(window.models.downloads.download_stopped) as stopped:
        qtbot.mouseClick(row.pause_button, LEFT)
    assert stopped.args == [key, True]
    part = _destination(data_dir, *BIG).with_suffix(".gguf.part")
    kept = part.stat().st_size
    size = 12 * MIB
    assert 0 < kept < size
    assert _state(window, key).done == kept
    assert row.pause_button.text() == "Resume"
    assert row.detail_label.text().startswith("Paused at ")
    assert not window.status.download_label.isVisible()

    hub.hub.rate = 0
    with qtbot.waitSignal(
        window.models.downloads.download_finished, timeout=WAIT_MS
    ) as finished:
        qtbot.mouseClick(row.pause_button, LEFT)
    path = Path(finished.args[1])
    assert not part.exists() and path.stat().st_size == size
    resumed = hub.hub.downloads[-1]
    assert resumed.range == f"bytes={kept}-"
    assert resumed.sent == size - kept
    assert len(hub.hub.downloads) == 2


def test_cancel_deletes_what_was_fetched(qtbot, window, hub, data_dir):
    hub.hub.rate = SLOW
    dialog = _open_models(qtbot, window)
    downloads = window.models.downloads
    part = _destination(data_dir, *BIG).with_suffix(".gguf.part")

    # Cancelled while it runs: it stops, then its part goes.
    key = _start_download(qtbot, window, dialog, BIG[0])
    _wait_for_bytes(qtbot, window, key, MIB)
    assert part.exists()
    with qtbot.waitSignal(downloads.download_stopped, timeout=WAIT_MS) as stopped:
        qtbot.mouseClick(dialog.downloads_panel.rows[key].cancel_button, LEFT)
    assert stopped.args == [key, False]
    assert not part.exists() and not part.with_suffix(".part.json").exists()
    assert downloads.state(key) is None and key not in dialog.downloads_panel.rows
    assert not dialog.downloads_panel.isVisible()

    # Cancelled while paused: the row goes at once, the part on the thread.
    key = _start_download(qtbot, window, dialog, BIG[0])
    _wait_for_bytes(qtbot, window, key, MIB)
    with qtbot.waitSignal(downloads.download_stopped, timeout=WAIT_MS):
        downloads.pause(key)
    assert part.exists()
    with qtbot.waitSignal(downloads.download_stopped, timeout=WAIT_MS) as stopped:
        qtbot.mouseClick(dialog.downloads_panel.rows[key].cancel_button, LEFT)
    assert stopped.args == [key, False]
    assert key not in dialog.downloads_panel.rows
    qtbot.waitUntil(lambda: not part.exists(), timeout=WAIT_MS)
    dialog.tabs.setCurrentIndex(2)
    assert "big" not in _column(dialog.installed_table)


def test_a_download_queued_behind_another_pauses_and_cancels_at_once(
    qtbot, window, hub
):
    hub.hub.rate = SLOW
    dialog = _open_models(qtbot, window)
    downloads = window.models.downloads
    running = _start_download(qtbot, window, dialog, BIG[0])
    waiting = _start_download(qtbot, window, dialog, TINY[0])
    assert _state(window, waiting).status == "queued"
    row = dialog.downloads_panel.rows[waiting]
    assert row.detail_label.text() == "Waiting for the download before it"
    assert window.status.download_label.text().endswith("(+1 queued)")
    qtbot.mouseClick(row.pause_button, LEFT)  # settled without waiting
    assert _state(window, waiting).status == "paused"
    assert row.pause_button.text() == "Resume"
    qtbot.mouseClick(row.cancel_button, LEFT)
    assert (
        downloads.state(waiting) is None and waiting not in dialog.downloads_panel.rows
    )
    assert _state(window, running).active  # the other goes on
    with qtbot.waitSignal(downloads.download_stopped, timeout=WAIT_MS):
        downloads.cancel(running)
    assert hub.hub.downloads[-1].range is None  # the tiny one never started
    assert len(hub.hub.downloads) == 1


def test_a_download_left_unfinished_resumes_at_the_next_start(
    qtbot, hub, make_window, data_dir
):
    hub.hub.rate = SLOW
    window = make_window(hub_endpoint=hub.url)
    dialog = _open_models(qtbot, window)
    key = _start_download(qtbot, window, dialog, BIG[0])
    _wait_for_bytes(qtbot, window, key, MIB)
    window.close()  # the download stops; its part stays
    part = _destination(data_dir, *BIG).with_suffix(".gguf.part")
    kept = part.stat().st_size
    assert kept > 0

    again = make_window(hub_endpoint=hub.url)
    state = _state(again, key)
    assert (state.status, state.done, state.total) == ("paused", kept, 12 * MIB)
    dialog = _open_models(qtbot, again)
    row = dialog.downloads_panel.rows[key]
    assert row.detail_label.text().startswith("Paused at ")
    hub.hub.rate = 0
    with qtbot.waitSignal(again.models.downloads.download_finished, timeout=WAIT_MS):
        qtbot.mouseClick(row.pause_button, LEFT)
    assert hub.hub.downloads[-1].range == f"bytes={kept}-"
    assert _sha256(_destination(data_dir, *BIG)) == _sha256(
        hub.hub.repos[BIG[0]].files[BIG[1]].path
    )


def test_a_gated_repository_says_to_set_hf_token(qtbot, window, data_dir):
    dialog = _open_models(qtbot, window)
    downloads = window.models.downloads
    with qtbot.waitSignal(downloads.download_failed, timeout=WAIT_MS) as failed:
        key = _start_download(qtbot, window, dialog, GATED[0])
    assert failed.args[0] == key
    text = dialog.error_label.text()
    assert dialog.error_label.isVisible()
    assert "gated" in text and "HF_TOKEN" in text
    assert "\n" not in text and "Traceback" not in text
    row = dialog.downloads_panel.rows[key]
    assert "HF_TOKEN" in row.detail_label.text()
    assert row.pause_button.text() == "Try again"  # the licence accepted, token set
    assert not any(_destination(data_dir, *GATED).parent.glob("*.gguf*"))


def test_the_chat_goes_on_while_a_model_downloads(qtbot, window, hub):
    hub.hub.rate = SLOW
    dialog = _open_models(qtbot, window)
    key = _start_download(qtbot, window, dialog, BIG[0])
    dialog.close()  # the download goes on without the dialog
    # A window manager gives the window back the keyboard; offscreen, the test.
    window.activateWindow()
    _wait_for_bytes(qtbot, window, key, 1)
    assert _state(window, key).active
    assert not window.composer.edit.isReadOnly() and window.send_action.isEnabled()
    assert window.status.download_label.text().startswith("Downloading Big — ")
    send(qtbot, window, "hello while downloading")  # a real reply, real engine
    assert window.transcript.cards[-1].role == "assistant"
    assert window.transcript.cards[-1].text
    with qtbot.waitSignal(window.models.downloads.download_stopped, timeout=WAIT_MS):
        window.models.downloads.cancel(key)


# --- recommended and installed ----------------------------------------------------


def test_recommended_models_show_their_fit_and_too_big_ones_are_greyed(
    qtbot, window, monkeypatch
):
    monkeypatch.setattr("app.library.fit.machine_memory", lambda: 6 * 1000**3)
    monkeypatch.setattr(
        "app.qt.views.dialogs.models.machine_memory", lambda: 6 * 1000**3
    )
    dialog = _open_models(qtbot, window)
    table = dialog.catalog_table
    catalog = window.models.library.catalog
    assert _column(table) == [e.name for e in catalog.entries]  # none hidden
    assert "6.0 GB of memory" in dialog.fit_hint.text()
    assert "4,096 tokens" in dialog.fit_hint.text()
    fits = _column(table, 7)
    too_big = [i for i, text in enumerate(fits) if text.startswith("too big")]
    fine = [i for i, text in enumerate(fits) if text.startswith("fits")]
    assert too_big and fine
    reasons = _column(table, 5)
    assert {reasons[i] for i, e in enumerate(catalog.entries) if e.reasoning} == {
        "reasons"
    }

    table.selectRow(too_big[0])
    item = table.item(too_big[0], 0)
    assert item.foreground().color() == dialog.palette().color(
        QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text
    )
    assert item.toolTip().startswith("Too big for this computer")
    assert not dialog.catalog_download_button.isEnabled()
    table.selectRow(fine[0])
    assert dialog.catalog_download_button.isEnabled()
    assert dialog.catalog_download_button.text().startswith("Download (")
    assert catalog.entries[fine[0]].description in dialog.description_label.text()


def test_a_gpu_counts_beside_the_memory_in_the_fits(qtbot, window, monkeypatch):
    monkeypatch.setattr("app.library.fit.machine_memory", lambda: 6 * 1000**3)
    monkeypatch.setattr(
        "app.qt.views.dialogs.models.machine_memory", lambda: 6 * 1000**3
    )
    dialog = _open_models(qtbot, window)
    without = _column(dialog.catalog_table, 7)
    dialog.refresh(4096, None, gpu_bytes=24 * 1024**3)
    assert "and 25.8 GB on the GPU" in dialog.fit_hint.text()
    with_gpu = _column(dialog.catalog_table, 7)
    assert not [t for t in with_gpu if t.startswith("too big")]
    assert sum(t.startswith("too big") for t in without) > 0
    assert all(t.endswith(("all on the GPU", "partly on the GPU")) for t in with_gpu)


def test_add_a_file_by_path_and_remove_models(
    qtbot, window, monkeypatch, tmp_path, data_dir, tiny_model
):
    mine = tmp_path / "mine-Q8_0.gguf"
    shutil.copy(tiny_model, mine)
    questions: list[str] = []

    def confirm(_parent, _title, text, _action) -> bool:
        questions.append(text)
        return True

    monkeypatch.setattr("app.qt.views.dialogs.models.confirm", confirm)
    monkeypatch.setattr(
        "app.qt.views.dialogs.models.choose_model_file", lambda _parent, _start="": mine
    )
    dialog = _open_models(qtbot, window)
    dialog.tabs.setCurrentIndex(2)
    table = dialog.installed_table
    # The model in use (opened by path at start) is listed and cannot go.
    qtbot.waitUntil(lambda: "Tiny (loaded)" in _column(table), timeout=WAIT_MS)
    table.selectRow(_column(table).index("Tiny (loaded)"))
    assert dialog.load_button.isEnabled() and not dialog.remove_button.isEnabled()

    qtbot.mouseClick(dialog.add_button, LEFT)
    qtbot.waitUntil(lambda: "Mine" in _column(table), timeout=WAIT_MS)
    row = _column(table).index("Mine")
    assert table.item(row, 3).text() == "Added by path"
    table.selectRow(row)
    with qtbot.waitSignal(window.models.tasks.library_changed, timeout=WAIT_MS):
        qtbot.mouseClick(dialog.remove_button, LEFT)
    assert "Mine" not in _column(table)
    assert mine.is_file()  # only forgotten
    assert "file stays" in questions[-1]
    assert dialog.installed_note.text().startswith("Forgot Mine")

    # A downloaded model's file is deleted.
    with qtbot.waitSignal(window.models.downloads.download_finished, timeout=WAIT_MS):
        _start_download(qtbot, window, dialog, TINY[0])
    downloaded = _destination(data_dir, *TINY)
    dialog.tabs.setCurrentIndex(2)
    table.selectRow(_column(table).index("Tiny"))
    with qtbot.waitSignal(window.models.tasks.library_changed, timeout=WAIT_MS):
        qtbot.mouseClick(dialog.remove_button, LEFT)
    assert "is deleted" in questions[-1]
    assert not downloaded.exists() and "Tiny" not in _column(table)
    assert dialog.installed_note.text().startswith("Removed Tiny: 440 kB freed")


# --- the welcome page -------------------------------------------------------------


def test_welcome_offers_the_best_model_that_fits_and_loads_it_when_downloaded(
    qtbot, hub, make_window, monkeypatch, data_dir, tiny_model
):
    monkeypatch.setattr("app.qt.gui.starter_model_path", lambda: None)
    monkeypatch.setattr("app.library.fit.machine_memory", lambda: 32 * 1000**3)
    entry = welcome_offer(load_catalog(), 4096)
    assert entry is not None
    hub.hub.add(entry.repo, {entry.file: tiny_model})  # the tiny model, renamed
    window = make_window(model=None, hub_endpoint=hub.url)
    welcome = window.welcome
    assert window.center.currentWidget() is welcome
    assert welcome.offer_button.text() == f"Download {entry.name} (2.5 GB)"
    assert entry.description in welcome.offer_label.text()
    assert hub.hub.downloads == []  # nothing without a click

    qtbot.mouseClick(welcome.browse_button, LEFT)
    assert window._models_dialog is not None and window._models_dialog.isVisible()
    window._models_dialog.close()

    qtbot.mouseClick(welcome.offer_button, LEFT)
    assert entry.name in welcome.offer_label.text()
    qtbot.waitUntil(lambda: window.model_info is not None, timeout=WAIT_MS)
    wait_idle(qtbot, window)
    path = _destination(data_dir, entry.repo, entry.file)
    assert window.model_info.path == str(path)
    assert window.center.currentWidget() is window.chat_page
    assert load_preferences(window.db).model_path == str(path)


def test_a_recommended_models_status_follows_its_download(qtbot, make_window, big_file):
    # The catalog's row says "downloading" while it runs, not "queued".
    entry = load_catalog().entries[0]
    fake = FakeHub(rate=SLOW)
    fake.add(entry.repo, {entry.file: big_file})
    with HubServer(fake) as server:
        window = make_window(hub_endpoint=server.url)
        dialog = _open_models(qtbot, window)
        dialog.catalog_table.selectRow(0)
        qtbot.mouseClick(dialog.catalog_download_button, LEFT)
        status = dialog.catalog_table.columnCount() - 1
        qtbot.waitUntil(
            lambda: dialog.catalog_table.item(0, status).text() == "downloading",
            timeout=WAIT_MS,
        )
        key = f"{entry.repo}/{entry.file}"
        window.models.downloads.cancel(key)
        qtbot.waitUntil(
            lambda: dialog.catalog_table.item(0, status).text() == "",
            timeout=WAIT_MS,
        )
        window.close()


# --- base models and names (issue 41) ---------------------------------------------


def test_search_flags_a_base_model_before_the_download(qtbot, window, hub, tiny_model):
    base, chat = "arbor/tiny-base-GGUF", "arbor/tiny-chat-GGUF"
    # What the Hub reads from a GGUF: a base model's has no chat template.
    hub.hub.add(
        base,
        {"tiny-base-Q8_0.gguf": tiny_model},
        downloads=5,
        gguf={"architecture": "llama", "context_length": 2048},
    )
    hub.hub.add(
        chat,
        {"tiny-chat-Q8_0.gguf": tiny_model},
        downloads=4,
        gguf={
            "architecture": "llama",
            "context_length": 2048,
            "chat_template": "{{x}}",
        },
    )
    dialog = _open_models(qtbot, window)
    _search(qtbot, dialog, "tiny")
    table = dialog.repo_table
    notes = dict(zip(_column(table), _column(table, 3), strict=True))
    assert notes == {
        TINY[0]: "",  # the Hub read nothing: nothing said
        base: "base model: no chat template",
        chat: "",
    }
    flagged = table.item(_column(table).index(base), 3)
    assert "continue a text" in flagged.toolTip()
    assert table.horizontalHeaderItem(3).text() == "Note"

    _choose_repo(qtbot, dialog, base)
    assert dialog.search_status.text() == (
        f"{base}: 1 model file. A base model (no chat template): it continues a "
        "text rather than answering it."
    )
    if shot := os.environ.get("ARBOR_SCREENSHOT"):
        dialog.resize(900, 560)
        qtbot.wait(50)
        dialog.grab().save(shot)
    _choose_repo(qtbot, dialog, chat)
    assert dialog.search_status.text() == f"{chat}: 1 model file."


def test_a_downloaded_model_has_one_clean_name_everywhere(
    qtbot, window, hub, tiny_model, data_dir
):
    repo, filename = "arbor/gemma-3-270m-it-GGUF", "gemma-3-270m-it-Q4_K_M.gguf"
    name = "Gemma 3 270M Instruct"  # not "gemma 3 270m it"
    hub.hub.add(repo, {filename: tiny_model})
    hub.hub.rate = 100_000  # a few seconds: the status bar has time to say it
    dialog = _open_models(qtbot, window)
    key = _start_download(qtbot, window, dialog, repo)
    row = dialog.downloads_panel.rows[key]
    assert row.name_label.text() == name
    qtbot.waitUntil(
        lambda: window.status.download_label.text().startswith(f"Downloading {name}"),
        timeout=WAIT_MS,
    )
    qtbot.waitUntil(lambda: row.load_button.isVisible(), timeout=WAIT_MS)
    qtbot.mouseClick(row.load_button, LEFT)
    wait_idle(qtbot, window)
    assert window.model_info is not None
    assert window.model_info.path == str(_destination(data_dir, repo, filename))
    assert window.status.model_label.text() == name
    assert name in window.transcript.empty_state.subtitle.text()
