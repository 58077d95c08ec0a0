"""``EmptyState``: what the transcript shows before the first message.

A new conversation used to show one grey line. This page says which model
will answer (its readable name, as the status bar shows it), offers a few
example prompts (a click puts one in the composer: the user may change it
before sending), and says in plain words what the tree is for. Without a
model it says so, and where to get one.

Everything wraps: the page never asks the window for more width than its
longest word, so it fits a small window and a screen at 200 %.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QSize, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.backend.values import ModelInfo
from app.library.catalog import model_name
from app.qt.views.theme import app_icon, icon

# Short and answerable by a small model on a slow computer: the first reply
# should come quickly and make sense.
EXAMPLE_PROMPTS = (
    "Explain how a rainbow forms, in two sentences.",
    "Write a four-line poem about an old oak tree.",
    "Give me three ideas for a rainy afternoon.",
)
TREE_TITLE = "Go back to any message"
TREE_TIP = (
    "Every message is saved with the model's memory of it: click any earlier "
    "message in the tree to go back there instantly and branch off — nothing "
    "is ever lost. ✓ in the list (● in the graph) marks a message that "
    "restores instantly."
)
PROMPT_TITLE = "Tell the model who to be"
# The menu path may wrap: kept on one line it would be wider than a narrow
# transcript.
PROMPT_TIP = (
    "A system prompt sets the model's role and tone; a preset (Precise, "
    "Coding, Creative, or your own) sets it with the sampling that suits it: "
    "Conversation → System prompt and sampling… (Ctrl+Shift+P). Changed "
    "later, it starts a new branch; nothing is lost."
)
NO_MODEL_TEXT = (
    "Open a model file with File\u00a0→\u00a0Open\u00a0model\u00a0file… "
    "(Ctrl+O), or choose or download one in File\u00a0→\u00a0Models… "
    "(Ctrl+Shift+M). Your conversations stay here meanwhile."
)
# The column of text never grows wider than this: short lines read better.
TEXT_WIDTH = 560

# Here rather than in arbor.qss: only this page uses these names. Palette
# roles, as in arbor.qss, so that light and dark palettes both read.
STYLE = """
#EmptyTitle { font-size: 20px; font-weight: 600; }
#EmptySubtitle, #EmptyTip { color: palette(placeholder-text); }
#EmptySectionTitle {
    color: palette(placeholder-text);
    font-size: 11px;
    font-weight: 600;
}
QPushButton#ExamplePrompt {
    background: palette(base);
    border: 1px solid palette(mid);
    border-radius: 10px;
    padding: 0;
    text-align: left;
}
QPushButton#ExamplePrompt:hover, QPushButton#ExamplePrompt:focus {
    border-color: palette(highlight);
}
QPushButton#ExamplePrompt:pressed { background: palette(alternate-base); }
QPushButton#ExamplePrompt:disabled { border-color: palette(midlight); }
#ExamplePromptText { color: palette(text); }
#EmptyTreeBox {
    background: palette(alternate-base);
    border: 1px solid palette(midlight);
    border-radius: 10px;
}
#EmptyTipTitle { font-weight: 600; }
#EmptyTip, #EmptyTipTitle { background: transparent; }
"""


class _IconLabel(QLabel):
    """A palette-tinted icon that is drawn again when the palette changes (a
    light/dark switch): a label's pixmap is drawn once, in one colour."""

    def __init__(self, name: str, size: int) -> None:
        super().__init__()
        self._icon, self._size = icon(name), QSize(size, size)
        self.setAlignment(Qt.AlignmentFlag.AlignTop)
        self.setPixmap(self._icon.pixmap(self._size))

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.PaletteChange:
            self.setPixmap(self._icon.pixmap(self._size))
        super().changeEvent(event)


