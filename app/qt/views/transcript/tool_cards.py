"""A reply's tool calls and a tool's result, as parts of their message cards.

``ToolCallsPanel`` sits below a reply's text: one frame per call, with the
tool's name, its server, and the arguments exactly as the model sent them.
A call that waits for the user's approval offers Run, Edit arguments and
Deny; only the first waiting call does, because calls run in order (the
others say they wait for it). ``ToolResultView`` is the body of a tool
result's card: what it answers, its size, and its text, folded when long.

Both only show and emit; which calls wait, and what Run does, the window
decides (``TranscriptView.set_waiting_calls``). Words and rules (layout of
the arguments, folding, validating edited arguments) are in the Qt-free
``app/conversation/tool_text.py``.

Their colours come from the palette, through a style sheet of their own
(``palette(...)``), so the light and the dark palette both serve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QFont, QFontDatabase, QTextOption
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.conversation.tool_text import (
    arguments_error,
    fold,
    is_error_result,
    pretty_arguments,
    result_size,
)
from app.qt.views.theme import is_dark
from app.qt.views.transcript.message_body import MessageBody

WAITS_NOTE = "Waits for the call above."
# The most lines the box for editing arguments grows to before it scrolls.
EDIT_MAX_LINES = 16

# Scoped to the panels (the application's style sheet knows nothing of
# them); ``{error}`` is a red that reads on the palette's base.
_STYLE = """
#ToolCall, #ToolResult {{
    border: 1px solid palette(mid);
    border-radius: 8px;
    background: palette(alternate-base);
}}
#ToolResult[error="true"], #ToolErrorBadge {{ border-color: {error}; }}
#ToolCallTitle, #ToolResultTitle {{ font-weight: 600; }}
#ToolServer, #ToolSize, #ToolNote {{ color: palette(placeholder-text); }}
#ToolErrorBadge {{
    color: {error};
    border: 1px solid {error};
    border-radius: 7px;
    padding: 0 6px;
    font-size: 11px;
}}
#ToolInvalid {{ color: {error}; }}
QPlainTextEdit#ToolArgumentsEdit {{
    border: 1px solid palette(mid);
    border-radius: 6px;
    background: palette(base);
}}
QPlainTextEdit#ToolArgumentsEdit:focus {{ border-color: palette(highlight); }}
QPushButton {{
    border: 1px solid palette(mid);
    border-radius: 6px;
    padding: 3px 12px;
    background: palette(base);
}}
QPushButton:hover {{ background: palette(midlight); }}
QPushButton:focus {{ border-color: palette(highlight); }}
QPushButton#ToolRunButton {{
    background: palette(highlight);
    color: palette(highlighted-text);
    border-color: palette(highlight);
    font-weight: 600;
}}
QPushButton#ToolRunButton:hover {{ background: palette(link); }}
QPushButton:disabled, QPushButton#ToolRunButton:disabled {{
    background: palette(midlight);
    color: palette(placeholder-text);
    border-color: palette(midlight);
}}
QToolButton#ToolFoldToggle {{
    color: palette(link);
    border: none;
    padding: 2px 0;
}}
QToolButton#ToolFoldToggle:focus {{ text-decoration: underline; }}
"""


def _style() -> str:
    """The panels' style sheet, its red chosen for the palette now."""
    return _STYLE.format(error="#f47067" if is_dark() else "#c9302c")


def _monospace(widget: QWidget) -> None:
    """Give ``widget`` a fixed-pitch family, its size left as it is: set by
    the style sheet of the zoom (``app/qt/views/chrome/zoom.py``), like any body's."""
    font = QFont(widget.font())
    fixed = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setFamilies(fixed.families())
    font.setStyleHint(QFont.StyleHint.Monospace)
    widget.setFont(font)


def _monospace_text(text: str) -> MessageBody:
    """Selectable monospace text, as tall as it is, wrapped anywhere (a
    JSON string or a log line has no word to break at).

    A ``MessageBody`` by name too, so that the zoom sizes it as it does the
    messages' text.
    """
    body = MessageBody()
    _monospace(body)
    body.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    body.document().setUndoRedoEnabled(False)
    body.setPlainText(text)
    return body


