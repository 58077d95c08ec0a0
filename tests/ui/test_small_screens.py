"""Small and scaled screens: the window fits 720x450 logical pixels (a 1440x900
screen at 200 %) whatever the status bar says, and never widens itself when a
status text grows (issue 22)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from PySide6.QtCore import QSize
from PySide6.QtWidgets import QApplication

from tests.ui.conftest import wait_idle

# A 1440x900 screen at 200 %, in logical pixels.
SMALL = QSize(720, 450)

LONG_MODEL = "/models/Qwen3-30B-A3B-Instruct-2507-UD-Q4_K_XL-imatrix-long-name.gguf"
LONG_BUSY = "Reading the branch to summarize… 12,345 of 23,456 tokens"
LONG_DOWNLOAD = (
    "Downloading Qwen3 30B A3B Instruct 2507 — 12.3 GB of 17.7 GB, "
    "45.2 MB/s, about 2 minutes left (+3 queued)"
)


@dataclass
class Figures:
    """A restore and a reply with every figure large (``ReplyFigures``)."""

    kept_tokens: int = 0
    restored_tokens: int = 12_812
    reprocessed_tokens: int = 3_456
    restore_ms: float = 1_006
    reprocess_ms: float = 2_345
    tokens_per_second: float = 12_345.6
    context_tokens: int = 3_600
    n_ctx: int = 4_096


def fill_status(window, longer: int = 1) -> None:
    """Show every status text the bar has, each long (``longer`` times)."""
    status = window.status
    status.set_busy(LONG_BUSY * longer)
    status.set_download(LONG_DOWNLOAD * longer)
    status.set_model(
        replace(
            window.model_info,
            path=LONG_MODEL.replace(".gguf", "-more" * 8 * longer + ".gguf"),
            chat_format="chatml",
            offloaded_layers=20,
            offloadable_layers=49,
        )
    )
    status.set_context(3_600, 4_096)  # nearly full: the longest
    status.set_restore(Figures())
    status.set_speed(Figures().tokens_per_second * longer)


def settle(qtbot) -> None:
    """Let the layouts (posted events) run."""
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(10)


def assert_fits(window) -> None:
    hint, minimum = window.minimumSizeHint(), window.minimumSize()
    for size in (hint, minimum):
        assert size.width() <= SMALL.width(), (hint, minimum)
        assert size.height() <= SMALL.height(), (hint, minimum)


def test_the_window_fits_a_small_screen_with_every_status_text_long(qtbot, make_window):
    window = make_window()
    fill_status(window)
    settle(qtbot)
    status = window.status
    labels = (
        status.busy_label,
        status.download_label,
        status.model_label,
        status.layers_label,
        status.context_label,
        status.restore_label,
        status.speed_label,
        status.chat_format_label,
    )
    assert all(label.isVisibleTo(window) for label in labels)
    assert status.busy_bar.isVisibleTo(window)
    assert_fits(window)
    # The welcome page (its text has a fixed width) scrolls, rather than
    # widening the window, and showing it resizes nothing.
    window.show_chat(False)
    settle(qtbot)
    assert_fits(window)
    window.show_chat(True)

    window.resize(SMALL)
    settle(qtbot)
    assert window.size() == SMALL
    # Every label keeps at least what it asks for: the status bar's texts
    # fit side by side even on this screen, ranked, none squeezed further.
    assert status.layout().totalMinimumSize().width() <= SMALL.width()
    for label in labels:
        assert label.width() >= label.minimumSizeHint().width(), label.objectName()
    # The busy state and the context keep their text longest.
    assert status.context_label.text() == "context 3,600 / 4,096 — nearly full"
    assert status.context_label.shown_text().startswith("context 3,600 / 4,096")
    assert status.busy_label.shown_text().startswith("Reading the")
    assert len(status.busy_label.shown_text()) > len(status.restore_label.shown_text())
    # The chat page is not squeezed below what it needs: nothing scrolls,
    # not even with a reasoning box beside the composer's hint (below it, here).
    scroll = window.splitter.widget(1)
    assert not scroll.horizontalScrollBar().isVisible()
    assert not scroll.verticalScrollBar().isVisible()
    window.composer.set_reasoning_choices(("low", "medium", "high"), "medium")
    settle(qtbot)
    assert window.composer.reasoning_box.isVisibleTo(window)
    assert window.size() == SMALL
    assert not scroll.horizontalScrollBar().isVisible()
    assert not scroll.verticalScrollBar().isVisible()
    wait_idle(qtbot, window)


def test_a_longer_status_text_does_not_widen_the_window(qtbot, make_window):
    window = make_window()
    window.resize(SMALL)
    settle(qtbot)
    assert window.width() == SMALL.width()
    fill_status(window)
    settle(qtbot)
    assert window.width() == SMALL.width()
    fill_status(window, longer=3)
    settle(qtbot)
    assert window.width() == SMALL.width()
    # Nor from a roomier window: it keeps the width the user gave it.
    window.resize(1000, 600)
    settle(qtbot)
    fill_status(window, longer=6)
    settle(qtbot)
    assert window.width() == 1000
    wait_idle(qtbot, window)


def test_an_elided_status_text_is_whole_in_its_tooltip(qtbot, make_window):
    window = make_window()
    window.resize(SMALL)
    fill_status(window)
    settle(qtbot)
    status = window.status

    restore = status.restore_label
    full = restore.text()
    assert full.startswith("Read 3,456 tokens")
    assert restore.is_elided() and restore.shown_text().endswith("…")
    assert full in restore.toolTip()
    assert "restored 12,812 tokens from checkpoints" in restore.toolTip()

    # A label with an explanation of its own keeps it below the whole text.
    model = status.model_label
    assert model.is_elided()
    assert model.text() in model.toolTip()
    assert "state:" in model.toolTip() and "-more-more" in model.toolTip()
    note = status.chat_format_label
    assert note.is_elided()
    assert note.text() in note.toolTip() and "worse" in note.toolTip()

    # Given room again, the text is whole and the tooltip just explains.
    window.resize(6000, 600)
    settle(qtbot)
    assert not model.is_elided()
    assert model.toolTip() == model.detail()
    assert model.toolTip().startswith("/models/Qwen3")
    wait_idle(qtbot, window)


def test_the_dialogs_fit_the_screen(qtbot, make_window):
    window = make_window()
    room = window.screen().availableSize()
    assert window.width() <= room.width() and window.height() <= room.height()
    window.open_models()
    dialog = window._models_dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.width() <= room.width() and dialog.height() <= room.height()
    dialog.hide()
    wait_idle(qtbot, window)


@pytest.mark.parametrize("which", ["starter_offer", "model_offer"])
def test_offer_bars_stack_their_buttons_rather_than_widen_the_window(
    qtbot, make_window, which
):
    window = make_window()
    if which == "starter_offer":
        window.starter_offer.set_offer(
            "Download Qwen2.5 1.5B Instruct (1.1 GB)", "A better model for you."
        )
        window.starter_offer.show()
    else:
        long_name = "/models/" + "A-Very-Long-Model-Name-" * 3 + "Q4_K_M.gguf"
        window.model_offer.offer(long_name, window.model_info.path)
    bar = getattr(window, which)
    assert bar.isVisible()
    window.resize(SMALL)
    settle(qtbot)
    assert_fits(window)
    assert window.width() == SMALL.width()
    row = bar.buttons
    # One under the other where too narrow for them side by side; each whole.
    assert row.stacked == (row.width() < row.sizeHint().width())
    for button in row._visible():
        assert button.width() >= button.sizeHint().width()
        assert button.height() >= button.sizeHint().height()
        assert row.rect().contains(button.geometry())
    if which == "model_offer":
        assert row.stacked  # its buttons name models: too wide for a row here
    # With room again they stand side by side.
    window.resize(1800, 900)
    settle(qtbot)
    assert not row.stacked
