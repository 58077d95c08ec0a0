"""The window's ``QAction``s and menus, made from the table in ``app.window.actions``.

Each row becomes ``window.<name>_action``; its handler is found on the window
(``w.presenter.regenerate_last``, ``w.open_settings``). Every action is also
added to the window itself, so shortcuts work with the menu bar hidden.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

from app.qt.views.chrome.window_layout import PanelSplitter
from app.qt.views.theme import icon
from app.window.actions import ACTIONS, MENUS, RECENT_MODELS, ActionSpec, ActionTarget

STANDARD_KEY = "Standard:"


def build_actions(
    window: QMainWindow, target: ActionTarget
) -> tuple[dict[str, QAction], QMenu]:
    """Make the actions and the menu bar of ``window``, whose handlers are
    found on ``target`` (the window itself).

    Returns the actions by name and the (empty) menu of recent models.
    """
    actions = {spec.name: _action(window, target, spec) for spec in ACTIONS}
    recent = QMenu("&Recent models", window)
    bar = window.menuBar()
    for title, entries in MENUS:
        menu = bar.addMenu(title)
        for entry in entries:
            if entry is None:
                menu.addSeparator()
            elif entry == RECENT_MODELS:
                menu.addMenu(recent)
            else:
                menu.addAction(actions[entry])
    actions["about"].setMenuRole(QAction.MenuRole.AboutRole)
    # The panels' toggles say what is shown, also once a panel gave way to
    # the transcript in a narrow window.
    splitter = target.splitter
    if isinstance(splitter, PanelSplitter):
        splitter.bind_action(PanelSplitter.LIST, actions["list"])
        splitter.bind_action(PanelSplitter.TREE, actions["tree"])
    return actions, recent


def fill_recent_menu(
    menu: QMenu, paths: tuple[str, ...], open_model: Callable[[Path], None]
) -> None:
    """List the recent model files in ``menu``; choosing one opens it."""
    menu.clear()
    for path in paths:
        action = menu.addAction(Path(path).name)
        action.setToolTip(path)
        action.triggered.connect(lambda _checked=False, p=path: open_model(Path(p)))
    menu.setEnabled(bool(paths))


def _action(window: QMainWindow, target: ActionTarget, spec: ActionSpec) -> QAction:
    action = QAction(spec.text, window)
    if spec.icon:
        action.setIcon(icon(spec.icon))
    action.setShortcuts([_key(s) for s in spec.shortcuts])
    handler = spec.handler(target)
    if spec.checkable:
        action.setCheckable(True)
        action.setChecked(True)
        action.triggered.connect(handler)
    else:
        # The handler takes no arguments: do not pass it "checked".
        action.triggered.connect(lambda _checked=False: handler())
    window.addAction(action)  # shortcuts work even with the menu bar hidden
    setattr(window, f"{spec.name}_action", action)
    return action


def _key(shortcut: str) -> QKeySequence:
    if shortcut.startswith(STANDARD_KEY):
        return QKeySequence(
            getattr(QKeySequence.StandardKey, shortcut[len(STANDARD_KEY) :])
        )
    return QKeySequence(shortcut)
