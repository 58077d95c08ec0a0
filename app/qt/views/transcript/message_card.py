"""``MessageCard``: one message of the transcript with its actions.

A header (role, status, the "< 2/3 >" sibling navigator, actions), then, for a
reply that reasoned, its folded thinking, then the text rendered from
Markdown; below a reply that called tools, its calls (``ToolCallsPanel``).
A tool's result shows as a result in place of Markdown (``ToolResultView``).
The card only emits requests; the window decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import QSize, Qt, Signal, Slot
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.backend.values import MAX_FORKS
from app.conversation.results import StopReason
from app.qt.views.theme import icon
from app.qt.views.transcript.attachment_chips import AttachmentChips
from app.qt.views.transcript.message_body import MessageBody
from app.qt.views.transcript.streaming_body import PART_CHARS, StreamingBody
from app.qt.views.transcript.thinking import ThinkingSection
from app.qt.views.transcript.tool_cards import ToolCallsPanel, ToolResultView
from app.text.attachments import split
from app.window.actions import TIMES
from storage import tool_use as tool_uses
from storage.values import Role, Status

ROLE_TITLES: dict[str, str] = {
    Role.ROOT: "System prompt",
    Role.USER: "You",
    Role.ASSISTANT: "Assistant",
    Role.TOOL: "Tool",
}
STATUS_LABELS: dict[str, str] = {
    Status.STOPPED: "stopped",
    Status.INTERRUPTED: "interrupted",
    Status.GENERATING: "generating…",
    Status.TRUNCATED: "cut off",
}
# A line under the text for statuses that need more than a badge.
STATUS_NOTES: dict[str, str] = {
    Status.TRUNCATED: (
        "Cut off: the context is full — branch from an earlier message or "
        "raise the context size."
    ),
}

# A badge for a complete reply that ended at the length limit, not by itself.
LENGTH_BADGE = "length limit"
LENGTH_TOOLTIP = (
    "The reply stopped at the most tokens a reply may have (Settings → "
    "Max tokens), not where the model ended it."
)


# How a reply ended, where that is worth saying (stored as the reason's word).
_ENDINGS: dict[str, str] = {
    StopReason.MAX_TOKENS: "ended at the length limit",
    StopReason.STOPPED: "stopped by you",
    StopReason.CONTEXT_FULL: "cut off: the context is full",
    StopReason.STOP_STRING: "ended at a stop string",
}


def reply_figures(generation: Mapping[str, Any] | None) -> str:
    """A reply's figures for people: tokens, speed, wait for the first token,
    why it ended ("" when it has none, e.g. a message of the user's)."""
    if not generation or "generated_tokens" not in generation:
        return ""
    parts = [f"{int(generation['generated_tokens']):,} tokens"]
    speed = generation.get("tokens_per_second")
    if speed:
        parts.append(f"{float(speed):,.1f} tokens/s")
    waited = generation.get("prompt_ms")
    if waited is not None:
        parts.append(f"first token after {float(waited) / 1000:,.2f} s")
    ended = _ENDINGS.get(str(generation.get("stop_reason")))
    if ended:
        parts.append(ended)
    return " · ".join(parts)


_COPY_TOOLTIPS: dict[str, str] = {
    Role.ASSISTANT: "Copy the answer",
    Role.TOOL: "Copy the result",
}
# What "Edit" does, on the cards that offer it (a reply is regenerated instead).
_EDIT_TOOLTIPS: dict[str, str] = {
    Role.USER: "Edit: creates a new branch, nothing is erased",
    Role.ROOT: "Change the system prompt: a new start beside this one, "
    "nothing is erased",
    Role.TOOL: "Edit the result: a new result beside this one, and the reply "
    "goes on from it; nothing is erased",
}


# The "Regenerate N times" choices of a reply's regenerate menu: up to four,
# the most that read side by side in the transcript (the engine makes more
# together for API clients).
ALTERNATIVE_COUNTS = tuple(range(2, min(MAX_FORKS, 4) + 1))


class MessageCard(QFrame):
    """A message; ``node_id`` is None while a reply streams in.

    ``text`` is the message (for a reply: the answer); ``thinking`` is a
    reply's reasoning, shown folded above the answer ("" shows no section).
    ``tool_use`` is the node's part in tool use (``storage.tool_use``): a
    reply's calls, or the call a tool's result answers; ``n_tokens`` the
    node's size, said on a result.

    Signals
    -------
    sibling_requested(int)
        Show the sibling with this node id instead.
    edit_requested(int), regenerate_requested(int), branch_requested(int),
    continue_requested(int)
        The action was chosen on this card's node.
    alternatives_requested(int, int)
        "Regenerate N times" was chosen on this reply: N new replies, together.
    run_call_requested(int, str), deny_call_requested(int, str),
    run_edited_call_requested(int, str, str)
        Forwarded from the reply's ``ToolCallsPanel`` (node id, call id, and
        the edited arguments).
    """

    sibling_requested = Signal(int)
    edit_requested = Signal(int)
    regenerate_requested = Signal(int)
    continue_requested = Signal(int)
    alternatives_requested = Signal(int, int)
    branch_requested = Signal(int)
    run_call_requested = Signal(int, str)
    deny_call_requested = Signal(int, str)
    run_edited_call_requested = Signal(int, str, str)

    def __init__(
        self,
        role: str,
        text: str,
        node_id: int | None = None,
        siblings: list[int] | None = None,
        status: str = Status.COMPLETE,
        thinking: str = "",
        parent: QWidget | None = None,
        *,
        tool_use: Mapping[str, Any] | None = None,
        n_tokens: int = 0,
    ) -> None:
        super().__init__(parent)
        self.node_id = node_id
        self.role = role
        self.status = status
        self._text = text
        self._tool_use: dict[str, Any] | None = dict(tool_use) if tool_use else None
        self._n_tokens = n_tokens
        self._servers: dict[str, str] = {}
        self._tool_actions_enabled = True
        self._siblings = siblings or ([node_id] if node_id is not None else [])
        self.setObjectName("MessageCard")
        self.setProperty("role", role)
        self.setProperty("streaming", node_id is None)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 8, 14, 10)
        layout.setSpacing(4)
        header = QHBoxLayout()
        header.setSpacing(6)
        # In the card first, so that what is added to it belongs to the card
        # at once (a navigator shown before would be a window of its own).
        layout.addLayout(header)
        title = QLabel(ROLE_TITLES.get(role, role))
        title.setObjectName("MessageRole")
        title.setProperty("role", role)
        header.addWidget(title)
        self._title = title
        if status in STATUS_LABELS:
            badge = QLabel(STATUS_LABELS[status])
            badge.setObjectName("MessageStatus")
            header.addWidget(badge)
        # Where the badge and the "Continue" of a reply that ended at the
        # length limit go, made when one does (``show_generation``): most
        # cards never need them, and every widget costs a card its polish.
        self._limit_at = header.count()
        self.length_badge: QLabel | None = None
        self.continue_button: QToolButton | None = None
        header.addStretch(1)
        self._header = header
        # Where the "< 2/3 >" navigator goes (made when a sibling appears).
        self._navigator_at = header.count()
        if node_id is not None:
            self._show_navigator()
            self._add_actions(header)
        self._layout = layout

        self.thinking_section: ThinkingSection | None = None
        self.body = MessageBody()
        layout.addWidget(self.body)
        # A message of the user's may carry files: chips below its words,
        # made when it has some (``set_text``).
        self.attachments: AttachmentChips | None = None
        # A long reply while it streams, in its place (see ``stream_text``).
        self.streaming_parts: StreamingBody | None = None
        # A reply's calls below its text, made when it has some; a tool's
        # result in place of the body (``set_text``).
        self.tool_calls: ToolCallsPanel | None = None
        self.tool_result: ToolResultView | None = None
        if thinking:
            self.set_thinking(thinking)
        self.set_text(text)
        self._show_calls()
        if status in STATUS_NOTES:
            note = QLabel(STATUS_NOTES[status])
            note.setObjectName("MessageNote")
            note.setWordWrap(True)
            layout.addWidget(note)

    def show_generation(self, generation: Mapping[str, Any] | None) -> None:
        """Show how a reply was made: its figures on hover, a badge when it
        ended at the length limit."""
        figures = reply_figures(generation)
        self._title.setToolTip(figures)
        self.setToolTip(figures)
        at_limit = generation is not None and (
            generation.get("stop_reason") == StopReason.MAX_TOKENS
        )
        if at_limit and self.length_badge is None:
            self._make_limit_widgets()
        if self.length_badge is not None and self.continue_button is not None:
            self.length_badge.setVisible(at_limit)
            self.continue_button.setVisible(at_limit and self.node_id is not None)

    def _make_limit_widgets(self) -> None:
        # The badge, and a way on from it: a longer sibling that starts with it.
        self.length_badge = QLabel(LENGTH_BADGE)
        self.length_badge.setObjectName("MessageStatus")
        self.length_badge.setToolTip(LENGTH_TOOLTIP)
        self.continue_button = QToolButton()
        self.continue_button.setText("Continue")
        self.continue_button.setObjectName("ContinueButton")
        self.continue_button.setToolTip(
            "Go on from where this reply stopped: a longer version of it, as a "
            "new branch beside it (this one stays)"
        )
        self.continue_button.clicked.connect(self._on_continue_button_clicked)
        branch = getattr(self, "branch_button", None)  # while a reply runs: off
        self.continue_button.setEnabled(branch is None or branch.isEnabled())
        self._header.insertWidget(self._limit_at, self.length_badge)
        self._header.insertWidget(self._limit_at + 1, self.continue_button)
        self._navigator_at += 2

    @property
    def text(self) -> str:
        """The message's text (Markdown source)."""
        return self._text

    @property
    def thinking(self) -> str:
        """The reply's reasoning ("" if none)."""
        return self.thinking_section.text if self.thinking_section else ""

    def shows(self, role: str, text: str, status: str, thinking: str) -> bool:
        """Whether this card shows exactly this message (its siblings aside):
        the transcript then reuses it rather than rendering it again."""
        return (role, text, status, thinking) == (
            self.role,
            self._text,
            self.status,
            self.thinking,
        )

    def attach(
        self, node_id: int, siblings: list[int], text: str, thinking: str
    ) -> None:
        """Make this card of a message not yet stored (a question just sent,
        a reply that streamed) the card of stored ``node_id``.

        Its actions and navigator appear and it looks settled; the text and
        reasoning are drawn again only where they differ from what streamed.
        Cheaper than a new card, at the end of every reply.
        """
        assert self.node_id is None, "the card shows a stored message already"
        self.node_id = node_id
        self._siblings = list(siblings)
        self.setProperty("streaming", False)
        self.style().unpolish(self)  # the border of a streaming card goes
        self.style().polish(self)
        self._show_navigator()
        self._add_actions(self._header)
        if thinking or self.thinking_section is not None:
            self.set_thinking(thinking)  # folded, now that it is done
        if text != self._text or not text or self.streaming_parts is not None:
            # An empty text reads differently once stored; a long one is
            # shown in one body again.
            self.set_text(text)

    def set_siblings(self, siblings: list[int]) -> None:
        """Show the card's place among ``siblings`` (a reply was added or deleted)."""
        if self.node_id is None or siblings == self._siblings:
            return
        self._siblings = list(siblings)
        self._show_navigator()

    @property
    def sibling_position(self) -> tuple[int, int]:
        """(1-based position, count) among its siblings."""
        if self.node_id is None:
            return (1, 1)
        return (self._siblings.index(self.node_id) + 1, len(self._siblings))

    def stream_text(self, text: str) -> None:
        """Show the streaming reply's ``text`` so far.

        A long one is shown part by part (``StreamingBody``), so that each
        drawing renders only what changed; ``set_text`` and ``attach`` put it
        back in one body.
        """
        if self.streaming_parts is None and len(text) < PART_CHARS:
            self.set_text(text)
            return
        self._text = text
        if self.streaming_parts is None:
            self.streaming_parts = StreamingBody()
            self._layout.insertWidget(
                self._layout.indexOf(self.body), self.streaming_parts
            )
            self.body.hide()
        self.streaming_parts.set_markdown(text, self._code_background())

    def set_text(self, text: str) -> None:
        """Show ``text`` (a message of the user's: its words, its files as chips)."""
        self._text = text
        if self.role == Role.USER:
            text, files = split(text)
            if files and self.attachments is None:
                self.attachments = AttachmentChips(removable=False)
                self._layout.insertWidget(
                    self._layout.indexOf(self.body) + 1, self.attachments
                )
            if self.attachments is not None:
                self.attachments.set_files(files)
        if self.streaming_parts is not None:
            self.streaming_parts.hide()
            self.streaming_parts.deleteLater()
            self.streaming_parts = None
        if self.role == Role.TOOL:
            self._show_result()
            return
        # While a reply is still thinking, the open thinking section is the
        # progress indicator; a "…" under it would only add noise.
        thinking_only = self.node_id is None and self.thinking_section is not None
        self.body.setVisible(bool(text) or not thinking_only)
        if not text:
            if self.node_id is None:
                self.body.setHtml("<i>…</i>")
            elif self.thinking_section is not None:
                self.body.setHtml("<i>(no answer: the reply ended while thinking)</i>")
            elif self.role == Role.ROOT:  # a start of several, with no prompt
                self.body.setHtml("<i>(none: the model's own default)</i>")
            elif tool_uses.calls_of(self._tool_use):
                self.body.hide()  # a reply that only calls: its calls say it
            else:
                self.body.setHtml("<i>(empty)</i>")
            return
        self.body.set_markdown(text, self._code_background())

    # --- tool use -----------------------------------------------------------------

    def show_tool_use(
        self,
        tool_use: Mapping[str, Any] | None,
        n_tokens: int = 0,
        servers: Mapping[str, str] | None = None,
    ) -> None:
        """Show the node's part in tool use: a reply's calls (``servers``:
        which server offers each tool, where known), or the call a result
        answers and its size. Cheap when nothing changed."""
        use = dict(tool_use) if tool_use else None
        servers = dict(servers or {})
        if (use, n_tokens, servers) == (self._tool_use, self._n_tokens, self._servers):
            return
        self._tool_use, self._n_tokens, self._servers = use, n_tokens, servers
        if self.role == Role.TOOL:
            self._show_result()
        else:
            self._show_calls()

    def set_waiting_calls(self, call_ids: Sequence[str]) -> None:
        """Which of the reply's calls wait for the user (the first offers Run,
        Edit arguments and Deny); the others show no buttons."""
        if self.tool_calls is not None:
            self.tool_calls.set_waiting(call_ids)

    def set_tool_actions_enabled(self, enabled: bool) -> None:
        """Enable or disable the calls' buttons (off while a job runs)."""
        self._tool_actions_enabled = enabled
        if self.tool_calls is not None:
            self.tool_calls.set_actions_enabled(enabled)

    def _show_calls(self) -> None:
        """The calls panel below the text: made, updated, or gone."""
        calls = tool_uses.calls_of(self._tool_use)
        if not calls:
            if self.tool_calls is not None:
                self._layout.removeWidget(self.tool_calls)
                self.tool_calls.hide()
                self.tool_calls.deleteLater()
                self.tool_calls = None
            return
        if self.tool_calls is None:
            self.tool_calls = ToolCallsPanel(self.node_id)
            self.tool_calls.set_actions_enabled(self._tool_actions_enabled)
            self.tool_calls.run_call_requested.connect(self.run_call_requested)
            self.tool_calls.deny_call_requested.connect(self.deny_call_requested)
            self.tool_calls.run_edited_call_requested.connect(
                self.run_edited_call_requested
            )
            # Below the text and its files, above a status note.
            below = self.attachments if self.attachments is not None else self.body
            self._layout.insertWidget(self._layout.indexOf(below) + 1, self.tool_calls)
        self.tool_calls.node_id = self.node_id
        self.tool_calls.set_calls(calls, self._servers)
        if not self.text.strip() and self.thinking_section is None:
            self.body.hide()  # a reply that only calls: no "(empty)" above

    def _show_result(self) -> None:
        """A tool's result in place of the Markdown body."""
        if self.tool_result is None:
            self.tool_result = ToolResultView()
            self._layout.insertWidget(self._layout.indexOf(self.body), self.tool_result)
            self.body.hide()
        _call_id, name = tool_uses.answered_call(self._tool_use)
        self.tool_result.set_result(name, self._text, self._n_tokens)

    def show_waiting(self, note: str) -> None:
        """Say what a reply that has no text yet waits for (a long prompt
        being read); its first text replaces the note."""
        if self.node_id is None and not self._text:
            self.body.setPlainText(note)

    def _code_background(self) -> QColor:
        if self.role == Role.USER:
            return self.palette().color(QPalette.ColorRole.Base)
        return self.palette().color(QPalette.ColorRole.AlternateBase)

    def set_thinking(self, thinking: str, streaming: bool = False) -> None:
        """Show the reply's reasoning above its answer.

        ``streaming`` keeps the section open under "Thinking…" while the
        reasoning comes in; without it the section is folded to one line.
        """
        if self.thinking_section is None:
            self.thinking_section = ThinkingSection()
            # Between the header and the answer.
            self._layout.insertWidget(
                self._layout.indexOf(self.body), self.thinking_section
            )
            if self.node_id is None and not self._text:
                self.body.hide()
        self.thinking_section.set_text(thinking)
        self.thinking_section.set_streaming(streaming)

    # --- header ---------------------------------------------------------------------

    def _tool_button(
        self, name: str, tooltip: str, object_name: str = "MessageAction"
    ) -> QToolButton:
        button = QToolButton()
        button.setObjectName(object_name)
        button.setIcon(icon(name))
        button.setIconSize(QSize(15, 15))
        button.setToolTip(tooltip)
        button.setAutoRaise(True)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        return button

    def _show_navigator(self) -> None:
        """The "< 2/3 >" navigator, made when the message first has siblings,
        hidden while it has none."""
        position, count = self.sibling_position
        if not hasattr(self, "sibling_label"):
            if count < 2:
                return
            self._make_navigator()
        self.sibling_label.setText(f"{position}/{count}")
        self.previous_button.setEnabled(position > 1)
        self.next_button.setEnabled(position < count)
        for widget in (self.previous_button, self.sibling_label, self.next_button):
            widget.setVisible(count > 1)

    def _make_navigator(self) -> None:
        self.previous_button = self._tool_button(
            "chevron-left", "Previous version", "SiblingButton"
        )
        self.previous_button.clicked.connect(self._on_previous_button_clicked)
        self.sibling_label = QLabel()
        self.sibling_label.setObjectName("SiblingLabel")
        self.next_button = self._tool_button(
            "chevron-right", "Next version", "SiblingButton"
        )
        self.next_button.clicked.connect(self._on_next_button_clicked)
        at = self._navigator_at
        for offset, widget in enumerate(
            (self.previous_button, self.sibling_label, self.next_button)
        ):
            self._header.insertWidget(at + offset, widget)
        self._header.insertSpacing(at + 3, 8)

    def _add_actions(self, header: QHBoxLayout) -> None:
        self.copy_button = self._tool_button(
            "copy",
            _COPY_TOOLTIPS.get(self.role, "Copy the text"),
        )
        self.copy_button.clicked.connect(self._on_copy_button_clicked)
        header.addWidget(self.copy_button)
        if self.role in _EDIT_TOOLTIPS:
            self.edit_button = self._tool_button("edit", _EDIT_TOOLTIPS[self.role])
            self.edit_button.clicked.connect(self._on_edit_button_clicked)
            header.addWidget(self.edit_button)
        if self.role == Role.ASSISTANT:
            self.regenerate_button = self._tool_button(
                "regenerate", "Regenerate: a new reply beside this one"
            )
            self.regenerate_button.clicked.connect(self._on_regenerate_button_clicked)
            # Its menu (the arrow beside it): several replies generated together.
            menu = QMenu(self.regenerate_button)
            for n in ALTERNATIVE_COUNTS:
                action = menu.addAction(f"Regenerate {TIMES}{n} (side by side)")
                action.triggered.connect(
                    lambda _checked=False, n=n: self._request_alternatives(n)
                )
            self.regenerate_button.setMenu(menu)
            self.regenerate_button.setPopupMode(
                QToolButton.ToolButtonPopupMode.MenuButtonPopup
            )
            header.addWidget(self.regenerate_button)
        self.branch_button = self._tool_button(
            "branch", "Branch from here: continue from this message"
        )
        self.branch_button.clicked.connect(self._on_branch_button_clicked)
        header.addWidget(self.branch_button)

    # --- slots ----------------------------------------------------------------------

    @Slot()
    def _on_previous_button_clicked(self) -> None:
        position, _count = self.sibling_position
        self.sibling_requested.emit(self._siblings[position - 2])

    @Slot()
    def _on_next_button_clicked(self) -> None:
        position, _count = self.sibling_position
        self.sibling_requested.emit(self._siblings[position])

    @Slot()
    def _on_copy_button_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self._text)

    @Slot()
    def _on_edit_button_clicked(self) -> None:
        assert self.node_id is not None
        self.edit_requested.emit(self.node_id)

    @Slot()
    def _on_regenerate_button_clicked(self) -> None:
        assert self.node_id is not None
        self.regenerate_requested.emit(self.node_id)

    def _request_alternatives(self, n: int) -> None:
        assert self.node_id is not None
        self.alternatives_requested.emit(self.node_id, n)

    @Slot()
    def _on_branch_button_clicked(self) -> None:
        assert self.node_id is not None
        self.branch_requested.emit(self.node_id)

    @Slot()
    def _on_continue_button_clicked(self) -> None:
        if self.node_id is not None:
            self.continue_requested.emit(self.node_id)
