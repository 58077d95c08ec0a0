"""The status bar's context meter: how full the branch's context is."""

from __future__ import annotations

from dataclasses import replace

from app.qt.views.chrome.status_bar import context_level
from tests.ui.conftest import send, wait_idle


def test_levels():
    assert context_level(0, 256) == "ok"
    assert context_level(204, 256) == "ok"
    assert context_level(205, 256) == "warn"
    assert context_level(244, 256) == "full"
    assert context_level(5, 0) == "ok"


def test_the_meter_fills_as_the_branch_grows_and_warns_at_the_end(qtbot, make_window):
    window = make_window()
    window.apply_preferences(
        replace(
            window.prefs,
            backend=replace(window.prefs.backend, n_ctx=256),
            sampling=replace(window.prefs.sampling, max_tokens=400),
        )
    )
    wait_idle(qtbot, window)
    meter = window.status.context_meter
    send(qtbot, window, "hi")  # the tiny model talks until the context ends

    assert meter.isVisibleTo(window) and meter.maximum() == 256
    assert meter.value() >= 244
    assert meter.property("level") == "full"
    assert window.status.context_label.text().endswith("/ 256 — full")
    assert "Branch from an earlier message" in meter.toolTip()

    # An earlier node is a fork in the road: the meter follows the branch.
    window.activate(window.tree_model.snapshot.root_id)
    wait_idle(qtbot, window)
    assert meter.value() < 100 and meter.property("level") == "ok"
