"""On the starter model with nothing else installed, a bar offers the
recommended model that fits, beside the starter: nothing downloads without a
click, the download shows there, and "Use …" switches to it.

Real widgets (offscreen), the real starter model, the real library and the
Hub server on 127.0.0.1 serving the tiny GGUF under the offered file's name.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from app.library.catalog import load_catalog
from app.platform.starter_model import starter_model_path
from app.qt.views.library.welcome import welcome_offer
from tests.helpers.fake_hub import FakeHub, HubServer
from tests.ui.conftest import WAIT_MS, wait_idle


@pytest.fixture
def offered(make_window):
    entry = welcome_offer(load_catalog(), 4096)
    if entry is None:
        pytest.skip("no recommended model fits this machine")
    return entry


@pytest.fixture
def hub(tiny_model: Path, offered) -> Iterator[HubServer]:
    fake = FakeHub()
    fake.add(offered.repo, {offered.file: tiny_model})
    with HubServer(fake) as server:
        yield server


@pytest.mark.starter
def test_the_starter_offers_the_recommended_model(qtbot, make_window, hub, offered):
    assert starter_model_path() is not None, "make test installs the starter"
    window = make_window(model=None, hub_endpoint=hub.url)  # the starter loads
    wait_idle(qtbot, window)
    bar = window.starter_offer
    assert window.model_info.path == str(starter_model_path())
    assert bar.isVisible()
    assert bar.offer_button.text().startswith(f"Download {offered.name} (")
    assert hub.hub.downloads == []  # nothing without a click

    qtbot.mouseClick(bar.offer_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: bar.offer_button.text() == f"Use {offered.name}", timeout=WAIT_MS
    )
    # Downloaded, not loaded behind the chat's back.
    assert window.model_info.path == str(starter_model_path())
    qtbot.mouseClick(bar.offer_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, window)
    assert Path(window.model_info.path).name == offered.file
    assert not bar.isVisible()


@pytest.mark.starter
def test_not_now_hides_the_offer(qtbot, make_window, hub):
    window = make_window(model=None, hub_endpoint=hub.url)
    wait_idle(qtbot, window)
    bar = window.starter_offer
    assert bar.isVisible()
    qtbot.mouseClick(bar.dismiss_button, Qt.MouseButton.LeftButton)
    assert not bar.isVisible()
    window.download_status.offer()  # a later refresh does not bring it back
    assert not bar.isVisible()


def test_no_offer_beside_another_model(qtbot, make_window, hub):
    window = make_window(hub_endpoint=hub.url)  # the tiny model
    wait_idle(qtbot, window)
    assert not window.starter_offer.isVisible()