def _label(text: str, name: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName(name)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _button(text: str, name: str, tooltip: str) -> QPushButton:
    button = QPushButton(text)
    button.setObjectName(name)
    button.setToolTip(tooltip)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    return button


class _CallFrame(QFrame):
    """One call: its tool and server, its arguments, and what can be done."""

    run_clicked = Signal(str)
    deny_clicked = Signal(str)
    run_edited_clicked = Signal(str, str)

    def __init__(self, call: Mapping[str, str], server: str) -> None:
        super().__init__()
        self.setObjectName("ToolCall")
        self.call_id = call["id"]
        self.arguments = call["arguments"]
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 8)
        layout.setSpacing(4)
        header = QHBoxLayout()
        header.setSpacing(6)
        layout.addLayout(header)
        self.title = _label(
            f"Calls <code>{escape(call['name'])}</code>", "ToolCallTitle"
        )
        self.title.setTextFormat(Qt.TextFormat.RichText)
        # On one baseline: the title is bold, the server not.
        header.addWidget(self.title, 0, Qt.AlignmentFlag.AlignBaseline)
        self.server_label = _label(f"on {server}" if server else "", "ToolServer")
        self.server_label.setVisible(bool(server))
        header.addWidget(self.server_label, 0, Qt.AlignmentFlag.AlignBaseline)
        header.addStretch(1)
        self.arguments_view = _monospace_text(pretty_arguments(self.arguments))
        self.arguments_view.setToolTip("The arguments as the model sent them")
        layout.addWidget(self.arguments_view)
        self._layout = layout
        # Made when first needed: most calls shown never wait.
        self.note: QLabel | None = None
        self.action_row: QWidget | None = None
        self.editor: QWidget | None = None
        self.waiting = False
        self.first = False
        self._enabled = True

    # --- state ------------------------------------------------------------------

    def set_waiting(self, waiting: bool, first: bool) -> None:
        """Offer the call's actions (``first``: it runs next), say it waits
        for the one above, or show neither (answered or not run)."""
        if (waiting, first) == (self.waiting, self.first):
            return
        self.waiting, self.first = waiting, first
        if waiting and not first and self.note is None:
            self.note = _label(WAITS_NOTE, "ToolNote")
            self._layout.addWidget(self.note)
        if self.note is not None:
            self.note.setVisible(waiting and not first)
        if waiting and first and self.action_row is None:
            self._make_actions()
        if not (waiting and first):
            self._close_editor()
        if self.action_row is not None:
            self.action_row.setVisible(waiting and first and not self.editing)

    @property
    def editing(self) -> bool:
        """Whether the arguments are open for editing."""
        return self.editor is not None and not self.editor.isHidden()

    def set_actions_enabled(self, enabled: bool) -> None:
        """Enable or disable the buttons (the text stays selectable)."""
        self._enabled = enabled
        for button in self.findChildren(QPushButton):
            button.setEnabled(enabled)

    def _make_actions(self) -> None:
        self.action_row = QWidget()
        row = QHBoxLayout(self.action_row)
        row.setContentsMargins(0, 2, 0, 0)
        row.setSpacing(6)
        self.run_button = _button(
            "Run", "ToolRunButton", "Run the tool with these arguments"
        )
        self.run_button.clicked.connect(self._on_run_button_clicked)
        self.edit_button = _button(
            "Edit arguments",
            "ToolEditButton",
            "Change the arguments, then run the tool with them",
        )
        self.edit_button.clicked.connect(self._on_edit_button_clicked)
        self.deny_button = _button(
            "Deny",
            "ToolDenyButton",
            "Do not run it: the model is told the call was denied",
        )
        self.deny_button.clicked.connect(self._on_deny_button_clicked)
        for button in (self.run_button, self.edit_button, self.deny_button):
            row.addWidget(button)
            button.setEnabled(self._enabled)
        row.addStretch(1)
        self._layout.addWidget(self.action_row)

    def _make_editor(self) -> None:
        self.editor = QWidget()
        box = QVBoxLayout(self.editor)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(4)
        self.arguments_edit = QPlainTextEdit()
        self.arguments_edit.setObjectName("ToolArgumentsEdit")
        _monospace(self.arguments_edit)
        self.arguments_edit.setTabChangesFocus(True)
        self.arguments_edit.textChanged.connect(self._on_arguments_edit_text_changed)
        box.addWidget(self.arguments_edit)
        self.invalid_label = _label("", "ToolInvalid")
        self.invalid_label.setWordWrap(True)
        self.invalid_label.hide()
        box.addWidget(self.invalid_label)
        row = QHBoxLayout()
        row.setSpacing(6)
        self.run_edited_button = _button(
            "Run edited", "ToolRunButton", "Run the tool with the arguments above"
        )
        self.run_edited_button.clicked.connect(self._on_run_edited_button_clicked)
        self.cancel_button = _button(
            "Cancel", "ToolCancelButton", "Keep the arguments the model sent"
        )
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)
        for button in (self.run_edited_button, self.cancel_button):
            button.setEnabled(self._enabled)  # a job may run now
            row.addWidget(button)
        row.addStretch(1)
        box.addLayout(row)
        self._layout.addWidget(self.editor)

    def _open_editor(self) -> None:
        if self.editor is None:
            self._make_editor()
        assert self.editor is not None
        self.arguments_edit.setPlainText(pretty_arguments(self.arguments))
        self.invalid_label.hide()
        self._fit_editor()
        self.arguments_view.hide()
        if self.action_row is not None:
            self.action_row.hide()
        self.editor.show()
        self.arguments_edit.setFocus()

    def _close_editor(self) -> None:
        if not self.editing:
            return
        assert self.editor is not None
        self.editor.hide()
        self.arguments_view.show()
        if self.action_row is not None:
            self.action_row.setVisible(self.waiting and self.first)

    def _fit_editor(self) -> None:
        """As tall as its lines, up to ``EDIT_MAX_LINES`` (then it scrolls)."""
        lines = min(EDIT_MAX_LINES, self.arguments_edit.document().blockCount())
        spacing = self.arguments_edit.fontMetrics().lineSpacing()
        margins = self.arguments_edit.contentsMargins()
        frame = 2 * self.arguments_edit.frameWidth() + margins.top() + margins.bottom()
        self.arguments_edit.setFixedHeight((max(3, lines) + 1) * spacing + frame)

    # --- slots ------------------------------------------------------------------

    @Slot()
    def _on_run_button_clicked(self) -> None:
        self.run_clicked.emit(self.call_id)

    @Slot()
    def _on_deny_button_clicked(self) -> None:
        self.deny_clicked.emit(self.call_id)

    @Slot()
    def _on_edit_button_clicked(self) -> None:
        self._open_editor()

    @Slot()
    def _on_cancel_button_clicked(self) -> None:
        self._close_editor()

    @Slot()
    def _on_arguments_edit_text_changed(self) -> None:
        self.invalid_label.hide()  # said of the text before
        self._fit_editor()

    @Slot()
    def _on_run_edited_button_clicked(self) -> None:
        text = self.arguments_edit.toPlainText()
        error = arguments_error(text)
        if error is not None:
            # Inline, and the text stays to be mended: no dialog.
            self.invalid_label.setText(error)
            self.invalid_label.show()
            self.arguments_edit.setFocus()
            return
        self._close_editor()
        self.run_edited_clicked.emit(self.call_id, text)


