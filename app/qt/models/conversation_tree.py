"""``ConversationTreeModel``: the whole conversation tree for a ``QTreeView``.

Items wrap node ids of a ``TreeSnapshot``; refreshing with a newer snapshot of
the same conversation turns the difference into row insertions, removals,
moves and ``dataChanged`` signals, so views keep their expansion, selection
and scroll.

The list is indented at forks only. A conversation is mostly a chain of
single replies, and one level per message made a staircase that cut the
labels off by the sixth turn. So a message that is its parent's only child is
the row after its parent, under the same Qt parent; the children of a fork (a
message with two or more) are rows under the fork, one branch after the
other, each branch a chain at one level. The top level is the chain from the
root::

    Start
    You: hi
    Assistant: hello             a fork: two messages answer it
        You: tell me more        the first branch
        Assistant: ...
        You: something else      the second branch
        Assistant: ...

A second child makes a message a fork: the branch it had moves under it
(``beginMoveRows``), then the new one is inserted. When a fork is left with
one branch, that branch moves back up, to the rows after the fork.

Under a fork the branches must still read apart at a glance (a user could
not tell the two versions of an edited first message from each other): each
branch's first row, a "head", carries a k/n mark in front of it, the rest
of its branch is set in by the mark's width (``Qt.DecorationRole``: a small
pixmap, painted by Qt's own delegate), and where the heads' texts begin
alike, their labels start where they differ ("You: …in one sentence?").
A message of tool use carries a mark too: ⚙ a reply that calls tools, ↩ a
tool's result, its tooltip naming the tool.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from PySide6.QtCore import (
    QAbstractItemModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QGuiApplication,
    QPainter,
    QPalette,
    QPixmap,
)

from app.conversation.tool_text import label_text
from app.conversation.tree_snapshot import TreeSnapshot
from app.text.plain_text import shorten
from app.text.plain_text import snippet as plain_snippet
from app.text.quantities import format_bytes
from storage import tool_use
from storage.records import NodeSummary
from storage.values import Role, Status

NodeIdRole = Qt.ItemDataRole.UserRole + 1
MessageRoleRole = Qt.ItemDataRole.UserRole + 2  # "root", "user" or "assistant"
OnActivePathRole = Qt.ItemDataRole.UserRole + 3
IsActiveRole = Qt.ItemDataRole.UserRole + 4
HasCheckpointRole = Qt.ItemDataRole.UserRole + 5
TokensRole = Qt.ItemDataRole.UserRole + 6

COLUMNS = ("Message", "Tokens", "Saved")
# What the columns' titles mean, on hover (short titles leave the messages room).
COLUMN_TIPS = (
    "The message",
    "How many tokens the message takes of the context",
    "✓: saved with the model's state after it, so going back to it is instant",
)
# What a new active node changes in a row (its text and figures stay).
ACTIVE_PATH_ROLES = (
    Qt.ItemDataRole.FontRole,
    Qt.ItemDataRole.BackgroundRole,
    OnActivePathRole,
    IsActiveRole,
)
SNIPPET_CHARS = 60
ROLE_LABELS: dict[str, str] = {
    Role.ROOT: "Start",
    Role.USER: "You",
    Role.ASSISTANT: "Assistant",
    Role.TOOL: "Tool",
}
# The root's label when it holds a system prompt.
ROOT_WITH_PROMPT = "System prompt"
# What a reply being written says before its text is stored (a row shown
# while it streams: the window reads the tree when the reply is stored).
WRITING = "writing…"
# The Checkpoint column's mark of a message that restores instantly.
SAVED_MARK = "✓"
# How a start restored from another start's checkpoint says so.
SHARED_START = "shared with the same start of another conversation"

# Translucent so that it reads on light and dark palettes alike.
ACTIVE_PATH_BACKGROUND = QColor(64, 132, 214, 48)

# The marks of tool use, in the list and the graph: a reply that calls tools,
# and a tool's result; drawn in an amber that reads on light and dark alike.
TOOL_GLYPHS = {"call": "⚙", "result": "↩"}
TOOL_TINT = QColor(206, 128, 20)
# How many words two siblings' texts must begin with alike before their
# labels skip them, and how many of those a label keeps before the first
# word that differs.
SHARED_WORDS_MIN = 4
CONTEXT_WORDS = 1
# How much of each sibling's text is compared.
COMPARED_CHARS = 400

Index = QModelIndex | QPersistentModelIndex

# What every row answers the same (an enum's "|" costs microseconds in Python,
# and the view asks these of every cell it paints).
_FLAGS = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
_FIGURES_ALIGNMENT = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
_DISPLAY = int(Qt.ItemDataRole.DisplayRole)
_TOOLTIP = int(Qt.ItemDataRole.ToolTipRole)
_ALIGNMENT = int(Qt.ItemDataRole.TextAlignmentRole)
_FONT = int(Qt.ItemDataRole.FontRole)
_BACKGROUND = int(Qt.ItemDataRole.BackgroundRole)
_DECORATION = int(Qt.ItemDataRole.DecorationRole)
_ANSWERED_ROLES = frozenset(
    int(role)
    for role in (
        _DISPLAY,
        _DECORATION,
        _TOOLTIP,
        _ALIGNMENT,
        _FONT,
        _BACKGROUND,
        NodeIdRole,
        MessageRoleRole,
        OnActivePathRole,
        IsActiveRole,
        HasCheckpointRole,
        TokensRole,
    )
)
# Labels kept made: a paint asks each visible row's several times, and making
# one reduces the message's whole Markdown to words.
LABELS_KEPT = 4096


def snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """One line of ``text``'s words (no Markdown), shortened to ``limit``."""
    return plain_snippet(text, limit)


