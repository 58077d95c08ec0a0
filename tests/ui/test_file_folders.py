"""Where the file dialogs open: the folder last used for that kind of file,
else the home folder (for models, the models folder if there is one), never
the working folder, which is site-packages when launched from a bundle or a
virtual environment.

The native dialogs are answered by patching ``QFileDialog``'s static
functions, which also records the folder each was asked to open in.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog

from app.qt.views.chrome import exchange_actions
from app.qt.views.library import welcome
from app.qt.views.library.welcome import WelcomePage, choose_model_file, start_folder
from tests.ui.conftest import WAIT_MS, wait_idle


class _Dialogs:
    """Stands in for the native file dialogs: records where each opened
    (``opened`` for Open, ``saved`` for Save: the suggested path) and gives
    ``answer``, a (file, filter) pair; ("", "") is Cancel."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.opened: list[str] = []
        self.saved: list[str] = []
        self.answer: tuple[str, str] = ("", "")
        monkeypatch.setattr(QFileDialog, "getOpenFileName", self._open)
        monkeypatch.setattr(QFileDialog, "getSaveFileName", self._save)

    def _open(self, _parent, _caption, folder="", _filter="", *_args, **_kw):
        self.opened.append(folder)
        return self.answer

    def _save(self, _parent, _caption, suggested="", _filter="", *_args, **_kw):
        self.saved.append(suggested)
        return self.answer


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder of the test's own; the working folder is site-packages;
    and nothing was chosen in a dialog yet this session."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # what Path.home() reads on POSIX
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.chdir(site)
    monkeypatch.setattr(exchange_actions, "_last_folder", None, raising=False)
    monkeypatch.setattr(welcome, "_last_model_folder", None, raising=False)
    assert Path.home() == home and Path.cwd() == site
    return home


def test_import_and_export_open_where_a_conversation_file_last_was(
    qtbot, make_window, home: Path, tmp_path: Path, monkeypatch
):
    window = make_window()
    dialogs = _Dialogs(monkeypatch)
    # Nothing chosen yet: both start at home.
    window.import_action.trigger()
    assert dialogs.opened == [str(home)]
    window.export_action.trigger()
    assert Path(dialogs.saved[-1]) == home / "New conversation.md"

    # Exported elsewhere: the import and the next export open there.
    exports = tmp_path / "exports"
    exports.mkdir()
    dialogs.answer = (str(exports / "chat.json"), exchange_actions.JSON_FILTER)
    window.export_action.trigger()
    assert (exports / "chat.json").is_file()
    dialogs.answer = ("", "")
    window.import_action.trigger()
    assert dialogs.opened[-1] == str(exports)
    window.export_action.trigger()
    assert Path(dialogs.saved[-1]).parent == exports

    # Imported from another folder: the next export suggests that one.
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "chat.json").write_bytes((exports / "chat.json").read_bytes())
    shown = window.conversation_id
    dialogs.answer = (str(downloads / "chat.json"), exchange_actions.JSON_FILTER)
    window.import_action.trigger()
    qtbot.waitUntil(lambda: window.conversation_id != shown, timeout=WAIT_MS)
    wait_idle(qtbot, window)
    dialogs.answer = ("", "")
    window.export_action.trigger()
    assert Path(dialogs.saved[-1]).parent == downloads

    # A remembered folder that has gone since: home again, not a dead end.
    os.rename(downloads, tmp_path / "moved")
    window.import_action.trigger()
    assert dialogs.opened[-1] == str(home)


def test_choosing_a_model_file_opens_where_a_model_last_was(
    qtbot, home: Path, tmp_path: Path, monkeypatch
):
    dialogs = _Dialogs(monkeypatch)
    page = WelcomePage()
    qtbot.addWidget(page)
    page.show()
    # The welcome page's button: home (this test's data has no models folder).
    qtbot.mouseClick(page.choose_button, Qt.MouseButton.LeftButton)
    assert dialogs.opened == [str(home)]

    models = tmp_path / "my models"
    models.mkdir()
    chosen = models / "tiny.gguf"
    chosen.write_bytes(b"GGUF")
    dialogs.answer = (str(chosen), "")
    with qtbot.waitSignal(page.model_chosen) as picked:
        qtbot.mouseClick(page.choose_button, Qt.MouseButton.LeftButton)
    assert picked.args == [str(chosen)]
    # The next dialog, wherever it is asked for, opens there.
    dialogs.answer = ("", "")
    qtbot.mouseClick(page.choose_button, Qt.MouseButton.LeftButton)
    assert dialogs.opened[-1] == str(models)
    assert choose_model_file(None) is None
    assert dialogs.opened[-1] == str(models)
    # A folder given by the caller (beside the model in Settings) still wins.
    beside = tmp_path / "beside"
    beside.mkdir()
    choose_model_file(None, str(beside))
    assert dialogs.opened[-1] == str(beside)


def test_the_window_model_dialog_prefers_the_last_model_folder_to_the_default(
    home: Path, tmp_path: Path, monkeypatch
):
    starter = tmp_path / "site-packages" / "starter.gguf"
    downloads = tmp_path / "data" / "models"
    # Before any model was chosen or downloaded: home.
    assert start_folder(None, starter, downloads) == str(home)
    assert start_folder(str(starter), starter, downloads) == str(home)
    # A models folder (downloads went there): that.
    downloads.mkdir(parents=True)
    assert start_folder(str(starter), starter, downloads) == str(downloads)
    # A model chosen this session, then the starter loaded: where it was.
    mine = tmp_path / "elsewhere"
    mine.mkdir()
    dialogs = _Dialogs(monkeypatch)
    dialogs.answer = (str(mine / "big.gguf"), "")
    choose_model_file(None, str(downloads))
    assert start_folder(str(starter), starter, downloads) == str(mine)
    assert start_folder(None, starter, downloads) == str(mine)
    # Beside the current model, when it is one of the user's.
    other = tmp_path / "other"
    other.mkdir()
    assert start_folder(str(other / "a.gguf"), starter, downloads) == str(other)
