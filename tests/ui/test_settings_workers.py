"""Settings → Workers (issue 25): each worker's status, devices and free
memory, checked in a child process; the list kept in the preferences with
Use workers on or off and the split, by free memory or by hand; OK restarts
the engine on the workers in use.

The workers are real ``arbor worker`` processes on 127.0.0.1. A model is
never loaded on one here: registering a worker in this process would tie
it to that worker for its life (``rpc_client``), so the LoadModel that asks
for workers is caught on its way to the engine, and only it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QSpinBox

from app import jobs
from app.backend.settings import BackendSettings
from app.backend.values import LayerHolder
from app.preferences import Preferences, WorkerPrefs, load_preferences
from app.qt.views.chrome.main_window import MainWindow
from app.qt.views.dialogs.settings import SettingsDialog
from app.qt.views.dialogs.workers_tab import (
    IN_USE,
    LAYERS,
    MEMORY,
    STATUS,
    WorkersTab,
)
from tests.helpers.workers import free_port, running_worker
from tests.ui.conftest import WAIT_MS, wait_idle


@pytest.fixture(scope="module")
def worker() -> Iterator[str]:
    """A worker serving this machine's CPU: its address."""
    address = f"127.0.0.1:{free_port()}"
    with running_worker(address):
        yield address


def _settings(qtbot, prefs: Preferences, window: MainWindow | None = None):
    dialog = SettingsDialog(
        prefs, False, window, loaded=window.model_info if window else None
    )
    qtbot.addWidget(dialog)
    return dialog


def _press_ok(qtbot, dialog: SettingsDialog) -> None:
    ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)


def _add(qtbot, tab: WorkersTab, text: str) -> None:
    """Type ``text`` in the address field and press Enter."""
    tab.address_edit.setFocus()
    qtbot.keyClicks(tab.address_edit, text)
    qtbot.keyClick(tab.address_edit, Qt.Key.Key_Return)


def _loads_on_workers_caught(monkeypatch, window: MainWindow) -> list[jobs.Job]:
    """Every job the window submits from now on; those loading on workers
    stop here, the others go on to the engine."""
    submitted: list[jobs.Job] = []
    submit: Callable[[jobs.Job], None] = window.engine.submit

    def catch(job: jobs.Job) -> None:
        submitted.append(job)
        if not (isinstance(job, jobs.LoadModel) and job.settings.workers):
            submit(job)

    monkeypatch.setattr(window.engine, "submit", catch)
    return submitted


def test_each_worker_is_checked_when_the_tab_opens(qtbot, worker):
    nobody = f"127.0.0.1:{free_port()}"
    prefs = Preferences().with_workers(WorkerPrefs((worker, nobody)))
    dialog = _settings(qtbot, prefs)
    tab = dialog.workers_tab
    dialog.show()
    with qtbot.waitSignal(tab.checker.finished, timeout=WAIT_MS):
        dialog.show_page(tab)
    ready = tab.cells(worker)
    assert ready[STATUS] == "ready (RPC 7.0.0)"
    # Surveyed by the child: the worker's one device (this machine's CPU)
    # and its memory.
    assert ready[MEMORY].startswith("1 device: ")
    assert " free of " in ready[MEMORY]
    [device] = tab.device_lines(worker)
    assert device.startswith("device 0: ")
    # The only worker that answered gets every layer.
    assert ready[LAYERS] == "≈ 100 %"
    refused = tab.cells(nobody)
    assert refused[STATUS] == "nothing listens there"
    assert refused[MEMORY] == "—"
    # Selected, it tells why in full, with what to do.
    tab.table.setCurrentIndex(tab.model.index(1, 0))
    assert "connection refused" in tab.detail_label.text()
    assert f"arbor worker --listen HOST:{nobody.rpartition(':')[2]}" in (
        tab.detail_label.text()
    )


def test_an_address_is_checked_as_it_is_added_and_a_bad_one_refused(qtbot, worker):
    dialog = _settings(qtbot, Preferences())
    tab = dialog.workers_tab
    dialog.show()
    dialog.show_page(tab)
    with qtbot.waitSignal(tab.checker.finished, timeout=WAIT_MS):
        _add(qtbot, tab, f" {worker} ")
    assert tab.addresses() == (worker,)
    assert tab.cells(worker)[STATUS] == "ready (RPC 7.0.0)"
    assert tab.address_edit.text() == ""
    for text, says in [
        ("fe80::1:50052", "not by IPv6 address"),
        ("gpu-box", "HOST:PORT with a port of 1 to 65535"),
        (worker, "in the list already"),
    ]:
        tab.address_edit.clear()
        _add(qtbot, tab, text)
        assert tab.error_label.isVisible()
        assert says in tab.error_label.text()
        assert tab.addresses() == (worker,)
    # Enter added nothing, and did not press OK either.
    assert dialog.isVisible()
    # Typing again clears the message.
    qtbot.keyClicks(tab.address_edit, "x")
    assert not tab.error_label.isVisible()
    tab.table.setCurrentIndex(tab.model.index(0, 0))
    qtbot.mouseClick(tab.remove_button, Qt.MouseButton.LeftButton)
    assert tab.addresses() == ()