@functools.lru_cache(maxsize=LABELS_KEPT)
def row_label(role: str, text: str, thought: bool) -> str:
    """A message's row in the list: who, and its first words (``thought``:
    the reply has reasoning, which shows when its answer is empty)."""
    if role == Role.ROOT:
        # The conversation's start, in plain words: its system prompt if it
        # has one (the figures are in the tooltip).
        if text.strip():
            return f"{ROOT_WITH_PROMPT}: {snippet(text)}"
        return ROLE_LABELS[Role.ROOT]
    label = ROLE_LABELS.get(role, role)
    if text.strip():
        return f"{label}: {snippet(text)}"  # a reply's answer, never its thinking
    return f"{label}: {'(thinking only)' if thought else '(empty)'}"


def offered_tools_note(node: NodeSummary) -> str:
    """What a start offers the model, after its label (" · 2 tools"); ""
    for any other node. A branch with tools goes on under a start of its
    own, beside the one without them: this tells the two apart."""
    if node.role != Role.ROOT:
        return ""
    count = len(tool_use.tools_of(node.tool_use))
    if not count:
        return ""
    return f" · {count} tool{'s' if count != 1 else ''}"


def tool_mark(node: NodeSummary) -> tuple[str, str] | None:
    """A node's part in tool use, as its mark says it: ``("call", "calls
    get_time")`` for a reply that calls tools, ``("result", "result of
    get_time")`` for a tool's result, else None."""
    if node.role == Role.TOOL:
        _call_id, name = tool_use.answered_call(node.tool_use)
        return "result", f"result of {name or 'a tool'}"
    calls = tool_use.calls_of(node.tool_use)
    if calls:
        names = ", ".join(dict.fromkeys(call["name"] or "a tool" for call in calls))
        return "call", f"calls {names}"
    return None


def label_source(node: NodeSummary) -> str:
    """What a node's label is made from: its text, and its tool use in words
    ("Calls `get_time`", "Result of `get_time`: …")."""
    if node.tool_use is None:
        return node.text
    return label_text(node.role, node.text, node.tool_use)


@functools.lru_cache(maxsize=LABELS_KEPT)
def _words(text: str) -> tuple[str, ...]:
    return tuple(snippet(text, COMPARED_CHARS).split())


def differing_text(text: str, others: Iterable[str]) -> str | None:
    """``text`` from where it departs from the most alike of ``others``, as
    ``"…in one sentence?"``; None when they do not begin alike for
    ``SHARED_WORDS_MIN`` words (the label's own start tells them apart), or
    when ``text`` is all shared (it has no words of its own to show)."""
    words = _words(text)
    shared = 0
    for other in others:
        theirs = _words(other)
        count = 0
        for mine, their in zip(words, theirs, strict=False):
            if mine != their:
                break
            count += 1
        shared = max(shared, count)
    if shared < SHARED_WORDS_MIN or shared >= len(words):
        return None
    return "…" + " ".join(words[shared - CONTEXT_WORDS :])