class ToolCallsPanel(QWidget):
    """The calls a reply made, one frame each, below its text.

    Signals
    -------
    run_call_requested(int, str)
        Run the call (node id, call id) with its arguments as sent.
    deny_call_requested(int, str)
        Do not run the call: the model is to be told so.
    run_edited_call_requested(int, str, str)
        Run the call with these arguments instead (the text of a JSON object).
    """

    run_call_requested = Signal(int, str)
    deny_call_requested = Signal(int, str)
    run_edited_call_requested = Signal(int, str, str)

    def __init__(self, node_id: int | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ToolCalls")
        self.setStyleSheet(_style())
        self.node_id = node_id
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 4, 0, 0)
        layout.setSpacing(6)
        self._layout = layout
        self.frames: list[_CallFrame] = []
        self._shown: tuple[tuple[tuple[str, str, str], ...], tuple[str, ...]] = (
            (),
            (),
        )
        self._waiting: tuple[str, ...] = ()
        self._enabled = True

    def set_calls(
        self, calls: Sequence[Mapping[str, str]], servers: Mapping[str, str]
    ) -> None:
        """Show ``calls`` (each ``{"id", "name", "arguments"}``); ``servers``
        maps a tool's name to the server that offers it, where known."""
        key = tuple((c["id"], c["name"], c["arguments"]) for c in calls)
        named = tuple(servers.get(c["name"], "") for c in calls)
        if (key, named) == self._shown:
            return
        self._shown = (key, named)
        for frame in self.frames:
            self._layout.removeWidget(frame)
            frame.hide()
            frame.deleteLater()
        self.frames = []
        for call, server in zip(calls, named, strict=True):
            frame = _CallFrame(call, server)
            frame.run_clicked.connect(self._on_frame_run_clicked)
            frame.deny_clicked.connect(self._on_frame_deny_clicked)
            frame.run_edited_clicked.connect(self._on_frame_run_edited_clicked)
            self._layout.addWidget(frame)
            self.frames.append(frame)
        self._show_waiting()
        self._show_enabled()

    def set_waiting(self, call_ids: Sequence[str]) -> None:
        """The calls of ``call_ids`` wait for the user; the first of them in
        the reply's order is the one that can run now."""
        self._waiting = tuple(call_ids)
        self._show_waiting()

    def set_actions_enabled(self, enabled: bool) -> None:
        """Enable or disable the calls' buttons (off while a job runs)."""
        self._enabled = enabled
        self._show_enabled()

    def _show_waiting(self) -> None:
        first = True
        for frame in self.frames:
            waiting = frame.call_id in self._waiting
            frame.set_waiting(waiting, first)
            first = first and not waiting

    def _show_enabled(self) -> None:
        for frame in self.frames:
            frame.set_actions_enabled(self._enabled)

    @Slot(str)
    def _on_frame_run_clicked(self, call_id: str) -> None:
        if self.node_id is not None:
            self.run_call_requested.emit(self.node_id, call_id)

    @Slot(str)
    def _on_frame_deny_clicked(self, call_id: str) -> None:
        if self.node_id is not None:
            self.deny_call_requested.emit(self.node_id, call_id)

    @Slot(str, str)
    def _on_frame_run_edited_clicked(self, call_id: str, arguments: str) -> None:
        if self.node_id is not None:
            self.run_edited_call_requested.emit(self.node_id, call_id, arguments)


