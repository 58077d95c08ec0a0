"""A narrow or scaled window (issue 41): the side panels give way to the
transcript and come back, the View menu says what is shown; Settings' tabs keep
their texts whole; every menu's mnemonics are unique; the model file is named,
not spelt out."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import QApplication, QLabel, QMenu, QScrollArea

from app.qt.views.chrome.window_layout import READING_CHARS, PanelSplitter
from app.qt.views.dialogs.settings import SettingsDialog
from tests.ui.conftest import send, wait_idle

# A 1440x900 screen at 200 %, in logical pixels.
SMALL = QSize(720, 450)


def settle(qtbot) -> None:
    """Let the layouts (posted events) run."""
    for _ in range(3):
        QApplication.processEvents()
        qtbot.wait(10)


def shown(window) -> tuple[bool, bool]:
    """Whether the list and the tree are shown."""
    return window.sidebar.isVisibleTo(window), window.tree_panel.isVisibleTo(window)


def checked(window) -> tuple[bool, bool]:
    """Whether View → Show conversation list / tree are checked."""
    return window.list_action.isChecked(), window.tree_action.isChecked()


def centre_width(window) -> int:
    return window.splitter.widget(PanelSplitter.CENTER).width()


def test_the_side_panels_give_way_to_the_transcript_and_come_back(qtbot, make_window):
    window = make_window()
    splitter = window.splitter
    window.resize(1280, 800)
    settle(qtbot)
    assert shown(window) == (True, True) and checked(window) == (True, True)
    # On a 1440x900 screen at 200 %: the tree gives way; the transcript keeps
    # at least its reading width (326 px beside both panels before).
    window.resize(SMALL)
    settle(qtbot)
    assert shown(window) == (True, False) and checked(window) == (True, False)
    assert centre_width(window) >= splitter.reading_least
    assert splitter.reading_least >= READING_CHARS * 5
    # Narrower still: the list too.
    window.resize(480, 450)
    settle(qtbot)
    assert shown(window) == (False, False) and checked(window) == (False, False)
    # Wider again: both back, in the other order.
    window.resize(SMALL)
    settle(qtbot)
    assert shown(window) == (True, False)
    window.resize(1280, 800)
    settle(qtbot)
    assert shown(window) == (True, True) and checked(window) == (True, True)
    wait_idle(qtbot, window)


def test_the_view_menu_brings_a_panel_back_and_the_users_choice_stays(
    qtbot, make_window
):
    window = make_window()
    window.resize(SMALL)
    settle(qtbot)
    assert shown(window) == (True, False)
    # Ctrl+T: the tree is shown, the list gives way to it.
    window.tree_action.trigger()
    settle(qtbot)
    assert shown(window) == (False, True) and checked(window) == (False, True)
    assert centre_width(window) >= window.splitter.reading_least
    # Focus conversation tree (which shows it itself) keeps it too.
    window.focus_tree_action.trigger()
    settle(qtbot)
    assert shown(window) == (False, True)
    # Hidden by the user, a panel stays hidden in a wide window.
    window.tree_action.trigger()
    window.resize(1400, 800)
    settle(qtbot)
    assert shown(window) == (True, False) and checked(window) == (True, False)
    window.tree_action.trigger()
    settle(qtbot)
    assert shown(window) == (True, True)
    window.list_action.trigger()
    settle(qtbot)
    assert shown(window) == (False, True) and checked(window) == (False, True)
    window.list_action.trigger()
    settle(qtbot)
    assert shown(window) == (True, True)
    wait_idle(qtbot, window)


def test_larger_text_needs_a_wider_transcript(qtbot, make_window):
    window = make_window()
    window.resize(1100, 700)
    settle(qtbot)
    assert shown(window) == (True, True)
    at_100 = window.splitter.reading_least
    window.zoom.set_scale(200)
    settle(qtbot)
    assert window.splitter.reading_least >= 1.8 * at_100
    assert shown(window) == (True, False)
    window.zoom.set_scale(100)
    settle(qtbot)
    assert shown(window) == (True, True)
    wait_idle(qtbot, window)


def mnemonic(text: str) -> str | None:
    """The letter after a single ``&`` (``&&`` is a literal ampersand)."""
    at = text.replace("&&", "").find("&")
    return text.replace("&&", "")[at + 1].lower() if at >= 0 else None


def test_every_menu_has_unique_mnemonics(qtbot, make_window):
    window = make_window(wait=False)

    def check(title: str, actions) -> None:
        letters: dict[str, str] = {}
        for action in actions:
            if action.isSeparator():
                continue
            letter = mnemonic(action.text())
            assert letter is not None, f"{title}: {action.text()!r} has none"
            assert letter not in letters, (
                f"{title}: {action.text()!r} and {letters[letter]!r} share &{letter}"
            )
            letters[letter] = action.text()
            if action.menu() is not None:
                check(action.text(), action.menu().actions())

    bar = window.menuBar()
    check("the menu bar", bar.actions())
    assert len(bar.findChildren(QMenu)) >= 6
    # Tools: Settings on S, Storage on t (not S as well).
    tools = next(a.menu() for a in bar.actions() if a.text() == "&Tools")
    assert [mnemonic(a.text()) for a in tools.actions()] == ["s", "t", "l"]
    wait_idle(qtbot, window)


def test_settings_tabs_keep_their_texts_whole_on_a_small_screen(qtbot, make_window):
    window = make_window()
    dialog = SettingsDialog(window.prefs, False, window, loaded=window.model_info)
    qtbot.addWidget(dialog)
    # The dialog on a 720x450 screen (a 1440x900 one at 200 %).
    dialog.resize(520, 380)
    dialog.show()
    for index in range(dialog.tabs.count()):
        dialog.tabs.setCurrentIndex(index)
        settle(qtbot)
        scroll = dialog.tabs.widget(index)
        assert isinstance(scroll, QScrollArea)
        assert not scroll.horizontalScrollBar().isVisible()
        page = dialog.page(index)
        assert page.width() <= scroll.viewport().width()
        for label in page.findChildren(QLabel):
            if not label.isVisibleTo(page) or not label.wordWrap():
                continue
            # Whole: as tall as its text needs at its width, and no wider
            # than the page.
            name = dialog.tabs.tabText(index), label.text()[:40]
            assert label.height() >= label.heightForWidth(label.width()), name
            assert label.geometry().right() <= page.width(), name
    # The Workers tab's warning, to its last word.
    dialog.show_page(dialog.workers_tab)
    settle(qtbot)
    [intro] = [
        label
        for label in dialog.workers_tab.findChildren(QLabel)
        if "no encryption" in label.text()
    ]
    assert intro.height() >= intro.heightForWidth(intro.width())
    dialog.close()
    wait_idle(qtbot, window)


def test_settings_names_the_model_file_and_keeps_its_path(qtbot, make_window, tmp_path):
    window = make_window()
    path = window.model_info.path
    dialog = SettingsDialog(window.prefs, False, window, loaded=window.model_info)
    qtbot.addWidget(dialog)
    combo = dialog.model_combo
    assert combo.currentText() == "tiny.gguf"
    assert combo.toolTip() == path
    assert combo.itemData(combo.currentIndex(), Qt.ItemDataRole.ToolTipRole) == path
    assert dialog.model_path() == path
    # A path typed in is taken as it is.
    other = tmp_path / "elsewhere" / "tiny.gguf"
    combo.setCurrentText(str(other))
    assert dialog.model_path() == str(other)
    # The same name from another folder is told apart by its folder.
    other.parent.mkdir()
    other.write_bytes(b"GGUF")
    index = dialog._add_model(str(other))
    assert combo.itemText(index) == f"tiny.gguf ({other.parent})"
    combo.setCurrentIndex(index)
    assert dialog.model_path() == str(other)
    dialog.close()
    wait_idle(qtbot, window)


def test_a_panel_changes_once_as_the_window_is_resized_across(qtbot, make_window):
    window = make_window()
    window.resize(1000, 600)
    settle(qtbot)
    for widths in (range(1000, 640, -6), range(640, 1000, 6)):
        seen = []
        for width in widths:
            window.resize(width, 600)
            settle(qtbot)
            seen.append(shown(window))
            # Whatever is shown leaves the transcript its reading width.
            if any(seen[-1]):
                assert centre_width(window) >= window.splitter.reading_least, width
        changes = [i for i in range(1, len(seen)) if seen[i] != seen[i - 1]]
        assert len(changes) == 1, seen  # the tree, once
    assert shown(window) == (True, True)
    wait_idle(qtbot, window)


def test_focus_conversation_tree_brings_back_a_tree_that_gave_way(qtbot, make_window):
    window = make_window()
    window.resize(SMALL)
    settle(qtbot)
    assert not window.tree_panel.isVisibleTo(window)
    qtbot.keyClick(
        window.composer.edit,
        Qt.Key.Key_T,
        Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier,
    )
    settle(qtbot)
    assert shown(window) == (False, True) and checked(window) == (False, True)
    assert window.tree_panel.view.hasFocus()
    wait_idle(qtbot, window)


def test_tab_after_send_lands_on_something_in_sight(qtbot, make_window):
    window = make_window()
    for n in range(4):
        send(qtbot, window, f"question {n} " + "and more words " * 12)
    settle(qtbot)
    send_button = window.composer.send_button
    send_button.setFocus()
    # Every stop from Send on, until back in the composer, is in sight.
    for _ in range(8):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        settle(qtbot)
        focused = QApplication.focusWidget()
        if window.composer.isAncestorOf(focused):
            break
        assert not focused.visibleRegion().isEmpty(), focused.objectName()
    wait_idle(qtbot, window)