@functools.lru_cache(maxsize=LABELS_KEPT)
def branch_label(role: str, text: str, thought: bool, others: tuple[str, ...]) -> str:
    """The label of a branch's first message among its siblings' ``others``:
    where its text differs from theirs, or ``row_label`` where it needs not."""
    differing = differing_text(text, others)
    if differing is None:
        return row_label(role, text, thought)
    return f"{ROLE_LABELS.get(role, role)}: {shorten(differing, SNIPPET_CHARS)}"


def _writing(node: NodeSummary) -> bool:
    """Whether ``node`` is a reply being written with no text stored yet
    (its label says so rather than "(empty)")."""
    return node.status == Status.GENERATING and not label_source(node).strip()


# What the marks' pixmaps are drawn in, and the pixmaps made: a handful of
# kinds ("2/3" and a gear, say), each made once per palette and font.
_MARK_PIXMAPS: dict[tuple[str | None, str | None, int, str], QPixmap] = {}
# A branch's mark: k of n between angle quotation marks, as the transcript
# frames "1/2" with its chevrons (plain "<" and ">" read as operators).
BRANCH_MARK = "\u2039{}/{}\u203a"
# The widest k/n mark that sets all branches' rows in alike.
_LEAD_SAMPLE = BRANCH_MARK.format(8, 8)


def _mark_pixmap(lead: str | None, tool: str | None) -> QPixmap:
    """``lead`` (a k/n mark, or "" for its blank) and ``tool``'s glyph."""
    palette = QGuiApplication.palette()
    muted = palette.color(QPalette.ColorRole.PlaceholderText)
    font = QGuiApplication.font()
    key = (lead, tool, muted.rgba(), font.key())
    made = _MARK_PIXMAPS.get(key)
    if made is not None:
        return made
    small = QFont(font)
    if font.pointSizeF() > 0:
        small.setPointSizeF(font.pointSizeF() * 0.85)
    metrics = QFontMetrics(small)
    lead_width = 0
    if lead is not None:
        lead_width = max(
            metrics.horizontalAdvance(_LEAD_SAMPLE), metrics.horizontalAdvance(lead)
        )
    glyph = TOOL_GLYPHS[tool] if tool else ""
    bold = QFont(font)
    bold.setBold(True)
    glyph_width = QFontMetrics(bold).horizontalAdvance(glyph) + 4 if glyph else 0
    # Inside a branch, the glyph stands in the blank before the row's text,
    # which then lines up with its neighbours'.
    inside = lead == "" and glyph_width <= lead_width
    height = QFontMetrics(font).height()
    screen = QGuiApplication.primaryScreen()  # sharp on a high-density screen
    ratio = screen.devicePixelRatio() if screen is not None else 1.0
    width = lead_width if inside else lead_width + glyph_width
    pixmap = QPixmap(round(width * ratio), round(height * ratio))
    pixmap.setDevicePixelRatio(ratio)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.TextAntialiasing)
    if lead:
        painter.setFont(small)
        painter.setPen(muted)
        painter.drawText(0, 0, lead_width, height, Qt.AlignmentFlag.AlignCenter, lead)
    if glyph:
        painter.setFont(bold)
        painter.setPen(TOOL_TINT)
        painter.drawText(
            width - glyph_width,
            0,
            glyph_width,
            height,
            Qt.AlignmentFlag.AlignCenter,
            glyph,
        )
    painter.end()
    _MARK_PIXMAPS[key] = pixmap
    return pixmap


class _Item:
    """A node's row: its id, the item it is a row of and the rows under it.

    ``parent`` is the Qt parent (the fork the row's branch starts at), not
    the node's parent message. ``row`` is kept by the model: a chain's rows
    are many, and looking a row up in them each time would cost their number.
    """

    __slots__ = ("children", "node_id", "parent", "row")

    def __init__(self, node_id: int | None, parent: _Item | None) -> None:
        self.node_id = node_id
        self.parent = parent
        self.children: list[_Item] = []
        self.row = 0