def test_ok_with_use_workers_restarts_the_engine_on_them_and_off_without(
    qtbot, make_window, monkeypatch, worker, tiny_model
):
    window = make_window()
    submitted = _loads_on_workers_caught(monkeypatch, window)
    dialog = _settings(qtbot, window.prefs, window)
    tab = dialog.workers_tab
    _add(qtbot, tab, worker)
    tab.use_workers.setChecked(True)
    _press_ok(qtbot, dialog)
    assert dialog.result() == SettingsDialog.DialogCode.Accepted
    window.apply_preferences(dialog.preferences())
    [load] = [job for job in submitted if isinstance(job, jobs.LoadModel)]
    assert load.settings.workers == (worker,)
    assert load.path == tiny_model
    wait_idle(qtbot, window)  # the preferences are saved by the engine thread
    stored = load_preferences(window.db)
    assert stored.workers == WorkerPrefs((worker,), use=True)
    assert stored.backend.workers == (worker,)

    # Use workers off: the list stays, the model loads on this computer.
    submitted.clear()
    dialog = _settings(qtbot, window.prefs, window)
    tab = dialog.workers_tab
    assert tab.use_workers.isChecked()
    assert tab.addresses() == (worker,)
    tab.use_workers.setChecked(False)
    _press_ok(qtbot, dialog)
    window.apply_preferences(dialog.preferences())
    [load] = [job for job in submitted if isinstance(job, jobs.LoadModel)]
    assert load.settings.workers == ()
    wait_idle(qtbot, window)
    assert window.model_info is not None
    assert window.model_info.layer_holders[0].device == "CPU"
    stored = load_preferences(window.db)
    assert stored.workers == WorkerPrefs((worker,), use=False)
    assert stored.backend.workers == ()


def test_editing_the_list_with_use_workers_off_reloads_nothing(
    qtbot, make_window, monkeypatch
):
    window = make_window()
    submitted = _loads_on_workers_caught(monkeypatch, window)
    nobody = f"127.0.0.1:{free_port()}"
    dialog = _settings(qtbot, window.prefs, window)
    _add(qtbot, dialog.workers_tab, nobody)
    _press_ok(qtbot, dialog)
    window.apply_preferences(dialog.preferences())
    wait_idle(qtbot, window)
    assert not [job for job in submitted if isinstance(job, jobs.LoadModel)]
    assert load_preferences(window.db).workers == WorkerPrefs((nobody,))


def test_use_workers_needs_a_worker_and_a_layer_for_it(qtbot):
    dialog = _settings(qtbot, Preferences())
    dialog.show()
    dialog.workers_tab.use_workers.setChecked(True)
    _press_ok(qtbot, dialog)
    assert dialog.isVisible()
    assert "no worker is listed" in dialog.error_label.text()
    # No layer offloaded (kept as it was: this computer has no GPU).
    prefs = replace(Preferences(), backend=BackendSettings(n_gpu_layers=0))
    dialog = _settings(qtbot, prefs.with_workers(WorkerPrefs(("10.0.0.2:50052",))))
    dialog.show()
    dialog.workers_tab.use_workers.setChecked(True)
    _press_ok(qtbot, dialog)
    assert dialog.isVisible()
    assert "at least one layer must go to them" in dialog.error_label.text()
    # Split by hand, with no layer for any worker.
    dialog = _settings(qtbot, Preferences())
    dialog.show()
    tab = dialog.workers_tab
    with qtbot.waitSignal(tab.checker.finished, timeout=WAIT_MS):
        _add(qtbot, tab, f"127.0.0.1:{free_port()}")
    tab.use_workers.setChecked(True)
    tab.split_by_hand.click()
    # No model loaded to share out: every count starts at 0.
    assert tab.layer_counts() == (0,)
    assert "give at least one worker a layer" in tab.split_label.text()
    _press_ok(qtbot, dialog)
    assert dialog.isVisible()
    assert "give at least one worker a layer" in dialog.error_label.text()


