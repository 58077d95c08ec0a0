"""``Composer``: where the user writes. Ctrl+Enter sends, Enter is a new line.

The send shortcut belongs to the window's Send action (so menus show it);
the composer shows the convention in its hint and turns its button into Stop
while a reply streams. Beside the hint, for models whose chat template has a
reasoning switch, a small "Reasoning" box sets it for the conversation; in a
narrow window (a small or scaled screen) it goes below the hint, and the
margins narrow. Files attached (the clip button, or dropped on the editor)
show as chips above it and go with the message (``message``).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, Signal, Slot
from PySide6.QtGui import QAction, QActionGroup, QDropEvent, QResizeEvent
from PySide6.QtWidgets import (
    QBoxLayout,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.qt.views.theme import icon
from app.qt.views.transcript.attachment_chips import AttachmentChips
from app.text.attachments import Attachment, compose, split

HINT = "Ctrl+Enter to send · Enter for a new line · Esc to stop"
REASONING_TOOLTIP = (
    "How much this model reasons before it answers, for this conversation. "
    "The next reply uses it; earlier replies stay as they are."
)
EDIT_BANNER = "Editing a message — sending creates a new branch; nothing is erased."
RESULT_BANNER = (
    "Editing a tool's result — the model goes on from your version, a new "
    "branch; the tool's own result stays."
)
EDIT_HINT = (
    "Editing a message: Ctrl+Enter sends it as a new branch (the original stays)"
    " · Esc cancels"
)
# Below this width the reasoning box goes below the hint and the side margins
# narrow: side by side, with the margins of the transcript's rows, they need
# about 310 px, more than the chat page has beside the panels on a 720 px wide
# screen (1440 px at 200 %).
NARROW_WIDTH = 400
WIDE_MARGIN = 24
NARROW_MARGIN = 16


# The Tools menu: whether the next message offers the MCP servers' tools.
TOOL_CHOICES = {
    "off": "No tools",
    "auto": "Offer tools: the model decides",
    "required": "Offer tools: the reply must call one (for small models)",
}
TOOL_BUTTON_TEXTS = {
    "off": "Tools: off",
    "auto": "Tools",
    "required": "Tools: must call",
}
TOOLS_ON_TOOLTIP = (
    "Let the model call the tools of your enabled MCP servers. Each call asks "
    "you first unless its tool is set to Always allow (Settings → Tools)."
)
TOOLS_NONE_TOOLTIP = "Add an MCP server in Settings → Tools to give the model tools."


def dropped_files(event: QDropEvent) -> list[Path]:
    """The local files a drag carries (none when it carries text)."""
    mime = event.mimeData()
    if not mime.hasUrls():
        return []
    return [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]


class Composer(QWidget):
    """The message editor with its Send/Stop button.

    Signals
    -------
    send_clicked()
        The Send button was pressed (the window reads ``text``).
    stop_clicked()
        The Stop button was pressed.
    attach_clicked()
        The clip button was pressed (the window asks for files).
    files_dropped(list)
        Files (``Path``) were dropped on the editor, to attach.
    attachment_removed(str)
        The file with this name was taken out of the message.
    edit_cancelled()
        The user left edit mode without sending.
    reasoning_changed(object)
        The user chose a reasoning setting: one of the model's choices, or
        None for the template's default.
    tools_changed(str)
        The user chose in the Tools menu: ``"off"``, ``"auto"`` (the model
        decides) or ``"required"`` (the first reply calls a tool).
    """

    send_clicked = Signal()
    stop_clicked = Signal()
    attach_clicked = Signal()
    files_dropped = Signal(list)
    attachment_removed = Signal(str)
    edit_cancelled = Signal()
    reasoning_changed = Signal(object)
    tools_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("Composer")
        self.editing_node: int | None = None
        self._generating = False

        outer = QVBoxLayout(self)
        outer.setContentsMargins(WIDE_MARGIN, 6, WIDE_MARGIN, 10)
        outer.setSpacing(4)

        self.edit_banner = QFrame()
        self.edit_banner.setObjectName("EditBanner")
        banner_layout = QHBoxLayout(self.edit_banner)
        banner_layout.setContentsMargins(8, 2, 4, 2)
        self.banner_label = banner_label = QLabel(EDIT_BANNER)
        # Wrapped, the explanations fit a narrow window (a small or scaled
        # screen) on more lines instead of asking for their whole width.
        banner_label.setWordWrap(True)
        banner_layout.addWidget(banner_label, 1)
        cancel = QToolButton()
        cancel.setText("Cancel")
        cancel.clicked.connect(self._on_cancel_button_clicked)
        banner_layout.addWidget(cancel)
        self.edit_banner.hide()
        outer.addWidget(self.edit_banner)

        # The files going with the message, above it (see ``add_attachment``).
        self.attachments = AttachmentChips(removable=True)
        self.attachments.removed.connect(self.attachment_removed)
        outer.addWidget(self.attachments)

        self.frame = QFrame()
        self.frame.setObjectName("ComposerFrame")
        row = QHBoxLayout(self.frame)
        row.setContentsMargins(10, 6, 6, 6)
        self.edit = QPlainTextEdit()
        self.edit.setObjectName("ComposerEdit")
        self.edit.setPlaceholderText("Write a message…")
        self.edit.setTabChangesFocus(True)
        self.edit.setFixedHeight(72)
        self.edit.installEventFilter(self)
        self.edit.viewport().installEventFilter(self)
        row.addWidget(self.edit, 1)
        self.attach_button = QToolButton()
        self.attach_button.setObjectName("AttachButton")
        self.attach_button.setIcon(icon("attach"))
        self.attach_button.setToolTip(
            "Attach text or code files or PDFs (or drop them here)"
        )
        self.attach_button.setAutoRaise(True)
        self.attach_button.clicked.connect(self.attach_clicked)
        row.addWidget(self.attach_button, 0, Qt.AlignmentFlag.AlignBottom)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("SendButton")
        self.send_button.setIcon(
            icon("send", role=self.palette().ColorRole.HighlightedText)
        )
        self.send_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.send_button.clicked.connect(self._on_send_button_clicked)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        outer.addWidget(self.frame)

        self._footer = footer = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        footer.setContentsMargins(0, 0, 0, 0)
        footer.setSpacing(6)
        self.hint = QLabel(HINT)
        self.hint.setObjectName("ComposerHint")
        self.hint.setWordWrap(True)
        footer.addWidget(self.hint, 1)
        self.reasoning_label = QLabel("Reasoning:")
        self.reasoning_label.setObjectName("ComposerHint")
        self.reasoning_box = QComboBox()
        self.reasoning_box.setObjectName("ReasoningBox")
        self.reasoning_box.setToolTip(REASONING_TOOLTIP)
        self.reasoning_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToContents
        )
        self.reasoning_label.setBuddy(self.reasoning_box)
        # "activated", not "currentIndexChanged": only the user's choices are
        # requests; showing a conversation's stored choice is not.
        self.reasoning_box.activated.connect(self._on_reasoning_box_activated)
        reasoning = QHBoxLayout()
        reasoning.setSpacing(6)
        reasoning.addWidget(self.reasoning_label)
        reasoning.addWidget(self.reasoning_box)
        footer.addLayout(reasoning)
        # Whether the model may call the enabled MCP servers' tools
        # (Settings → Tools). "triggered", not "toggled": showing a
        # branch's offer is not a request.
        self.tools_button = QToolButton()
        self.tools_button.setObjectName("ToolsButton")
        self.tools_button.setAutoRaise(True)
        self.tools_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(self.tools_button)
        choices = QActionGroup(menu)
        self._tool_actions: dict[str, QAction] = {}
        for choice, label in TOOL_CHOICES.items():
            action = menu.addAction(label)
            action.setCheckable(True)
            action.setActionGroup(choices)
            action.triggered.connect(
                lambda _checked=False, chosen=choice: self.tools_changed.emit(chosen)
            )
            self._tool_actions[choice] = action
        self.tools_button.setMenu(menu)
        footer.addWidget(self.tools_button)
        self.set_tools("off", available=False)
        # Below the hint, at the left rather than stretched across.
        footer.setAlignment(reasoning, Qt.AlignmentFlag.AlignLeft)
        outer.addLayout(footer)
        self.set_reasoning_choices((), None)

    @property
    def text(self) -> str:
        """The message as typed."""
        return self.edit.toPlainText()

    @property
    def message(self) -> str:
        """What Send sends: the typed words, then the attached files."""
        return compose(self.text, self.attachments.files)

    def add_attachment(self, file: Attachment) -> None:
        """Attach ``file`` (its chip says "counting…" until ``set_tokens``)."""
        self.attachments.add(file)
        self.attachments.set_figure(file.name, "counting tokens…")

    def set_tokens(self, name: str, n_tokens: int) -> None:
        """The file ``name`` takes ``n_tokens`` of the context."""
        self.attachments.set_figure(name, f"{n_tokens:,} tokens")

    @property
    def generating(self) -> bool:
        """Whether the button is in its Stop state."""
        return self._generating

    def clear(self) -> None:
        """Empty the editor and take the attached files out."""
        self.edit.clear()
        self.attachments.set_files([])

    def set_generating(self, generating: bool) -> None:
        """Switch the button between Send and Stop."""
        if generating == self._generating and self.send_button.text():
            return  # a repolish relays out the window: only for a change
        self._generating = generating
        self.send_button.setText("Stop" if generating else "Send")
        self.send_button.setIcon(
            icon(
                "stop" if generating else "send",
                role=self.palette().ColorRole.HighlightedText,
            )
        )
        self.send_button.setToolTip(
            "Stop generating (Esc)" if generating else "Send (Ctrl+Enter)"
        )
        self.send_button.setProperty("stopping", generating)
        self.send_button.style().unpolish(self.send_button)
        self.send_button.style().polish(self.send_button)

    def set_available(self, available: bool, placeholder: str) -> None:
        """Enable writing or explain (in the placeholder) why it is not possible."""
        self.edit.setReadOnly(not available)
        if placeholder != self.edit.placeholderText():
            self.edit.setPlaceholderText(placeholder)
            # Qt repaints an empty editor only when it becomes empty or not
            # (QPlainTextEditPrivate::updatePlaceholderVisibility), so a new
            # placeholder would show only at the next repaint for some other
            # reason: a stale "Write a message…" while a reply streams elsewhere.
            self.edit.viewport().update()
        self.send_button.setEnabled(available or self._generating)

    @property
    def reasoning(self) -> str | None:
        """The reasoning setting shown (None: the template's default)."""
        return self.reasoning_box.currentData() or None

    def set_reasoning_choices(
        self, choices: tuple[str, ...], default: str | None
    ) -> None:
        """Offer the model's reasoning settings; hide the box when it has none."""
        shown = self.reasoning
        self.reasoning_box.clear()
        self.reasoning_box.addItem(
            # "" stands for None: an item without data cannot be searched for.
            f"Default ({default.capitalize()})" if default else "Default",
            "",
        )
        for choice in choices:
            self.reasoning_box.addItem(choice.capitalize(), choice)
        self.set_reasoning(shown)
        for widget in (self.reasoning_label, self.reasoning_box):
            widget.setVisible(bool(choices))

    def set_reasoning(self, choice: str | None) -> None:
        """Show a conversation's stored setting (without requesting anything).

        A choice this model does not offer shows as the default.
        """
        index = self.reasoning_box.findData(choice or "")
        self.reasoning_box.setCurrentIndex(max(index, 0))

    def set_tools(self, choice: str, available: bool) -> None:
        """Show the Tools menu's choice (``TOOL_CHOICES``), and whether any
        MCP server is enabled to offer tools (without requesting anything)."""
        shown = choice if available else "off"
        self._tool_actions[shown].setChecked(True)
        self.tools_button.setText(TOOL_BUTTON_TEXTS[shown])
        self.tools_button.setEnabled(available)
        self.tools_button.setToolTip(
            TOOLS_ON_TOOLTIP if available else TOOLS_NONE_TOOLTIP
        )

    def begin_edit(self, node_id: int, text: str, result: bool = False) -> None:
        """Put a user message (or a tool's ``result``) in the editor to send
        as its edited sibling (a message's files as chips again)."""
        self.editing_node = node_id
        self.banner_label.setText(RESULT_BANNER if result else EDIT_BANNER)
        typed, files = split(text)
        self.edit.setPlainText(typed)
        self.attachments.set_files(files)
        self.edit.setFocus()
        self.edit_banner.show()
        self.hint.setText(EDIT_HINT)

    def end_edit(self) -> None:
        """Leave edit mode (the text stays if it was not sent)."""
        self.editing_node = None
        self.edit_banner.hide()
        self.hint.setText(HINT)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        # Each arrangement fits every width on its side of NARROW_WIDTH, so
        # the switch never brings about the width that switches it back.
        narrow = event.size().width() < NARROW_WIDTH
        direction = (
            QBoxLayout.Direction.TopToBottom
            if narrow
            else QBoxLayout.Direction.LeftToRight
        )
        if self._footer.direction() != direction:
            self._footer.setDirection(direction)
            margin = NARROW_MARGIN if narrow else WIDE_MARGIN
            layout = self.layout()
            assert layout is not None  # set in __init__
            margins = layout.contentsMargins()
            margins.setLeft(margin)
            margins.setRight(margin)
            layout.setContentsMargins(margins)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # Files dropped on the editor are attached, not pasted as their paths
        # (drags reach an editor's viewport).
        if watched is self.edit.viewport() and event.type() in (
            QEvent.Type.DragEnter,
            QEvent.Type.DragMove,
            QEvent.Type.Drop,
        ):
            assert isinstance(event, QDropEvent)
            paths = dropped_files(event)
            if paths:
                event.acceptProposedAction()
                if event.type() == QEvent.Type.Drop:
                    self.files_dropped.emit(paths)
                return True
        # The frame draws the focus ring around the whole composer.
        if watched is self.edit and event.type() in (
            QEvent.Type.FocusIn,
            QEvent.Type.FocusOut,
        ):
            self.frame.setProperty("focused", event.type() == QEvent.Type.FocusIn)
            self.frame.style().unpolish(self.frame)
            self.frame.style().polish(self.frame)
        return super().eventFilter(watched, event)

    @Slot()
    def _on_send_button_clicked(self) -> None:
        if self._generating:
            self.stop_clicked.emit()
        else:
            self.send_clicked.emit()
        # The keyboard goes back to the message, to write the next one.
        self.edit.setFocus()

    @Slot(int)
    def _on_reasoning_box_activated(self, index: int) -> None:
        self.reasoning_changed.emit(self.reasoning_box.itemData(index) or None)

    @Slot()
    def _on_cancel_button_clicked(self) -> None:
        self.end_edit()
        self.clear()
        self.edit_cancelled.emit()
