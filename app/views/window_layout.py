"""The main window's widgets and where they sit.

Conversations on the left, the transcript and the composer in the middle
(or the welcome page, until a model is chosen), the tree on the right, the
status bar below. ``build_layout`` makes them and puts them in the window;
the window connects them.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QLabel,
    QMainWindow,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.models.conversation_list import ConversationListModel
from app.models.conversation_tree import ConversationTreeModel
from app.preferences import Preferences
from app.views.composer import Composer
from app.views.model_offer import ModelOfferBar
from app.views.sidebar import Sidebar
from app.views.starter_offer import StarterOfferBar
from app.views.status_bar import ArborStatusBar
from app.views.transcript import TranscriptView
from app.views.tree_panel import TreePanel
from app.views.welcome import WelcomePage
from storage.db import Database


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
    center = QStackedWidget()
    center.addWidget(welcome)
    center.addWidget(chat)

    splitter = QSplitter(Qt.Orientation.Horizontal)
    splitter.addWidget(sidebar)
    splitter.addWidget(center)
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