def _spins(tab: WorkersTab) -> list[QSpinBox]:
    """The spin boxes of the workers' layer counts, in the list's order."""
    spins = [
        tab.table.indexWidget(tab.model.index(row, LAYERS))
        for row in range(tab.model.rowCount())
    ]
    assert all(isinstance(spin, QSpinBox) for spin in spins), spins
    return spins


def _type(qtbot, spin: QSpinBox, text: str) -> None:
    spin.selectAll()
    qtbot.keyClicks(spin, text)


def test_a_split_by_hand_is_typed_per_worker_kept_and_loaded_with(
    qtbot, make_window, monkeypatch, worker
):
    window = make_window()
    assert window.model_info is not None
    assert window.model_info.offloadable_layers == 3
    submitted = _loads_on_workers_caught(monkeypatch, window)
    nobody = f"127.0.0.1:{free_port()}"
    dialog = _settings(qtbot, window.prefs, window)
    tab = dialog.workers_tab
    _add(qtbot, tab, worker)
    _add(qtbot, tab, nobody)
    tab.use_workers.setChecked(True)
    # Split by free memory: no count to type; the model's layers are told.
    assert tab.split_auto.isChecked()
    assert tab.table.indexWidget(tab.model.index(0, LAYERS)) is None
    assert tab.split_label.text() == (
        "The model loaded now has 3 layers: 0-1 and the output."
    )
    tab.split_by_hand.click()
    # A spin box per worker, starting from the layers shared evenly.
    first, second = _spins(tab)
    assert (first.value(), second.value()) == (2, 1)
    _type(qtbot, first, "1")
    assert tab.layer_counts() == (1, 1)
    assert tab.split_label.text().endswith(
        "The workers get 2; this computer keeps layer 0."
    )
    # More than the model has: said under the list, and OK refuses it.
    _type(qtbot, second, "3")
    assert "given 4 layers" in tab.split_label.text()
    _press_ok(qtbot, dialog)
    assert dialog.result() != SettingsDialog.DialogCode.Accepted
    assert "give them 3 or fewer" in dialog.error_label.text()
    _type(qtbot, second, "2")
    assert tab.split_label.text().endswith("Every layer goes to the workers.")
    _press_ok(qtbot, dialog)
    assert dialog.result() == SettingsDialog.DialogCode.Accepted
    window.apply_preferences(dialog.preferences())
    [load] = [job for job in submitted if isinstance(job, jobs.LoadModel)]
    assert load.settings.workers == (worker, nobody)
    assert load.settings.worker_layers == (1, 2)
    wait_idle(qtbot, window)
    stored = load_preferences(window.db)
    assert stored.workers == WorkerPrefs((worker, nobody), use=True, layers=(1, 2))
    assert stored.backend.worker_layers == (1, 2)

    # Opened again, the split is as typed; back to the split by free memory.
    submitted.clear()
    dialog = _settings(qtbot, window.prefs, window)
    tab = dialog.workers_tab
    assert tab.split_by_hand.isChecked()
    assert [spin.value() for spin in _spins(tab)] == [1, 2]
    tab.split_auto.click()
    assert tab.table.indexWidget(tab.model.index(0, LAYERS)) is None
    _press_ok(qtbot, dialog)
    window.apply_preferences(dialog.preferences())
    [load] = [job for job in submitted if isinstance(job, jobs.LoadModel)]
    assert load.settings.worker_layers == ()
    wait_idle(qtbot, window)
    assert load_preferences(window.db).workers.layers == ()


def test_the_workers_the_loaded_model_uses_show_its_layers_unchecked(
    qtbot, make_window
):
    window = make_window()
    info = window.model_info
    assert info is not None
    first, second = "10.0.0.2:50052", "10.0.0.3:50052"
    # What the engine reports after a load on two workers (the tiny model
    # has 2 layers; layer 2 is its output layer).
    on_workers = replace(
        info,
        layer_holders=(
            LayerHolder("RPC0", first, (0, 1), 1_000_000),
            LayerHolder("RPC1", second, (2,), 500_000),
        ),
        placement="3/3 layers offloaded (RPC0 1 MB, RPC1 0.5 MB)",
    )
    tab = WorkersTab(WorkerPrefs((first, second), use=True), on_workers)
    qtbot.addWidget(tab)
    # Each serves one client, this window's engine: asking would only wait.
    with qtbot.waitSignal(tab.checker.finished, timeout=WAIT_MS):
        tab.check()
    assert not tab.checker.running
    assert tab.cells(first)[STATUS] == IN_USE
    assert tab.cells(first)[LAYERS] == "0-1"
    assert tab.cells(second)[LAYERS] == "output"
    assert "3/3 layers offloaded" in tab.placement_label.text()
