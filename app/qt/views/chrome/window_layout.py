"""The main window's widgets and where they sit.

Conversations on the left, the transcript and the composer in the middle
(or the welcome page, until a model is chosen), the tree on the right, the
status bar below. ``build_layout`` makes them and puts them in the window;
the window connects them.

The window fits a 1280x720 screen, and a 1440x900 one at 200 % (720x450
logical pixels): the status bar's texts elide, and the centre asks for no more
than ``PAGE_MOST``; a page that needs more scrolls, and only the page shown
sets how far. ``fit_to_screen`` keeps a window's first size on its screen.

The side panels give way to the transcript (``PanelSplitter``): where it would
be narrower than about ``READING_CHARS`` characters of the conversation's text
(at its zoom), the tree is hidden, then the conversation list, and they come
back as the window widens. On that screen (at 100 % text) the tree gives way;
View → Show conversation list / tree brings either back. A widget in the
transcript that gets the keyboard out of sight is scrolled to (``FocusInView``).
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QLabel,
    QMainWindow,
    QScrollArea,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.preferences import Preferences
from app.qt.models.conversation_list import ConversationListModel
from app.qt.models.conversation_tree import ConversationTreeModel
from app.qt.views.chrome.status_bar import ArborStatusBar
from app.qt.views.library.model_offer import ModelOfferBar
from app.qt.views.library.starter_offer import StarterOfferBar
from app.qt.views.library.welcome import WelcomePage
from app.qt.views.transcript.composer import Composer
from app.qt.views.transcript.transcript import TranscriptView
from app.qt.views.tree.sidebar import Sidebar
from app.qt.views.tree.tree_panel import TreePanel
from storage.db import Database

# The most room the centre asks of the window; a page that needs more scrolls.
# About what 720 px (a 1440 px screen at 200 %) leave beside the conversations
# and the tree at their narrowest, and more than the chat page needs.
PAGE_MOST = QSize(240, 240)
# The share of its screen a window takes at most at first: the rest is for the
# frame and title bar, which are not known before the window is shown.
SCREEN_SHARE = 0.9
# How many characters of the conversation's text (average ones, at its zoom)
# a line of the transcript keeps before a side panel gives way: with the
# cards' margins, about 45 characters of prose a line. At 100 % that is
# 360 px (Sans 9 pt), more than the transcript had beside both panels in a
# 720 px wide window (326 px, issue 41), less than it has beside the list.
READING_CHARS = 60
# How much more than that a hidden panel waits for before it comes back: a
# window resized by a few pixels back and forth does not flip it.
COME_BACK_SLACK = 24


class PageStack(QStackedWidget):
    """A stack that asks for what its current page needs.

    ``QStackedWidget`` asks for the most any of its pages needs, shown or not.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.currentChanged.connect(self._on_current_changed)

    def pages(self) -> list[QWidget]:
        """The pages, in order."""
        return [
            page for i in range(self.count()) if (page := self.widget(i)) is not None
        ]

    def sizeHint(self) -> QSize:
        page = self.currentWidget()
        return super().sizeHint() if page is None else page.sizeHint()

    def minimumSizeHint(self) -> QSize:
        page = self.currentWidget()
        return super().minimumSizeHint() if page is None else _least_size(page)

    def hasHeightForWidth(self) -> bool:
        return False

    def heightForWidth(self, _width: int) -> int:
        # A resizable QScrollArea makes its widget as tall as its height for
        # the width, and a stack answers with its tallest page's preferred
        # height there: the chat page scrolled in a window it fitted. Without
        # one, a page takes the height it is given, down to its minimum.
        return -1

    @Slot(int)
    def _on_current_changed(self, _index: int) -> None:
        self.updateGeometry()


class PageScroll(QScrollArea):
    """Shows a page stack, asking the window for ``most`` at the most: a page
    that needs more (the welcome page's fixed-width text, the starter offer's
    row of buttons) scrolls rather than widening the window past the screen.

    Parameters
    ----------
    pages
        The stack to show.
    most
        The most room it asks of the window.
    """

    def __init__(self, pages: PageStack, most: QSize) -> None:
        super().__init__()
        self.setObjectName("PageScroll")
        self._pages = pages
        self._most = most
        self.setFrameShape(QFrame.Shape.NoFrame)
        # The page fills the area, down to its own minimum; only below that
        # do scroll bars appear.
        self.setWidgetResizable(True)
        # Not a stop of its own for Tab: the page's widgets are.
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setWidget(pages)

    def sizeHint(self) -> QSize:
        return self._pages.sizeHint()

    def minimumSizeHint(self) -> QSize:
        # Every page's needs, not the current one's: showing another page
        # does not resize the window either.
        size = QSize(0, 0)
        for page in self._pages.pages():
            size = size.expandedTo(_least_size(page))
        return size.boundedTo(self._most)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # The page's needs changed (another page, a bar shown in it): the
        # splitter must ask again.
        if watched is self._pages and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
        return super().eventFilter(watched, event)


