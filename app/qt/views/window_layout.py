"""The main window's widgets and where they sit.

Conversations on the left, the transcript and the composer in the middle
(or the welcome page, until a model is chosen), the tree on the right, the
status bar below. ``build_layout`` makes them and puts them in the window;
the window connects them.

The window fits a 1280x720 screen, and a 1440x900 one at 200 % (720x450
logical pixels): the status bar's texts elide, and the centre asks for no more
than ``PAGE_MOST``; a page that needs more scrolls, and only the page shown
sets how far. ``fit_to_screen`` keeps a window's first size on its screen.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QObject, QSize, Qt, Slot
from PySide6.QtWidgets import (
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
from app.qt.views.composer import Composer
from app.qt.views.model_offer import ModelOfferBar
from app.qt.views.sidebar import Sidebar
from app.qt.views.starter_offer import StarterOfferBar
from app.qt.views.status_bar import ArborStatusBar
from app.qt.views.transcript import TranscriptView
from app.qt.views.tree_panel import TreePanel
from app.qt.views.welcome import WelcomePage
from storage.db import Database

# The most room the centre asks of the window; a page that needs more scrolls.
# About what 720 px (a 1440 px screen at 200 %) leave beside the conversations
# and the tree at their narrowest, and more than the chat page needs.
PAGE_MOST = QSize(240, 240)
# The share of its screen a window takes at most at first: the rest is for the
# frame and title bar, which are not known before the window is shown.
SCREEN_SHARE = 0.9


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


def _least_size(widget: QWidget) -> QSize:
    """The smallest a layout makes ``widget``: its minimum size, else its hint."""
    return widget.minimumSizeHint().expandedTo(widget.minimumSize())


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
    splitter: QSplitter
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

    splitter = QSplitter(Qt.Orientation.Horizontal)
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