class ToolResultView(QFrame):
    """A tool result's card body: what it answers, its size, its text (plain,
    monospace), folded to its first lines when long."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ToolResult")
        self.setStyleSheet(_style())
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(4)
        header = QHBoxLayout()
        header.setSpacing(6)
        layout.addLayout(header)
        self.title = _label("", "ToolResultTitle")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        header.addWidget(self.title, 0, Qt.AlignmentFlag.AlignBaseline)
        self.error_badge = QLabel("error")
        self.error_badge.setObjectName("ToolErrorBadge")
        self.error_badge.setToolTip("The tool reported that the call failed")
        self.error_badge.hide()
        header.addWidget(self.error_badge)
        self.size_label = _label("", "ToolSize")
        header.addWidget(self.size_label, 0, Qt.AlignmentFlag.AlignBaseline)
        header.addStretch(1)
        self.text_view = _monospace_text("")
        layout.addWidget(self.text_view)
        self.fold_toggle = QToolButton()
        self.fold_toggle.setObjectName("ToolFoldToggle")
        self.fold_toggle.setCheckable(True)
        self.fold_toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.fold_toggle.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.fold_toggle.toggled.connect(self._on_fold_toggle_toggled)
        self.fold_toggle.hide()
        layout.addWidget(self.fold_toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self._text = ""
        self._lines = 0
        self._name = ""
        self._n_tokens = 0

    @property
    def text(self) -> str:
        """The whole result."""
        return self._text

    @property
    def folded(self) -> bool:
        """Whether only the first lines are shown."""
        return not self.fold_toggle.isHidden() and not self.fold_toggle.isChecked()

    @property
    def shown_text(self) -> str:
        """The text as shown now (folded or whole)."""
        return self.text_view.toPlainText()

    def set_result(self, name: str, text: str, n_tokens: int) -> None:
        """Show the result ``text`` of a call of ``name`` (folded if long)."""
        if (name, text, n_tokens) == (self._name, self._text, self._n_tokens):
            return
        title = f"Result of <code>{escape(name)}</code>" if name else "Result"
        self.title.setText(title)
        self.size_label.setText(result_size(text, n_tokens))
        error = is_error_result(text)
        self.error_badge.setVisible(error)
        if bool(self.property("error")) != error:
            self.setProperty("error", error)
            self.style().unpolish(self)
            self.style().polish(self)
        changed = text != self._text
        self._name, self._text, self._n_tokens = name, text, n_tokens
        if changed:
            head, self._lines = fold(text)
            long = head != text
            self.fold_toggle.blockSignals(True)
            self.fold_toggle.setChecked(False)
            self.fold_toggle.blockSignals(False)
            self.fold_toggle.setVisible(long)
            self._show_folded(True)

    def _show_folded(self, folded: bool) -> None:
        if folded and not self.fold_toggle.isHidden():
            self.text_view.setPlainText(fold(self._text)[0] + "\n…")
            self.fold_toggle.setText(f"Show all ({self._lines:,} lines)")
            self.fold_toggle.setArrowType(Qt.ArrowType.RightArrow)
            self.fold_toggle.setToolButtonStyle(
                Qt.ToolButtonStyle.ToolButtonTextBesideIcon
            )
        else:
            self.text_view.setPlainText(self._text)
            self.fold_toggle.setText("Show less")
            self.fold_toggle.setArrowType(Qt.ArrowType.DownArrow)

    @Slot(bool)
    def _on_fold_toggle_toggled(self, checked: bool) -> None:
        self._show_folded(not checked)