class FocusInView(QObject):
    """Scrolls ``area`` to a widget in it that gets the keyboard while out of
    sight: Tab from the composer's Send goes to the transcript's first
    message, scrolled away above in a long conversation, and the focus was
    then nowhere to be seen (issue 41). A widget partly in sight (one clicked)
    does not move.

    Parameters
    ----------
    area
        The scroll area; also the Qt parent.
    """

    def __init__(self, area: QScrollArea) -> None:
        super().__init__(area)
        self._area = area
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self._on_app_focus_changed)

    @Slot(QWidget, QWidget)
    def _on_app_focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        area = self._area
        inner = area.widget()
        if new is None or inner is None or not inner.isAncestorOf(new):
            return
        if new.visibleRegion().isEmpty():
            area.ensureWidgetVisible(new)


def _least_size(widget: QWidget) -> QSize:
    """The smallest a layout makes ``widget``: its minimum size, else its hint."""
    return widget.minimumSizeHint().expandedTo(widget.minimumSize())


class PanelSplitter(QSplitter):
    """The conversation list, the centre and the tree, side by side; the side
    panels give way to the centre.

    Where the centre would be narrower than ``reading_least`` beside them, the
    tree is hidden, then the list (the one the user showed last gives way
    last), and they come back once the window has room for them again at
    the width they had (``centre_room``), and ``COME_BACK_SLACK`` more. The
    window shares its width among the three as it likes (``MainWindow``
    keeps their shares): the splitter decides as it is resized, from the
    widths it has, then checks the centre once they are laid out. What the
    user chooses stays: a panel hidden by the user stays hidden, and one
    shown by the user (the View menu, or anything that shows it) is shown,
    the other panel giving way if it must. The View menu's toggles follow
    what is shown (``bind_action``).

    Parameters
    ----------
    parent
        The Qt parent.
    """

    LIST, CENTER, TREE = 0, 1, 2

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(Qt.Orientation.Horizontal, parent)
        self._least = READING_CHARS * QFontMetrics(QFont()).averageCharWidth()
        # The side panels, the first to give way first.
        self._order = [self.TREE, self.LIST]
        self._hidden_by_user: set[int] = set()
        self._fitting = False  # hiding or showing them here: not the user
        self._actions: dict[int, QAction] = {}
        # How wide each panel was when last shown: the splitter makes a hidden
        # widget 0 px wide.
        self._widths: dict[int, int] = {}
        self._kept: int | None = None  # the panel the user just showed
        self._check_pending = False

    @property
    def reading_least(self) -> int:
        """The least width the centre keeps before a side panel gives way."""
        return self._least

    def set_reading_font(self, font: QFont) -> None:
        """Keep ``READING_CHARS`` of ``font`` (the transcript's text, at its
        zoom) in the centre."""
        self._least = READING_CHARS * QFontMetrics(font).averageCharWidth()
        self._fit()

    def show_list(self, shown: bool) -> None:
        """Show or hide the conversation list, as the user chose."""
        self._show(self.LIST, shown)

    def show_tree(self, shown: bool) -> None:
        """Show or hide the conversation tree, as the user chose."""
        self._show(self.TREE, shown)

    def bind_action(self, index: int, action: QAction) -> None:
        """Keep ``action`` (checkable) checked while the panel at ``index`` is shown."""
        self._actions[index] = action
        self._checked(index)

    def addWidget(self, widget: QWidget) -> None:
        super().addWidget(widget)
        if self.indexOf(widget) != self.CENTER:
            # Shown or hidden by anyone: the window's focus_tree shows the
            # tree without a word to the splitter.
            widget.installEventFilter(self)

    def centre_room(self, shown: set[int]) -> int:
        """The width the centre keeps beside the panels ``shown``, each as wide
        as it was last shown (the window shares its width among them), and
        no narrower than it can be."""
        room = self.width()
        for index in shown:
            panel = self.widget(index)
            if panel is not None:
                # One just shown is 0 px wide until the splitter lays it out.
                width = (
                    panel.width()
                    if panel.isVisibleTo(self) and panel.width() > 0
                    else self._widths.get(index, 0)
                )
                room -= max(_least_size(panel).width(), width) + self.handleWidth()
        return room

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.ShowToParent, QEvent.Type.HideToParent):
            index = self.indexOf(watched) if isinstance(watched, QWidget) else -1
            if index in self._order:
                hidden = kind == QEvent.Type.HideToParent
                if hidden and isinstance(watched, QWidget) and watched.width() > 0:
                    self._widths[index] = watched.width()
                self._checked(index)
                if not self._fitting:  # the user's choice
                    self._chosen(index, kind == QEvent.Type.ShowToParent)
        return super().eventFilter(watched, event)

    def resizeEvent(self, event: QResizeEvent) -> None:
        # Before the splitter lays its widgets out at the new width.
        self._kept = None
        self._fit()
        super().resizeEvent(event)

    def _show(self, index: int, shown: bool) -> None:
        panel = self.widget(index)
        if panel is not None:
            panel.setVisible(shown)  # the filter sees it as the user's choice

    def _chosen(self, index: int, shown: bool) -> None:
        if shown:
            self._hidden_by_user.discard(index)
            # Shown last, it gives way last; and not at once, even where the
            # window is too narrow for it: the user asked for it.
            self._order.remove(index)
            self._order.append(index)
            self._kept = index
            self._fit()
        else:
            self._hidden_by_user.add(index)

    def _fit(self) -> None:
        """Show the panels there is room for, from the widths they have."""
        before = {i for i in self._order if not self._is_hidden(i)}
        shown = {i for i in self._order if i not in self._hidden_by_user}
        for index in self._order:
            # One that comes back needs room to spare.
            slack = COME_BACK_SLACK if shown - before else 0
            if self.centre_room(shown) >= self._least + slack:
                break
            if index != self._kept:
                shown.discard(index)
        self._set_shown(shown)
        if not self._check_pending:
            self._check_pending = True
            QTimer.singleShot(0, self._check)

    @Slot()
    def _check(self) -> None:
        """Hide what still leaves the centre too narrow, once laid out."""
        self._check_pending = False
        centre = self.widget(self.CENTER)
        if centre is None:
            return
        room = centre.width()
        shown = {i for i in self._order if not self._is_hidden(i)}
        for index in self._order:
            if room >= self._least:
                break
            panel = self.widget(index)
            if index in shown and index != self._kept and panel is not None:
                shown.discard(index)
                room += panel.width() + self.handleWidth()
        self._set_shown(shown)

    def _is_hidden(self, index: int) -> bool:
        panel = self.widget(index)
        return panel is None or panel.isHidden()

    def _set_shown(self, shown: set[int]) -> None:
        self._fitting = True
        try:
            for index in self._order:
                panel = self.widget(index)
                if panel is not None and panel.isHidden() == (index in shown):
                    panel.setVisible(index in shown)
        finally:
            self._fitting = False

    def _checked(self, index: int) -> None:
        action, panel = self._actions.get(index), self.widget(index)
        if action is not None and panel is not None:
            action.setChecked(not panel.isHidden())