class ConversationTreeModel(QAbstractItemModel):
    """Every node of one conversation; the active path is marked by roles.

    Parameters
    ----------
    parent
        The Qt parent.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._snapshot = TreeSnapshot.empty()
        self._root = _Item(None, None)
        self._items: dict[int, _Item] = {}
        # The children of each node the model shows (of None: the roots), as
        # rows are inserted and removed: while a snapshot is being applied,
        # neither the old one nor the new one says how the rows stand.
        self._children: dict[int | None, list[int]] = {None: []}
        self._active_id: int | None = None
        self._active_path: set[int] = set()
        self._bold = QFont()
        self._bold.setBold(True)

    # --- public API ---------------------------------------------------------------

    @property
    def snapshot(self) -> TreeSnapshot:
        """The tree being shown."""
        return self._snapshot

    @property
    def active_id(self) -> int | None:
        """The active node."""
        return self._active_id

    def set_snapshot(self, snapshot: TreeSnapshot) -> None:
        """Show ``snapshot``: a reset for another conversation, else row changes."""
        if (
            snapshot.conversation_id != self._snapshot.conversation_id
            or snapshot.roots != self._snapshot.roots
        ):  # another conversation, or a start added or deleted: rows afresh
            self.beginResetModel()
            self._snapshot = snapshot
            self._build()
            self._active_id, self._active_path = None, set()
            self.endResetModel()
            return
        old = self._snapshot
        self._remove_missing(snapshot)
        self._snapshot = snapshot
        # Parents come before their children: ids grow.
        for node_id in sorted(snapshot.nodes):
            if node_id not in self._items:
                self._insert(node_id)
            elif old.nodes[node_id] != snapshot.nodes[node_id]:
                self._emit_row_changed(node_id)
                parent_id = snapshot.nodes[node_id].parent_id
                if parent_id is not None and len(self._children[parent_id]) > 1:
                    # The other heads' labels say where they differ from it.
                    self._emit_siblings_changed(parent_id, node_id)
        if self._active_id is not None and self._active_id not in snapshot:
            self.set_active(None)

    def set_active(self, node_id: int | None) -> None:
        """Mark ``node_id`` and its ancestors as the active path."""
        new_path = (
            set(self._snapshot.path(node_id))
            if node_id is not None and node_id in self._snapshot
            else set()
        )
        changed = (new_path ^ self._active_path) | {
            n for n in (self._active_id, node_id) if n is not None
        }
        self._active_id = node_id if node_id in self._snapshot else None
        self._active_path = new_path
        self._emit_rows_changed(
            [self._items[n] for n in changed if n in self._items], ACTIVE_PATH_ROLES
        )

    def has_nested_rows(self) -> bool:
        """Whether any row has rows under it (a fork, or a start of several)."""
        return any(item.children for item in self._root.children)

    def index_of(self, node_id: int, column: int = 0) -> QModelIndex:
        """The index of a node (invalid if unknown)."""
        item = self._items.get(node_id)
        if item is None:
            return QModelIndex()
        return self.createIndex(item.row, column, item)

    # --- QAbstractItemModel ---------------------------------------------------------

    def index(
        self,
        row: int,
        column: int,
        parent: Index = QModelIndex(),  # noqa: B008 - Qt's own signature
    ) -> QModelIndex:
        # Bounds checked here rather than by hasIndex, which asks rowCount and
        # columnCount through Python: the tree view asks every row's index
        # when it lays out its rows (a 1,000-message path: 1,000 times).
        parent_item = parent.internalPointer() if parent.isValid() else self._root
        if parent.column() > 0 or not (
            0 <= row < len(parent_item.children) and 0 <= column < len(COLUMNS)
        ):
            return QModelIndex()
        return self.createIndex(row, column, parent_item.children[row])

    def parent(self, child: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not child.isValid():
            return QModelIndex()
        parent_item = child.internalPointer().parent
        if parent_item is None or parent_item is self._root:
            return QModelIndex()
        return self.createIndex(parent_item.row, 0, parent_item)

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        if parent.column() > 0:
            return 0
        item = parent.internalPointer() if parent.isValid() else self._root
        return len(item.children)

    def hasChildren(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        # Qt's own asks rowCount and columnCount, and calling rowCount from
        # here is one more: the view asks this of every row it lays out.
        if parent.column() > 0:
            return False
        item = parent.internalPointer() if parent.isValid() else self._root
        return bool(item.children)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return len(COLUMNS)

    def headerData(
        self,
        section: int,
        orientation: Qt.Orientation,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> Any:
        if orientation != Qt.Orientation.Horizontal or not 0 <= section < len(COLUMNS):
            return None
        if role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        if role == Qt.ItemDataRole.ToolTipRole:
            return COLUMN_TIPS[section]
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        return _FLAGS

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        # The view asks seven roles of every cell it paints, most of which a
        # row does not answer: those return before anything is looked up.
        if role not in _ANSWERED_ROLES or not index.isValid():
            return None
        item = index.internalPointer()
        node_id = item.node_id
        node = self._snapshot.nodes[node_id]
        column = index.column()
        if role == _DISPLAY:
            if column == 0 and self._branch(node) is not None:
                return self._head_label(node)
            return self._display(node, column)
        if role == _DECORATION:
            return self._decoration(item, node) if column == 0 else None
        if role == _TOOLTIP:
            return self._tooltip(node, self._branch(node))
        if role == _ALIGNMENT:
            return _FIGURES_ALIGNMENT if column > 0 else None
        if role == _FONT:
            return self._bold if node_id in self._active_path else None
        if role == _BACKGROUND:
            return ACTIVE_PATH_BACKGROUND if node_id in self._active_path else None
        if role == NodeIdRole:
            return node_id
        if role == MessageRoleRole:
            return node.role
        if role == OnActivePathRole:
            return node_id in self._active_path
        if role == IsActiveRole:
            return node_id == self._active_id
        if role == HasCheckpointRole:
            return node.is_saved
        return node.n_tokens  # TokensRole

    def branch_of(self, node_id: int) -> tuple[int, int] | None:
        """``(k, n)`` for the first message of the k-th of n branches at a
        fork (what its k/n mark says), else None."""
        node = self._snapshot.nodes.get(node_id)
        return None if node is None else self._branch(node)

    # --- internals ------------------------------------------------------------------

    def _branch(self, node: NodeSummary) -> tuple[int, int] | None:
        parent_id = node.parent_id
        if parent_id is None:
            return None  # the starts: one per system prompt, not branches
        siblings = self._children.get(parent_id)
        if siblings is None or len(siblings) < 2 or node.id not in siblings:
            return None
        return siblings.index(node.id) + 1, len(siblings)

    def _head_label(self, node: NodeSummary) -> str:
        assert node.parent_id is not None
        if _writing(node):
            return self._display(node, 0)
        nodes = self._snapshot.nodes
        others = tuple(
            label_source(nodes[sibling])
            for sibling in self._children[node.parent_id]
            if sibling != node.id and sibling in nodes
        )
        return branch_label(node.role, label_source(node), bool(node.thinking), others)

    def _decoration(self, item: _Item, node: NodeSummary) -> QPixmap | None:
        """A head's k/n mark, the blank of its width before the rest of a
        branch, and a tool mark after either, as one small pixmap."""
        branch = self._branch(node)
        if branch is not None:
            lead: str | None = BRANCH_MARK.format(*branch)
        else:
            holder = item.parent
            in_branch = (
                holder is not None
                and holder.node_id is not None
                and len(self._children.get(holder.node_id, ())) > 1
            )
            lead = "" if in_branch else None
        mark = tool_mark(node)
        if lead is None and mark is None:
            return None
        return _mark_pixmap(lead, mark[0] if mark else None)

    def column_texts(self, column: int) -> set[str]:
        """The texts the rows show in ``column`` (what its width must fit)."""
        nodes = self._snapshot.nodes.values()
        if column > 0:
            # One row per figure shown, not every row: this is read whenever a
            # tree is shown (a 1,000-message path: 1,000 rows per column).
            nodes = {
                node.n_tokens if column == 1 else node.is_saved: node for node in nodes
            }.values()
        return {self._display(node, column) for node in nodes}

    @staticmethod
    def _display(node: NodeSummary, column: int) -> str:
        if column == 0:
            if _writing(node):
                return f"{ROLE_LABELS.get(node.role, node.role)}: {WRITING}"
            label = row_label(node.role, label_source(node), bool(node.thinking))
            return label + offered_tools_note(node)
        if column == 1:
            return f"{node.n_tokens:,}"
        # A mark only: the size is in the tooltip, in words.
        return SAVED_MARK if node.is_saved else "—"

    @staticmethod
    def _tooltip(node: NodeSummary, branch: tuple[int, int] | None = None) -> str:
        if node.checkpoint_bytes:
            checkpoint = (
                f"saved ({format_bytes(node.checkpoint_bytes)}): restores instantly"
            )
        elif node.shared_checkpoint_bytes:
            checkpoint = f"saved ({SHARED_START}): restores instantly"
        else:
            checkpoint = "not saved: rebuilt from its text when you go back to it"
        status = "" if node.status == Status.COMPLETE else f" · {node.status}"
        if node.status == Status.TRUNCATED:
            status += " (cut off: the context is full)"
        tokens = f"{node.n_tokens:,} token{'s' if node.n_tokens != 1 else ''}"
        figures = f"{tokens} · {checkpoint}{status}"
        if node.role == Role.ROOT:
            text = (
                f"System prompt: {snippet(node.text, 400)}"
                if node.text.strip()
                else "The start of the conversation (no system prompt)"
            )
        else:
            text = snippet(label_source(node), 400)
        notes = []
        if branch is not None:
            notes.append(
                f"{BRANCH_MARK.format(*branch)}: branch {branch[0]} of {branch[1]}"
            )
        mark = tool_mark(node)
        if mark is not None:
            notes.append(f"{TOOL_GLYPHS[mark[0]]} {mark[1][0].upper()}{mark[1][1:]}")
        lead = "".join(f"{note}\n" for note in notes)
        return f"{lead}{text}\n\n{figures}"

    def _build(self) -> None:
        """Make the rows of ``self._snapshot`` afresh (inside a reset)."""
        self._root = _Item(None, None)
        self._items = {}
        # Oldest first, as rows are inserted when a snapshot grows.
        self._children = {
            node_id: sorted(self._snapshot.children.get(node_id, []))
            for node_id in [None, *self._snapshot.nodes]
        }
        # Each entry: a fork's item and its children, the first rows of its
        # branches; every branch is laid out as one chain of rows.
        pending: list[tuple[_Item, list[int]]] = [(self._root, self._children[None])]
        while pending:
            fork, heads = pending.pop()
            for head in heads:
                node_id = head
                while True:
                    item = _Item(node_id, fork)
                    item.row = len(fork.children)
                    fork.children.append(item)
                    self._items[node_id] = item
                    children = self._children[node_id]
                    if len(children) != 1 or self._nests(node_id):
                        if children:
                            pending.append((item, children))
                        break
                    node_id = children[0]

    def _chain_end(self, node_id: int) -> int:
        """The last row of the chain from ``node_id``: a leaf or a fork."""
        while len(children := self._children[node_id]) == 1 and not self._nests(
            node_id
        ):
            node_id = children[0]
        return node_id

    def _nests(self, node_id: int) -> bool:
        """Whether the rows below ``node_id`` go under it rather than after it
        even without a fork: a start of a conversation with several (one per
        system prompt), so each start shows its own branches."""
        return (
            self._snapshot.nodes[node_id].parent_id is None
            and len(self._children[None]) > 1
        )

    def _insert(self, node_id: int) -> None:
        """Add the row of ``node_id``, whose parent the model shows."""
        parent_id = self._snapshot.nodes[node_id].parent_id
        siblings = self._children[parent_id]
        if parent_id is None:
            holder, row = self._root, len(self._root.children)
        else:
            parent = self._items[parent_id]
            nests = self._nests(parent_id)
            if not siblings and not nests:  # the chain goes on after its parent
                assert parent.parent is not None
                holder, row = parent.parent, parent.row + 1
            else:
                if len(siblings) == 1 and not nests:  # a fork now: its branch
                    # moves under it
                    self._move_branch_under(parent, siblings[0])
                holder, row = parent, len(parent.children)
        self.beginInsertRows(self._index_of_item(holder), row, row)
        item = _Item(node_id, holder)
        self._place(holder, row, [item])
        self._items[node_id] = item
        siblings.append(node_id)
        self._children[node_id] = []
        self.endInsertRows()
        if parent_id is not None and len(siblings) > 1:
            self._emit_siblings_changed(parent_id, node_id)

    def _move_branch_under(self, fork: _Item, child_id: int) -> None:
        """Move the chain from ``child_id``, the rows after ``fork``, under it."""
        holder = fork.parent
        assert holder is not None and not fork.children
        first = self._items[child_id].row
        last = self._items[self._chain_end(child_id)].row
        moving = self.beginMoveRows(
            self._index_of_item(holder), first, last, self._index_of_item(fork), 0
        )
        assert moving, "a branch cannot move under its fork"
        rows = holder.children[first : last + 1]
        del holder.children[first : last + 1]
        self._renumber(holder, first)
        self._place(fork, 0, rows)
        self.endMoveRows()

    def _move_branch_up(self, fork: _Item) -> None:
        """Move the one branch left under ``fork`` up, to the rows after it."""
        holder = fork.parent
        assert holder is not None and fork.children
        row = fork.row + 1
        moving = self.beginMoveRows(
            self._index_of_item(fork),
            0,
            len(fork.children) - 1,
            self._index_of_item(holder),
            row,
        )
        assert moving, "a branch cannot move up after its fork"
        rows, fork.children = fork.children, []
        self._place(holder, row, rows)
        self.endMoveRows()

    def _place(self, holder: _Item, row: int, items: list[_Item]) -> None:
        """Make ``items`` the rows of ``holder`` from ``row`` on."""
        holder.children[row:row] = items
        for item in items:
            item.parent = holder
        self._renumber(holder, row)

    @staticmethod
    def _renumber(holder: _Item, start: int) -> None:
        for row in range(start, len(holder.children)):
            holder.children[row].row = row

    def _remove_missing(self, snapshot: TreeSnapshot) -> None:
        gone = {nid for nid in self._items if nid not in snapshot}
        for node_id in sorted(gone):
            # A descendant goes with its ancestor's rows.
            if self._snapshot.nodes[node_id].parent_id not in gone:
                self._remove(node_id)
        self._active_path -= gone

    def _remove(self, node_id: int) -> None:
        """Remove the rows of ``node_id`` and all below it."""
        parent_id = self._snapshot.nodes[node_id].parent_id
        item = self._items[node_id]
        holder = item.parent
        assert holder is not None
        first, last = item.row, self._items[self._chain_end(node_id)].row
        self.beginRemoveRows(self._index_of_item(holder), first, last)
        for row in holder.children[first : last + 1]:
            self._forget(row)
        del holder.children[first : last + 1]
        self._renumber(holder, first)
        self._children[parent_id].remove(node_id)
        self.endRemoveRows()
        if parent_id is not None:
            fork = self._items[parent_id]
            if (
                len(self._children[parent_id]) == 1
                and fork.children
                and not self._nests(parent_id)
            ):
                self._move_branch_up(fork)
            self._emit_siblings_changed(parent_id)

    def _forget(self, item: _Item) -> None:
        """Drop ``item``, the rows under it and the nodes' children lists."""
        pending = [item]
        while pending:
            current = pending.pop()
            if current.node_id is not None:
                self._items.pop(current.node_id, None)
                self._children.pop(current.node_id, None)
            pending.extend(current.children)

    def _index_of_item(self, item: _Item) -> QModelIndex:
        if item is self._root:
            return QModelIndex()
        return self.createIndex(item.row, 0, item)

    def _emit_rows_changed(
        self, items: list[_Item], roles: tuple[int, ...] = ()
    ) -> None:
        """One ``dataChanged`` per run of adjacent rows: a switch between two
        long paths changes a thousand rows, and a signal per row cost the
        window most of its time (views repaint per signal)."""
        runs: dict[int, list[_Item]] = {}
        for item in items:
            assert item.parent is not None
            runs.setdefault(id(item.parent), []).append(item)
        last_column = len(COLUMNS) - 1
        for siblings in runs.values():
            siblings.sort(key=lambda item: item.row)
            start = end = siblings[0]
            following: list[_Item | None] = [*siblings[1:], None]
            for after in following:
                if after is not None and after.row == end.row + 1:
                    end = after
                    continue
                self.dataChanged.emit(
                    self.createIndex(start.row, 0, start),
                    self.createIndex(end.row, last_column, end),
                    list(roles),
                )
                if after is not None:
                    start = end = after

    def _emit_siblings_changed(self, parent_id: int, but: int | None = None) -> None:
        """The heads at ``parent_id`` changed: their k/n marks and labels."""
        self._emit_rows_changed(
            [
                self._items[sibling]
                for sibling in self._children[parent_id]
                if sibling != but and sibling in self._items
            ],
            (_DISPLAY, _DECORATION, _TOOLTIP),
        )

    def _emit_row_changed(self, node_id: int, roles: tuple[int, ...] = ()) -> None:
        first = self.index_of(node_id, 0)
        last = self.index_of(node_id, len(COLUMNS) - 1)
        self.dataChanged.emit(first, last, list(roles))