def _wrapped(text: str, name: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


class ExampleButton(QPushButton):
    """A button whose text wraps (a ``QPushButton``'s own text does not, and
    asks for its whole width).

    The text is a label laid out inside the button; the button's size is the
    layout's, so it grows taller rather than wider.

    Parameters
    ----------
    text
        The example prompt.
    """

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ExamplePrompt")
        self.prompt = text
        self.setAccessibleName(text)
        self.setToolTip("Put this in the message box, to change or send")
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self._row = layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(8)
        mark = _IconLabel("edit", 14)
        label = _wrapped(text, "ExamplePromptText")
        for child in (mark, label):
            # Clicks go to the button, not to its labels.
            child.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        layout.addWidget(mark)
        layout.addWidget(label, 1)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)

    def sizeHint(self) -> QSize:
        return self._row.totalSizeHint()

    def minimumSizeHint(self) -> QSize:
        return self._row.totalMinimumSize()

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        return self._row.totalHeightForWidth(width)


class EmptyState(QWidget):
    """The page of a conversation without messages.

    Signals
    -------
    example_chosen(str)
        An example prompt was clicked: put it in the composer (not sent).
    """

    example_chosen = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("EmptyState")
        self.setStyleSheet(STYLE)
        outer = QHBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        column = QWidget()
        column.setMaximumWidth(TEXT_WIDTH)
        outer.addStretch(0)
        outer.addWidget(column, 1)
        outer.addStretch(0)
        layout = QVBoxLayout(column)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(8)
        # A little above the middle of the room the transcript gives it.
        layout.addStretch(2)
        logo = QLabel()
        logo.setPixmap(app_icon().pixmap(QSize(48, 48)))
        logo.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(logo)
        self.title = _wrapped("", "EmptyTitle")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.title)
        self.subtitle = _wrapped("", "EmptySubtitle")
        self.subtitle.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(self.subtitle)
        layout.addSpacing(14)
        self.examples = QWidget()
        examples = QVBoxLayout(self.examples)
        examples.setContentsMargins(0, 0, 0, 0)
        examples.setSpacing(6)
        examples.addWidget(_wrapped("Try one of these", "EmptySectionTitle"))
        self.example_buttons: list[ExampleButton] = []
        for prompt in EXAMPLE_PROMPTS:
            button = ExampleButton(prompt)
            button.clicked.connect(self._on_example_button_clicked)
            examples.addWidget(button)
            self.example_buttons.append(button)
        layout.addWidget(self.examples)
        layout.addSpacing(14)
        tree_box, self.tree_tip = self._tip_box("tree", TREE_TITLE, TREE_TIP)
        layout.addWidget(tree_box)
        self.prompt_box, self.prompt_tip = self._tip_box(
            "edit", PROMPT_TITLE, PROMPT_TIP
        )
        layout.addWidget(self.prompt_box)
        layout.addStretch(3)
        self.set_model(None)

    @staticmethod
    def _tip_box(icon_name: str, title: str, tip: str) -> tuple[QFrame, QLabel]:
        box = QFrame()
        box.setObjectName("EmptyTreeBox")
        row = QHBoxLayout(box)
        row.setContentsMargins(12, 10, 12, 10)
        row.setSpacing(10)
        row.addWidget(_IconLabel(icon_name, 18))
        text = QVBoxLayout()
        text.setSpacing(2)
        text.addWidget(_wrapped(title, "EmptyTipTitle"))
        label = _wrapped(tip, "EmptyTip")
        text.addWidget(label)
        row.addLayout(text, 1)
        return box, label

    def set_model(self, info: ModelInfo | None) -> None:
        """Say which model answers (``None``: none is loaded, and where to get one)."""
        if info is None:
            self.title.setText("No model loaded")
            self.subtitle.setTextFormat(Qt.TextFormat.PlainText)
            self.subtitle.setText(NO_MODEL_TEXT)
            self.examples.hide()
            self.prompt_box.hide()
            return
        # The name the status bar shows (app.library.naming): ``info.name``
        # is the file's general.name, often a build label.
        name = html.escape(model_name(info.path, general_name=info.name))
        self.title.setText("Start a conversation")
        self.subtitle.setTextFormat(Qt.TextFormat.RichText)
        where = "this computer, offline"
        if info.workers:
            where = "workers " + html.escape(", ".join(info.workers))
        self.subtitle.setText(
            f"with <b>{name}</b>, running on {where}. "
            "Write a message below, or start with an example."
        )
        self.examples.show()
        self.prompt_box.show()

    @Slot()
    def _on_example_button_clicked(self) -> None:
        button = self.sender()
        if isinstance(button, ExampleButton):
            self.example_chosen.emit(button.prompt)