def fit_to_screen(window: QWidget) -> None:
    """Shrink a window about to be shown to fit its screen, if it was given a
    size (one left to Qt gets its size hint, which Qt bounds by the screen)."""
    if not window.testAttribute(Qt.WidgetAttribute.WA_Resized):
        return
    room = window.screen().availableSize() * SCREEN_SHARE
    window.resize(window.size().boundedTo(room))


@dataclass(frozen=True)
class WindowWidgets:
    """The widgets of the main window that anything else talks to."""

    sidebar: Sidebar
    transcript: TranscriptView
    composer: Composer
    tree_panel: TreePanel
    welcome: WelcomePage
    read_only_banner: QLabel
    model_offer: ModelOfferBar
    starter_offer: StarterOfferBar
    center: QStackedWidget  # the welcome page or the chat page
    chat_page: QWidget
    splitter: PanelSplitter
    status: ArborStatusBar


def build_layout(
    window: QMainWindow,
    db: Database,
    prefs: Preferences,
    list_model: ConversationListModel,
    tree_model: ConversationTreeModel,
) -> WindowWidgets:
    """Make the window's widgets, lay them out in ``window`` and return them."""
    sidebar = Sidebar(list_model)
    transcript = TranscriptView()
    FocusInView(transcript)
    composer = Composer()
    tree_panel = TreePanel(tree_model)
    tree_panel.set_mode(prefs.tree_view)
    welcome = WelcomePage()

    chat = QWidget()
    chat_layout = QVBoxLayout(chat)
    chat_layout.setContentsMargins(0, 0, 0, 0)
    chat_layout.setSpacing(0)
    # A database on read-only media still opens, for reading: say so once,
    # above the conversation, rather than in an error per action.
    banner = QLabel(f"Read-only: you can read, not write — {db.read_only_reason}.")
    banner.setObjectName("ReadOnlyBanner")
    banner.setWordWrap(True)
    banner.setVisible(db.read_only)
    chat_layout.addWidget(banner)
    starter_offer = StarterOfferBar()
    chat_layout.addWidget(starter_offer)
    chat_layout.addWidget(transcript, 1)
    model_offer = ModelOfferBar()
    chat_layout.addWidget(model_offer)
    chat_layout.addWidget(composer)
    center = PageStack()
    center.addWidget(welcome)
    center.addWidget(chat)

    splitter = PanelSplitter()
    splitter.addWidget(sidebar)
    splitter.addWidget(PageScroll(center, PAGE_MOST))
    splitter.addWidget(tree_panel)
    splitter.setStretchFactor(1, 1)
    splitter.setSizes([240, 660, 380])
    splitter.setChildrenCollapsible(False)
    window.setCentralWidget(splitter)
    status = ArborStatusBar()
    window.setStatusBar(status)
    return WindowWidgets(
        sidebar,
        transcript,
        composer,
        tree_panel,
        welcome,
        banner,
        model_offer,
        starter_offer,
        center,
        chat,
        splitter,
        status,
    )
