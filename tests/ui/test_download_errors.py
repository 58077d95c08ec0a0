"""A failed download offers what helps (issue 41): Try again where a new try
can work (the network, a first checksum mismatch), Remove always, and no
Resume after a 404, nor after a second checksum mismatch.

Real parts: ``DownloadController`` and its download thread, ``pull`` through
``huggingface_hub``, the Hub stand-in of ``tests/helpers/fake_hub.py`` on
127.0.0.1, and the Downloads panel's rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.library.catalog import shipped_catalog
from app.library.download import STALL_ENV
from app.library.installed import ModelLibrary
from app.qt.views.library.downloads import DownloadsPanel
from app.qt.workers.download_worker import FAILED, DownloadController
from tests.helpers.fake_hub import FakeHub, HubServer
from tests.ui.conftest import WAIT_MS

LEFT = Qt.MouseButton.LeftButton
REPO = "arbor/tiny-GGUF"
FILE = "tiny-Q8_0.gguf"
BAD = ("arbor/bad-GGUF", "bad-Q8_0.gguf")


@pytest.fixture
def hub(tiny_model: Path) -> Iterator[HubServer]:
    """The tiny model, and a repository whose file is not what it says."""
    fake = FakeHub()
    fake.add(REPO, {FILE: tiny_model})
    bad = fake.add(BAD[0], {BAD[1]: tiny_model})
    bad.files[BAD[1]].sha256 = "0" * 64
    with HubServer(fake) as server:
        yield server


@pytest.fixture
def panel(qtbot, data_dir: Path, hub: HubServer) -> Iterator[DownloadsPanel]:
    """The Downloads panel of a controller downloading from ``hub``."""
    library = ModelLibrary(data_dir, None, shipped_catalog())
    controller = DownloadController(library, endpoint=hub.url)
    panel = DownloadsPanel(controller)
    qtbot.addWidget(panel)
    panel.show()
    yield panel
    controller.shut_down()


def _fail(qtbot, panel: DownloadsPanel, repo: str, filename: str) -> str:
    controller = panel._controller
    with qtbot.waitSignal(controller.download_failed, timeout=WAIT_MS) as failed:
        key = controller.download(repo, (filename,), "Tiny")
    assert failed.args[0] == key
    state = controller.state(key)
    assert state is not None and state.status == FAILED
    return key


def test_a_missing_file_offers_remove_not_resume(qtbot, panel, hub):
    key = _fail(qtbot, panel, REPO, "gone-Q4_0.gguf")
    row = panel.rows[key]
    assert "no such file" in row.detail_label.text()
    # Asking again would get the same 404.
    assert not row.pause_button.isVisible()
    assert row.cancel_button.isVisible() and row.cancel_button.text() == "Remove"
    with qtbot.waitSignal(panel._controller.download_stopped, timeout=WAIT_MS):
        qtbot.mouseClick(row.cancel_button, LEFT)
    assert key not in panel.rows and panel._controller.state(key) is None


def test_a_second_checksum_mismatch_offers_no_more_tries(qtbot, panel, hub):
    key = _fail(qtbot, panel, *BAD)
    row = panel.rows[key]
    assert "does not match its sha256" in row.detail_label.text()
    # Bytes spoilt on the way may be the cause: one more try, from scratch.
    assert row.pause_button.isVisible() and row.pause_button.text() == "Try again"
    assert row.cancel_button.text() == "Remove"
    controller = panel._controller
    with qtbot.waitSignal(controller.download_failed, timeout=WAIT_MS):
        qtbot.mouseClick(row.pause_button, LEFT)
    assert len(hub.hub.downloads) == 2  # fetched again, whole
    # The same file twice: it is the Hub's, and a third try would be the same.
    assert "does not match its sha256" in row.detail_label.text()
    assert not row.pause_button.isVisible()
    assert row.cancel_button.text() == "Remove"


def test_a_network_failure_offers_try_again(qtbot, data_dir, tiny_model, hub):
    library = ModelLibrary(data_dir, None, shipped_catalog())
    # A port nobody listens on: the network is down, for now.
    controller = DownloadController(library, endpoint="http://127.0.0.1:9")
    panel = DownloadsPanel(controller)
    qtbot.addWidget(panel)
    try:
        key = _fail(qtbot, panel, REPO, FILE)
        row = panel.rows[key]
        assert "cannot reach the Hub" in row.detail_label.text()
        assert not row.pause_button.isHidden()
        assert row.pause_button.text() == "Try again"
        assert row.cancel_button.text() == "Remove"
    finally:
        controller.shut_down()


def test_a_download_tried_again_after_a_failure_shows_pause_and_cancel(
    qtbot, panel, hub, monkeypatch
):
    # The Hub goes away mid-download; the download gives up after 2 s.
    monkeypatch.setenv(STALL_ENV, "2")
    hub.hub.cut_at = 1000
    key = _fail(qtbot, panel, REPO, FILE)
    row = panel.rows[key]
    assert row.pause_button.text() == "Try again"
    hub.hub.cut_at = None
    controller = panel._controller
    with qtbot.waitSignal(controller.download_finished, timeout=WAIT_MS):
        qtbot.mouseClick(row.pause_button, LEFT)
        # Under way again: Pause and Cancel, as for any download.
        assert row.pause_button.text() == "Pause"
        assert row.cancel_button.text() == "Cancel"
    assert row.load_button.isVisible() and not row.pause_button.isVisible()
