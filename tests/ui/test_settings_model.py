"""The model in Settings and the model file dialogs: a name, quantization,
size and trained context instead of a bare path, and a start folder that is
not the starter model's package folder."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from app.platform.starter_model import starter_model_path
from app.qt.views.dialogs.settings import SettingsDialog
from app.qt.views.library.welcome import start_folder
from tests.ui.conftest import wait_idle


def test_settings_tell_what_the_model_is(qtbot, make_window, tiny_model):
    window = make_window()
    wait_idle(qtbot, window)
    dialog = SettingsDialog(window.prefs, False, window, loaded=window.model_info)
    qtbot.addWidget(dialog)
    dialog.model_combo.setCurrentText(str(tiny_model))
    summary = dialog.model_summary.text()
    # tiny.gguf, as the file is named; its size; its trained context.
    assert summary.startswith("Tiny · ")
    assert "kB" in summary or "MB" in summary
    assert "trained for 32,768 tokens" in summary
    dialog.model_combo.setCurrentText(str(tiny_model.parent / "gone-Q4_K_M.gguf"))
    assert dialog.model_summary.text() == "Gone · Q4_K_M · the file is not there"


def test_file_dialogs_start_beside_the_model_not_in_the_starter_package(tmp_path):
    models = tmp_path / "models"
    mine = tmp_path / "mine" / "m.gguf"
    mine.parent.mkdir()
    mine.write_bytes(b"GGUF")
    starter = starter_model_path()
    assert start_folder(str(mine), starter, models) == str(mine.parent)
    # The starter, or nothing yet: the home folder until the models folder
    # exists, then that.
    assert start_folder(str(starter), starter, models) == str(Path.home())
    assert start_folder(None, starter, models) == str(Path.home())
    models.mkdir()
    assert start_folder(str(starter), starter, models) == str(models)


def test_the_models_folder_is_chosen_in_settings(qtbot, make_window, tmp_path):
    from PySide6.QtWidgets import QDialogButtonBox

    from app.preferences import load_preferences

    window = make_window()
    wait_idle(qtbot, window)
    default = window.models.library.models_dir
    dialog = SettingsDialog(
        window.prefs, False, window, default_models_dir=str(default)
    )
    qtbot.addWidget(dialog)
    assert dialog.models_dir_edit.placeholderText() == str(default)
    chosen = tmp_path / "my models"
    dialog.models_dir_edit.setText(str(chosen))
    ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
    assert dialog.result() == SettingsDialog.DialogCode.Accepted
    window.apply_preferences(dialog.preferences())
    wait_idle(qtbot, window)
    assert window.models.library.models_dir == chosen
    assert load_preferences(window.db).models_dir == str(chosen)
