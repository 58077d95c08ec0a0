"""The rest of the window: conversations, first run, errors, settings, storage."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from app.preferences import load_preferences
from app.qt.models.conversation_list import ConversationIdRole
from app.qt.views.dialogs.settings import NO_GPU_EXPLANATION, SettingsDialog
from app.qt.views.dialogs.storage import StorageDialog
from storage import checkpoint_rows, conversation_rows, node_rows
from tests.ui.conftest import WAIT_MS, send, wait_idle


def _error_boxes() -> list[QMessageBox]:
    return [
        w
        for w in QApplication.topLevelWidgets()
        if isinstance(w, QMessageBox)
        and w.objectName() == "ErrorMessage"
        and w.isVisible()
    ]


def _listed_titles(window) -> list[str]:
    model = window.list_model
    return [model.index(row, 0).data() for row in range(model.rowCount())]


# --- conversations ------------------------------------------------------------


def test_new_rename_filter_and_delete_conversations(qtbot, make_window, monkeypatch):
    window = make_window()
    assert window.windowTitle() == "New conversation — Arbor"
    send(qtbot, window, "about oak trees")
    # The first message names the conversation, in the title bar too.
    assert window.windowTitle() == "about oak trees — Arbor"
    first = window.conversation_id
    window.rename_conversation(first, "Oaks")

    qtbot.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, window)
    second = window.conversation_id
    assert second != first
    send(qtbot, window, "about pine trees")
    window.rename_conversation(second, "Pines")
    assert _listed_titles(window) == ["Pines", "Oaks"]  # most recent first
    assert window.windowTitle().startswith("Pines")

    # Selecting a conversation shows it at its active node.
    view = window.sidebar.list_view
    index = window.list_model.index(window.list_model.row_of(first), 0)
    qtbot.mouseClick(
        view.viewport(), Qt.MouseButton.LeftButton, pos=view.visualRect(index).center()
    )
    assert window.conversation_id == first
    assert window.transcript.cards[0].text == "about oak trees"
    wait_idle(qtbot, window)

    # The filter matches titles and message text.
    qtbot.keyClicks(window.sidebar.filter_edit, "pine")
    qtbot.waitUntil(lambda: _listed_titles(window) == ["Pines"], timeout=WAIT_MS)
    window.sidebar.filter_edit.clear()
    qtbot.waitUntil(lambda: len(_listed_titles(window)) == 2, timeout=WAIT_MS)

    monkeypatch.setattr("app.qt.views.chrome.main_window.confirm", lambda *_: False)
    window.delete_conversation_action.trigger()
    assert len(_listed_titles(window)) == 2
    monkeypatch.setattr("app.qt.views.chrome.main_window.confirm", lambda *_: True)
    window.delete_conversation_action.trigger()
    assert _listed_titles(window) == ["Pines"]
    assert window.conversation_id == second
    wait_idle(qtbot, window)


def test_rename_through_the_dialog(qtbot, make_window, monkeypatch):
    window = make_window()
    monkeypatch.setattr(
        "app.qt.views.chrome.main_window.QInputDialog.getText",
        lambda *_a, **_k: ("  Renamed  ", True),
    )
    qtbot.keyClick(window, Qt.Key.Key_F2)
    assert _listed_titles(window) == ["Renamed"]
    assert (
        window.list_model.index(0, 0).data(ConversationIdRole) == window.conversation_id
    )


def test_new_conversation_with_a_system_prompt_uses_it(qtbot, make_window):
    window = make_window()
    from app import jobs

    window.engine.submit(jobs.NewConversation("Answer like a pirate.", "Pirate"))
    wait_idle(qtbot, window)
    assert window.transcript.cards[0].role == "root"
    assert window.transcript.cards[0].text == "Answer like a pirate."
    send(qtbot, window, "hello")
    assert (
        conversation_rows.get_conversation(window.db, window.conversation_id).title
        == "Pirate"
    )


# --- first run and model errors -----------------------------------------------


def test_first_run_without_a_model_asks_for_one_and_remembers_it(
    qtbot, make_window, monkeypatch
):
    monkeypatch.setattr("app.qt.gui.starter_model_path", lambda: None)
    window = make_window(model=None)
    assert window.center.currentWidget() is window.welcome
    assert window.composer.edit.isReadOnly()

    window.welcome.model_chosen.emit(str(make_window.tiny_model))
    assert "Loading" in window.status.busy_label.text()
    wait_idle(qtbot, window)
    assert window.center.currentWidget() is window.chat_page
    # The file's name, cleaned, not its general.name ("arbor-tiny-test").
    assert window.status.model_label.text() == "Tiny"
    assert window.status.layers_label.text() == "CPU"
    prefs = load_preferences(window.db)
    assert prefs.model_path == str(make_window.tiny_model)
    assert prefs.recent_models == (str(make_window.tiny_model),)
    window.close()

    again = make_window(model=None)  # the remembered model loads by itself
    assert (
        again.model_info is not None and again.center.currentWidget() is again.chat_page
    )


def test_starter_model_loads_automatically_on_first_run(
    qtbot, make_window, monkeypatch
):
    monkeypatch.setattr("app.qt.gui.starter_model_path", lambda: make_window.tiny_model)
    window = make_window(model=None)
    assert window.model_info is not None


def test_a_bad_model_file_shows_a_readable_error(qtbot, make_window, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a model")
    window = make_window(model=bad)
    boxes = _error_boxes()
    assert len(boxes) == 1
    # The title is the box's first line; the details are below it.
    assert boxes[0].text() == "Could not load the model"
    details = boxes[0].informativeText()
    assert "broken.gguf" in details and "Traceback" not in details
    assert window.model_info is None
    assert window.center.currentWidget() is window.welcome
    boxes[0].close()


# --- settings and storage -----------------------------------------------------


@pytest.mark.parametrize("damage", ["not a gguf", "truncated", "context too large"])
def test_a_failed_load_keeps_the_model_there_was(qtbot, make_window, tmp_path, damage):
    window = make_window()
    send(qtbot, window, "one")
    before = window.model_info
    assert before is not None
    if damage == "context too large":
        # Beyond the tiny model's 32,768 trained tokens: llama.cpp is never
        # asked, the engine refuses, and the model comes back as it was.
        prefs = window.prefs
        window.apply_preferences(
            replace(prefs, backend=replace(prefs.backend, n_ctx=65536))
        )
    else:
        bad = tmp_path / "bad.gguf"
        whole = make_window.tiny_model.read_bytes()
        bad.write_bytes(
            b"not a model" if damage == "not a gguf" else whole[: len(whole) // 2]
        )
        window.presenter.load_model(bad)
    wait_idle(qtbot, window)
    boxes = _error_boxes()
    assert len(boxes) == 1 and boxes[0].text() == "Could not load the model"
    boxes[0].close()
    assert window.model_info == before
    assert window.center.currentWidget() is window.chat_page
    assert window.status.model_label.text() != ""
    # The settings it runs with are the saved ones again.
    assert load_preferences(window.db).backend.n_ctx == before.n_ctx
    # The engine still has it: the chat goes on.
    window.activateWindow()  # the message box had the focus; shortcuts need it
    qtbot.waitUntil(window.isActiveWindow, timeout=WAIT_MS)
    send(qtbot, window, "two")
    assert [c.text for c in window.transcript.cards][2] == "two"
    assert window.transcript.cards[-1].text


def test_a_failed_load_whose_previous_model_is_gone_says_so(
    qtbot, make_window, tmp_path
):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(make_window.tiny_model.read_bytes())
    window = make_window(model=copy)
    assert window.model_info is not None
    copy.unlink()  # the loaded model's file is gone: it cannot come back
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(make_window.tiny_model.read_bytes()[:4096])
    window.presenter.load_model(bad)
    wait_idle(qtbot, window)
    (box,) = _error_boxes()
    assert "could not be loaded again either" in box.informativeText()
    box.close()
    assert window.model_info is None
    assert window.center.currentWidget() is window.welcome


def test_settings_dialog_validates_inline_and_persists(qtbot, make_window):
    window = make_window()
    dialog = SettingsDialog(window.prefs, gpu_supported=False, parent=window)
    qtbot.addWidget(dialog)
    assert not dialog.gpu_layers.isEnabled()
    assert dialog.gpu_layers.toolTip() == NO_GPU_EXPLANATION

    dialog.kv_type.setCurrentText("q8_0")
    dialog.flash_attn.setChecked(False)
    dialog._on_buttons_accepted()
    assert dialog.result() == 0 and "flash attention" in dialog.error_label.text()

    dialog.kv_type.setCurrentText("f16")
    chosen = dialog.model_combo.currentText()
    dialog.model_combo.setCurrentText("/nowhere/model.gguf")
    dialog._on_buttons_accepted()
    assert dialog.result() == 0
    assert "no file at /nowhere/model.gguf" in dialog.error_label.text()
    dialog.model_combo.setCurrentText(chosen)

    dialog.n_ctx.setValue(1024)
    dialog.sampling_form.temperature.setValue(0.3)
    dialog.sampling_form.seed.setValue(42)
    dialog.system_prompt.setPlainText("Be brief.")
    dialog._on_buttons_accepted()
    assert dialog.result() == SettingsDialog.DialogCode.Accepted
    window.apply_preferences(dialog.preferences())
    wait_idle(qtbot, window)  # the model reloads with the new context size

    stored = load_preferences(window.db)
    assert (
        stored.backend.n_ctx == 1024
        and stored.sampling.temperature == pytest.approx(0.3)
    )
    assert stored.sampling.seed == 42 and stored.system_prompt == "Be brief."
    assert window.status.context_label.text().endswith(" / 1,024")


def test_gpu_layers_are_editable_when_the_build_supports_a_gpu(qtbot, make_window):
    window = make_window(model=None)
    dialog = SettingsDialog(window.prefs, gpu_supported=True, parent=window)
    qtbot.addWidget(dialog)
    assert dialog.gpu_layers.isEnabled()


def test_storage_dialog_evicts_and_clears_checkpoints_without_losing_messages(
    qtbot, make_window, monkeypatch
):
    window = make_window()
    send(qtbot, window, "one")
    send(qtbot, window, "two")
    texts = [c.text for c in window.transcript.cards]
    dialog = StorageDialog(window.db, window.engine, 2048, window)
    qtbot.addWidget(dialog)
    assert str(window.db.path) in [
        label.text() for label in dialog.findChildren(type(dialog.total_label))
    ]
    total = checkpoint_rows.total_checkpoint_bytes(window.db)
    assert total > 0 and dialog.table.rowCount() == 1

    # The worker evicts and clears; the buttons wait for it.
    dialog.budget.setValue(1)  # 1 MB: bigger than everything, nothing to evict
    qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    assert dialog.working and not dialog.clear_button.isEnabled()
    qtbot.waitUntil(lambda: not dialog.working, timeout=WAIT_MS)
    assert checkpoint_rows.total_checkpoint_bytes(window.db) == total

    monkeypatch.setattr("app.qt.views.dialogs.storage.confirm", lambda *_: True)
    qtbot.mouseClick(dialog.clear_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not dialog.working, timeout=WAIT_MS)
    assert checkpoint_rows.total_checkpoint_bytes(window.db) == 0
    assert dialog.total_label.text() == "0 B" and dialog.clear_button.isEnabled()
    # The window's tree shows it too, read again when the job was done.
    snapshot = window.presenter.snapshot
    assert all(n.checkpoint_bytes == 0 for n in snapshot.nodes.values())
    dialog.close()

    # Every message is still there; going back reprocesses instead of restoring.
    first_reply = window.transcript.cards[1].node_id
    window.activate(first_reply)
    wait_idle(qtbot, window)
    assert [c.text for c in window.transcript.cards] == texts[:2]
    assert window.status.restore_label.detail().startswith("kept ")  # still in memory
    window.close()
    again = make_window()
    assert again.status.restore_label.detail().startswith("reprocessed ")


def test_closing_the_storage_dialog_saves_the_budget_only_if_it_changed(
    qtbot, make_window, monkeypatch
):
    from app import jobs

    window = make_window()
    submitted = []
    monkeypatch.setattr(window.engine, "submit", submitted.append)
    chosen = iter((window.prefs.checkpoint_budget_mb, 123))

    def exec_(dialog: StorageDialog) -> int:
        dialog.budget.setValue(next(chosen))
        return 0

    monkeypatch.setattr(StorageDialog, "exec", exec_)
    window.open_storage()
    assert submitted == []
    window.open_storage()
    assert [type(job) for job in submitted] == [jobs.SavePreferences]
    assert submitted[0].prefs.checkpoint_budget_mb == 123


def test_a_reply_evicts_checkpoints_beyond_the_budget_and_keeps_every_message(
    qtbot, make_window
):
    from app import jobs

    window = make_window()
    send(qtbot, window, "one")
    assert checkpoint_rows.total_checkpoint_bytes(window.db) > 0
    results = []
    window.engine.finished.connect(results.append)
    window.engine.submit(
        jobs.Send(window.active_id, "two", window.prefs.sampling, budget_bytes=1)
    )
    wait_idle(qtbot, window)
    replied = next(r for r in results if isinstance(r.job, jobs.Send))
    assert replied.evicted_bytes > 0
    assert checkpoint_rows.total_checkpoint_bytes(window.db) <= 1
    path = node_rows.get_path(window.db, replied.node_id)
    assert [n.text for n in path][1:4:2] == ["one", "two"]


# --- keyboard shortcuts -------------------------------------------------------


def test_shortcuts_are_shown_in_the_menus(make_window):
    window = make_window(model=None)
    shortcuts = {
        a.text().replace("&", ""): a.shortcut().toString() for a in window.actions()
    }
    assert shortcuts["New conversation"] == "Ctrl+N"
    assert shortcuts["Send"] == "Ctrl+Return"
    assert shortcuts["Stop generating"] == "Esc"
    assert shortcuts["Settings…"] == "Ctrl+,"


def test_fatal_startup_error_is_a_dialog_not_a_traceback(monkeypatch, tmp_path, qtbot):
    from app.qt import gui

    monkeypatch.delenv("QT_NO_GUI_THREADPOOL", raising=False)
    shown = []
    monkeypatch.setattr(
        gui.QMessageBox, "critical", lambda _p, title, text: shown.append((title, text))
    )
    monkeypatch.setattr(gui, "install_excepthook", lambda: None)
    monkeypatch.setattr(gui, "init_faulthandler", lambda _d: None)
    monkeypatch.setattr(gui, "init_logging", lambda _d, _v: None)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "arbor.sqlite3").write_bytes(b"garbage, not sqlite" * 100)
    assert gui.run_gui(folder, None) == 1
    assert shown and "arbor.sqlite3" in shown[0][1]
    # Before anything painted, Qt's GUI thread pool was switched off (see
    # gui.keep_painting_on_the_gui_thread).
    assert os.environ["QT_NO_GUI_THREADPOOL"] == "1"


def test_unexpected_errors_open_the_crash_dialog(qtbot):
    import sys

    from app.qt.views.dialogs.crash import CrashDialog, install_excepthook

    previous = sys.excepthook
    install_excepthook()
    try:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            sys.excepthook(*sys.exc_info())
    finally:
        sys.excepthook = previous
    dialogs = [w for w in QApplication.topLevelWidgets() if isinstance(w, CrashDialog)]
    assert dialogs and "RuntimeError: boom" in dialogs[0].details.toPlainText()
    dialogs[0]._on_copy_clicked()
    assert "boom" in QApplication.clipboard().text()
    dialogs[0].close()


def test_screenshot_tool_renders_a_branched_conversation(tmp_path, qtbot, tiny_model):
    from tools.screenshot import main

    out = tmp_path / "shot.png"
    assert (
        main(["--model", str(tiny_model), "--out", str(out), "--max-tokens", "24"]) == 0
    )
    assert out.stat().st_size > 20_000


def test_arbor_without_a_subcommand_opens_the_window():
    from app.__main__ import wants_window

    assert wants_window([])
    assert wants_window(["--data-dir", "/tmp/x", "--model", "m.gguf"])
    assert not wants_window(["list"])
    assert not wants_window(["--data-dir", "/tmp/x", "send", "1", "hi"])
    assert not wants_window(["--help"])
    assert not wants_window(["--no-such-flag"])
