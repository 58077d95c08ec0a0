"""``TreeGraphView``: the conversation tree drawn as a graph, root at the top.

A second view of the tree panel's data (the list is the first): it reads the
same ``TreeSnapshot`` and active node as ``ConversationTreeModel`` and emits
the same requests as the list, so the window cannot tell them apart.

Costs (500 nodes on a 2-core VM: layout about 1 ms, scene build 25-55 ms):

* the scene is rebuilt only when the set of nodes (or a parent) changes; a
  new active node repaints the nodes of the old and new paths and redraws
  one overlay path over their edges, and changed text or checkpoints repaint
  only their node;
* one light ``QGraphicsItem`` per node with a cheap ``paint`` and a
  device-coordinate cache, one ``QGraphicsPathItem`` per edge, a BSP index
  (items never move once placed), labels made at first paint and tooltips
  when asked for;
* far zoomed out, nodes skip their text, then their badge (level of detail).

Layout: one branch per column, one node per row, rows in the list's order
(``tree_layout.branch_layout``).

Zoom: shown (a conversation opened, or the graph chosen over the list), the
graph fits the whole tree if it can at a readable zoom (labels at least
``READABLE_LABEL_PX`` pixels high) and no more than 100 %; else it fits the
tree's width if that is readable, else it takes the readable minimum, and
scrolls to the active node. The user's own zoom then stays until the next
showing.

Mouse: click a node to switch to it, drag to pan, Ctrl+wheel (or Ctrl +/-)
zooms, a double click on empty space fits the tree. Keys move a cursor:
Up to the parent, Down to the child on the active path (else the newest),
Left/Right to siblings; Enter switches to it, Del deletes its branch, F fits.
As in the list, moving the cursor does not switch until Enter.
"""

from __future__ import annotations

import html
import itertools
import time

from PySide6.QtCore import QEvent, QPoint, QPointF, QRectF, Qt, QTimer, Signal, Slot
from PySide6.QtGui import (
    QAction,
    QColor,
    QContextMenuEvent,
    QFocusEvent,
    QFont,
    QFontInfo,
    QFontMetricsF,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPainterPath,
    QPalette,
    QPen,
    QResizeEvent,
    QShowEvent,
    QTransform,
    QWheelEvent,
)
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QGraphicsItem,
    QGraphicsPathItem,
    QGraphicsScene,
    QGraphicsSceneHoverEvent,
    QGraphicsView,
    QMenu,
    QStyleOptionGraphicsItem,
    QToolTip,
    QWidget,
)

from app.conversation.tree_snapshot import TreeSnapshot
from app.qt.models.conversation_tree import (
    ROLE_LABELS,
    SHARED_START,
    TOOL_GLYPHS,
    TOOL_TINT,
    differing_text,
    label_source,
    tool_mark,
)
from app.qt.views.theme import icon
from app.qt.views.tree.tree_layout import (
    LABEL_CHARS,
    TOOLTIP_CHARS,
    branch_layout,
    node_text,
)
from app.text.plain_text import shorten
from app.text.quantities import format_bytes
from storage.records import NodeSummary
from storage.values import Role, Status

# Geometry, in scene units (pixels at 100 %).
# Narrow enough that two branches side by side fit a panel 340 pixels wide
# at the readable least zoom.
NODE_WIDTH = 172.0
NODE_HEIGHT = 26.0
COLUMN_GAP = 12.0
ROW_GAP = 12.0  # room for a branch's edge to leave its fork
COLUMN = NODE_WIDTH + COLUMN_GAP
ROW = NODE_HEIGHT + ROW_GAP
SCENE_MARGIN = 10.0
RADIUS = 8.0
BADGE = 16.0
MARKER = 3.5
CURSOR_GAP = 3.5  # the keyboard cursor's ring, outside the box

MIN_SCALE, MAX_SCALE = 0.08, 3.0
ZOOM_STEP = 1.2
TEXT_MIN_LOD = 0.45
# The least zoom the graph opens at: its labels at least this many pixels
# high. The user saw them at 6 px (8 points at 60 %) and could not read them;
# 9 px is about the smallest text that reads at a glance. A label's font is
# the panel's, so the zoom this takes depends on it (about 75 % for 9 points
# at 96 dpi). The user's Fit (F, the button, a double click) may still zoom
# out further, to see the tree's shape.
READABLE_LABEL_PX = 9.0
SHAPES_MIN_LOD = 0.2  # below this, nodes are plain boxes
CACHE_MODE = (
    QGraphicsItem.CacheMode.DeviceCoordinateCache
)  # below this zoom, nodes are drawn without text

ROLE_INITIALS: dict[str, str] = {
    Role.ROOT: "S",
    Role.USER: "U",
    Role.ASSISTANT: "A",
    Role.TOOL: "T",
}
# A start's own action, in the graph's menu and the list's.
PROMPT_ACTION_TEXT = "Change the system prompt (a new start)…"

_BOX = QRectF(-NODE_WIDTH / 2, -NODE_HEIGHT / 2, NODE_WIDTH, NODE_HEIGHT)
_LABEL_LEFT = _BOX.left() + 6 + BADGE + 5
_DOT_X = _BOX.right() - 9
_DOT = QPointF(_DOT_X, 0)
_BADGE_RECT = QRectF(_BOX.left() + 6, -BADGE / 2, BADGE, BADGE)
_CURSOR_RING = _BOX.adjusted(-CURSOR_GAP, -CURSOR_GAP, CURSOR_GAP, CURSOR_GAP)
LABEL_WIDTH = _DOT_X - MARKER - 6 - _LABEL_LEFT
_LABEL_RECT = QRectF(_LABEL_LEFT, _BOX.top(), LABEL_WIDTH, NODE_HEIGHT)
LABEL_SOURCE_CHARS = 400
_BOUNDS = _BOX.adjusted(
    -CURSOR_GAP - 2, -CURSOR_GAP - 2, CURSOR_GAP + 2, CURSOR_GAP + 2
)


def _mix(a: QColor, b: QColor, amount: float) -> QColor:
    """``a`` moved ``amount`` (0..1) of the way to ``b``, opaque."""
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * amount,
        a.greenF() + (b.greenF() - a.greenF()) * amount,
        a.blueF() + (b.blueF() - a.blueF()) * amount,
    )


def _over(color: QColor, background: QColor) -> QColor:
    """``color`` composited over ``background``: palettes may hold translucent
    colours (Fusion's placeholder text), and mixing needs opaque ones."""
    return _mix(background, color, color.alphaF())


class _Colors:
    """The graph's colours, derived once from a palette (light or dark)."""

    def __init__(self, palette: QPalette) -> None:
        role = QPalette.ColorRole
        base = palette.color(role.Base)
        accent = palette.color(role.Highlight)
        text = palette.color(role.Text)
        self.text = text
        self.muted = _over(palette.color(role.PlaceholderText), base)
        self.active_text = palette.color(role.HighlightedText)
        self.accent = accent
        self.fill = {
            Role.USER: _mix(base, accent, 0.13),
            Role.ASSISTANT: base,
            Role.ROOT: palette.color(role.AlternateBase),
            Role.TOOL: _mix(base, TOOL_TINT, 0.16),
        }
        self.badge = {
            Role.USER: accent,
            Role.ASSISTANT: _mix(self.muted, text, 0.15),
            Role.ROOT: _mix(self.muted, base, 0.25),
            Role.TOOL: TOOL_TINT,
        }
        # A reply that calls tools: its badge is the tools' colour.
        self.tool_badge = TOOL_TINT
        self.badge_text = base
        self.border = _mix(palette.color(role.Mid), base, 0.25)
        self.hover = _mix(self.border, accent, 0.6)
        self.edge = _mix(palette.color(role.Mid), base, 0.1)
        # Pens made once: paint() runs for every visible node on every frame.
        self.border_pen = QPen(self.border, 1.0)
        self.hover_pen = QPen(self.hover, 1.5)
        self.path_pen = QPen(accent, 2.0)
        self.cursor_pen = QPen(text, 1.5, Qt.PenStyle.DashLine)
        self.hollow_pen = QPen(self.muted, 1.2)
        self.active_hollow_pen = QPen(self.active_text, 1.2)
        self.edge_pen = QPen(self.edge, 1.2)
        self.path_edge_pen = QPen(accent, 2.5)
        self.path_edge_pen.setCapStyle(Qt.PenCapStyle.RoundCap)


class _NodeItem(QGraphicsItem):
    """One message: a rounded box with a role badge, a label and a checkpoint dot.

    Its state (on the active path, active, under the cursor, hovered) lives in
    plain attributes that ``paint`` reads; the owner calls ``update()`` after
    changing them, which also drops the cached pixmap.
    """

    def __init__(self, node: NodeSummary, style: _Style) -> None:
        super().__init__()
        self.node = node
        self.style = style
        self._label: str | None = None
        # "call" or "result" for a node of tool use (its badge's glyph).
        self.tool = tool_mark(node)
        # The texts of its siblings, for the first message of a branch: its
        # label starts where it differs from them.
        self.others: tuple[str, ...] = ()
        self.on_path = False
        self.active = False
        self.is_cursor = False
        self.hovered = False
        self.setCacheMode(CACHE_MODE)
        self.setAcceptHoverEvents(True)

    def set_node(self, node: NodeSummary) -> None:
        """Show new data for the same message (text grew, checkpoint saved)."""
        self.node = node
        self.tool = tool_mark(node)
        self._label = None
        self.update()

    def label(self, font: QFont) -> str:
        """The box's text, made at first paint: a node scrolled out of sight or
        drawn too small to read never pays for Markdown stripping and eliding."""
        if self._label is None:
            node = self.node
            # A label needs a few words: strip Markdown from a prefix only.
            source = label_source(node)[:LABEL_SOURCE_CHARS]
            text = (
                differing_text(source, self.others) if self.others else None
            ) or node_text(node.role, source, node.thinking)
            self._label = QFontMetricsF(font).elidedText(
                shorten(text, LABEL_CHARS), Qt.TextElideMode.ElideRight, LABEL_WIDTH
            )
        return self._label

    def forget_label(self) -> None:
        """Make the label again at the next paint (the font changed)."""
        self._label = None

    @property
    def node_id(self) -> int:
        """The message's id."""
        return self.node.id

    def boundingRect(self) -> QRectF:
        return _BOUNDS

    def shape(self) -> QPainterPath:
        path = QPainterPath()
        path.addRoundedRect(_BOX, RADIUS, RADIUS)
        return path

    def hoverEnterEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        if not self.hasCursor():
            # Set on first hover rather than for all nodes at build time.
            self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.hovered = True
        self.update()

    def hoverLeaveEvent(self, event: QGraphicsSceneHoverEvent) -> None:
        self.hovered = False
        self.update()

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionGraphicsItem,
        widget: QWidget | None = None,
    ) -> None:
        style = self.style
        colors = style.colors
        role = self.node.role if self.node.role in colors.fill else Role.ASSISTANT
        active = self.active
        if active:
            painter.setPen(colors.path_pen)
            painter.setBrush(colors.accent)
        else:
            painter.setPen(
                colors.path_pen
                if self.on_path
                else colors.hover_pen
                if self.hovered
                else colors.border_pen
            )
            painter.setBrush(colors.fill[role])
        painter.drawRoundedRect(_BOX, RADIUS, RADIUS)
        lod = QStyleOptionGraphicsItem.levelOfDetailFromTransform(
            painter.worldTransform()
        )
        if lod < SHAPES_MIN_LOD:
            return  # a few pixels wide: the box and its colour say enough

        if self.is_cursor and style.cursor_shown:
            painter.setPen(colors.cursor_pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(
                _CURSOR_RING, RADIUS + CURSOR_GAP, RADIUS + CURSOR_GAP
            )

        # Checkpoint: a filled dot restores at once, a hollow one is rebuilt.
        if self.node.is_saved:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(colors.active_text if active else colors.accent)
        else:
            painter.setPen(colors.active_hollow_pen if active else colors.hollow_pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawEllipse(_DOT, MARKER, MARKER)

        painter.setPen(Qt.PenStyle.NoPen)
        tool = self.tool
        badge = colors.tool_badge if tool is not None else colors.badge[role]
        painter.setBrush(colors.active_text if active else badge)
        painter.drawEllipse(_BADGE_RECT)

        if lod < TEXT_MIN_LOD:
            return  # too small to read
        painter.setFont(style.badge_font)
        painter.setPen(colors.accent if active else colors.badge_text)
        painter.drawText(
            _BADGE_RECT,
            Qt.AlignmentFlag.AlignCenter,
            TOOL_GLYPHS[tool[0]] if tool else ROLE_INITIALS.get(role, "?"),
        )
        painter.setFont(style.label_font)
        painter.setPen(colors.active_text if active else colors.text)
        painter.drawText(
            _LABEL_RECT,
            Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
            self.label(style.label_font),
        )


class _Style:
    """What every node paints with: colours, fonts, whether the cursor shows.

    One instance, shared by the nodes (cheaper than asking ``scene()`` in each
    ``paint``); the view replaces its parts when the palette or font changes.
    """

    def __init__(self, palette: QPalette, font: QFont) -> None:
        self.colors = _Colors(palette)
        self.label_font = QFont()
        self.badge_font = QFont()
        self.set_font(font)
        self.cursor_shown = False

    def set_font(self, font: QFont) -> None:
        """Derive the label and badge fonts from the view's font."""
        self.label_font = QFont(font)
        self.badge_font = QFont(font)
        self.badge_font.setBold(True)
        size = font.pointSizeF()
        if size > 0:  # the label as large as the list's: the zoom is what
            # makes it small, and the readable least zoom is counted from it
            self.badge_font.setPointSizeF(max(6.0, size * 0.75))


def _edge_path(parent: QPointF, child: QPointF) -> QPainterPath:
    """From the bottom of a parent's box to the top of its child's: straight
    down a column, or, for a branch, across in the gap under the fork and
    then down the branch's column, which is empty until its first box."""
    start = QPointF(parent.x(), parent.y() + NODE_HEIGHT / 2)
    end = QPointF(child.x(), child.y() - NODE_HEIGHT / 2)
    path = QPainterPath(start)
    if start.x() == end.x():
        path.lineTo(end)
        return path
    turn = QPointF(end.x(), start.y() + ROW_GAP)
    middle = start.y() + ROW_GAP / 2
    path.cubicTo(QPointF(start.x(), middle), QPointF(end.x(), middle), turn)
    if end.y() > turn.y():
        path.lineTo(end)
    return path


def node_tooltip(node: NodeSummary) -> str:
    """The hover text of a node: role, a longer snippet, tokens, checkpoint, status."""
    role = ROLE_LABELS.get(node.role, node.role)
    text = shorten(
        node_text(node.role, label_source(node), node.thinking), TOOLTIP_CHARS
    )
    if node.checkpoint_bytes:
        checkpoint = (
            f"checkpoint {format_bytes(node.checkpoint_bytes)}: restores at once"
        )
    elif node.shared_checkpoint_bytes:
        checkpoint = f"{SHARED_START}: restores at once"
    else:
        checkpoint = "no checkpoint: rebuilt from its tokens"
    figures = f"{node.n_tokens:,} tokens · {checkpoint}"
    if node.status != Status.COMPLETE:
        figures += f" · {node.status}"
    mark = tool_mark(node)
    if mark is not None:
        role += f" · {TOOL_GLYPHS[mark[0]]} {mark[1]}"
    # Rich text on purpose, with the message escaped: a message that
    # happens to contain tags must not be rendered as HTML.
    return (
        f"<qt><b>{html.escape(role)}</b><br>{html.escape(text)}"
        f"<br><span style='color: gray'>{html.escape(figures)}</span></qt>"
    )


class TreeGraphView(QGraphicsView):
    """The tree as a top-down graph: click to switch, drag to pan, Ctrl+wheel zooms.

    Feed it with :meth:`set_tree` (cheap when only the active node changed).

    Signals
    -------
    node_activated(int)
        The user clicked a node, or pressed Enter on the cursor: make it active.
    delete_requested(int)
        The user asked to delete a node's branch (not the only root).
    system_prompt_requested(int)
        The user asked to change the system prompt at a start (a root).
    """

    node_activated = Signal(int)
    delete_requested = Signal(int)
    system_prompt_requested = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("ConversationGraph")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setRenderHints(
            QPainter.RenderHint.Antialiasing | QPainter.RenderHint.TextAntialiasing
        )
        self.setViewportUpdateMode(QGraphicsView.ViewportUpdateMode.SmartViewportUpdate)
        self.setOptimizationFlag(
            QGraphicsView.OptimizationFlag.DontAdjustForAntialiasing, True
        )
        self.setDragMode(QGraphicsView.DragMode.ScrollHandDrag)
        self.setTransformationAnchor(QGraphicsView.ViewportAnchor.AnchorUnderMouse)
        self.setResizeAnchor(QGraphicsView.ViewportAnchor.AnchorViewCenter)
        # A small tree hangs from the top, like the list, not in mid-air.
        self.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self._style = _Style(self.palette(), self.font())
        self._scene = QGraphicsScene(self)
        # Items never move once placed, so the BSP tree is built once per
        # rebuild and makes painting and hit tests cheap on big trees.
        self._scene.setItemIndexMethod(QGraphicsScene.ItemIndexMethod.BspTreeIndex)
        self.setScene(self._scene)

        self._snapshot = TreeSnapshot.empty()
        self._structure: dict[int, int | None] = {}
        self._items: dict[int, _NodeItem] = {}
        self._centres: dict[int, QPointF] = {}
        self._path_overlay = QGraphicsPathItem()
        self._active_id: int | None = None
        self._path: list[int] = []
        self._cursor_id: int | None = None
        self._press: tuple[QPoint, int | None] | None = None
        # Fit once shown: a conversation opened while hidden, or the graph
        # shown again, gets its opening zoom when there is a viewport to fit.
        self._fit_pending = True
        self._opening_zoom = False  # the zoom the graph opened at, untouched
        self._fit_timer = QTimer(self)
        self._fit_timer.setSingleShot(True)
        self._fit_timer.setInterval(0)
        self._fit_timer.timeout.connect(self._on_fit_timer_timeout)
        # Timings of the last rebuild, and how many there were (for tests and
        # the benchmark figures in the tests' output).
        self.layout_ms = 0.0
        self.build_ms = 0.0
        self.rebuilds = 0

    # --- public API ---------------------------------------------------------------

    @property
    def active_id(self) -> int | None:
        """The node drawn as active."""
        return self._active_id

    @property
    def cursor_id(self) -> int | None:
        """The node under the keyboard cursor."""
        return self._cursor_id

    def node_ids(self) -> set[int]:
        """The nodes on the scene."""
        return set(self._items)

    def node_point(self, node_id: int) -> QPoint:
        """Scroll ``node_id`` into view and return its centre in viewport pixels."""
        item = self._items[node_id]
        self.ensureVisible(item, 8, 8)
        return self.mapFromScene(item.scenePos())

    def set_tree(self, snapshot: TreeSnapshot, active_id: int | None) -> None:
        """Show ``snapshot`` with ``active_id`` active.

        Rebuilds the scene only when nodes came or went; otherwise repaints the
        nodes whose data changed and restyles the active path.
        """
        if snapshot is not self._snapshot:
            same_conversation = (
                snapshot.conversation_id == self._snapshot.conversation_id
            )
            structure = {nid: n.parent_id for nid, n in snapshot.nodes.items()}
            if structure != self._structure:
                self._rebuild(snapshot, structure)
            else:
                changed = [
                    nid
                    for nid, node in snapshot.nodes.items()
                    if node != self._snapshot.nodes[nid]
                ]
                for nid in changed:
                    self._items[nid].set_node(snapshot.nodes[nid])
                self._snapshot = snapshot
                for parent_id in {snapshot.nodes[nid].parent_id for nid in changed}:
                    self._set_others(parent_id)
            if not same_conversation:
                self._active_id = None  # reveal the active node below
                self._fit_pending = True
        self.set_active(active_id)
        self._fit_if_pending()

    def set_active(self, node_id: int | None) -> None:
        """Highlight ``node_id`` and its path; bring it into view if it changed."""
        if node_id is not None and node_id not in self._items:
            node_id = None
        if node_id == self._active_id:
            return
        old_path = self._path
        self._path = self._snapshot.path(node_id) if node_id is not None else []
        self._active_id = node_id
        on_path = set(self._path)
        for nid in {*old_path, *self._path}:
            item = self._items.get(nid)
            if item is not None:
                item.on_path = nid in on_path
                item.active = nid == node_id
                item.update()
        self._draw_path_overlay()
        self._move_cursor(node_id, reveal=False)
        if node_id is not None:
            self._reveal(self._items[node_id])

    def fit(self) -> None:
        """Zoom to show the whole tree, between 8 % and 100 %.

        A tree too wide for 8 % (some 100 branches in a narrow panel) stays
        scrollable there, centred on the active node, rather than shrinking
        into specks.
        """
        self._fit_between(MIN_SCALE)

    def fit_readable(self) -> None:
        """Zoom as the graph opens: readable, and as much of the tree as that allows.

        The whole tree if it fits at no less than :meth:`readable_scale` (and
        no more than 100 %); else its whole width, if that is readable; else
        the readable least zoom. Either of the last two scrolls to the active
        node: the tree's shape is what Fit (F) is for.
        """
        rect = self._scene.sceneRect()
        viewport = self.viewport().rect()
        if rect.isEmpty() or viewport.isEmpty():
            return
        # Until the user zooms, a resize fits again: the panel settles its
        # size after the graph is shown (its hint wraps to more lines).
        self._opening_zoom = True
        least = self.readable_scale()
        # A few pixels spare: the view shows a scroll bar for a scene that
        # fills it to the pixel.
        width = viewport.width() - 4
        whole = min(width / rect.width(), (viewport.height() - 4) / rect.height())
        bar = self.verticalScrollBar()
        if whole < least and not bar.isVisible():
            # Taller than the view: the bar that comes takes its width.
            width -= bar.sizeHint().width()
        across = width / rect.width()
        if whole >= least:
            self.setTransform(QTransform.fromScale(*(2 * [min(whole, 1.0)])))
            self.centerOn(rect.center())
            return
        self.setTransform(QTransform.fromScale(*(2 * [min(max(across, least), 1.0)])))
        active = self._items.get(self._active_id) if self._active_id else None
        self.centerOn(active if active is not None else rect.center())

    def readable_scale(self) -> float:
        """The least zoom at which labels are ``READABLE_LABEL_PX`` high (at
        most 100 %: a large font needs no magnifying)."""
        pixels = QFontInfo(self._style.label_font).pixelSize()
        return min(1.0, READABLE_LABEL_PX / pixels) if pixels > 0 else 1.0

    def zoom(self, factor: float) -> None:
        """Scale the view by ``factor``, kept between 8 % and 300 %."""
        self._opening_zoom = False
        scale = self.transform().m11()
        factor = max(MIN_SCALE / scale, min(MAX_SCALE / scale, factor))
        self.scale(factor, factor)

    def _fit_between(self, least: float) -> None:
        self._opening_zoom = False
        # Never above 100 %: a three-node tree magnified looks broken.
        rect = self._scene.sceneRect()
        if rect.isEmpty():
            return
        self.fitInView(rect, Qt.AspectRatioMode.KeepAspectRatio)
        scale = self.transform().m11()
        if least <= scale <= 1.0:
            return
        self.setTransform(QTransform.fromScale(*(2 * [min(max(scale, least), 1.0)])))
        active = self._items.get(self._active_id) if self._active_id else None
        self.centerOn(active if active is not None else rect.center())

    def _fit_if_pending(self) -> None:
        # A hidden view has no viewport size to fit to; it fits when shown.
        if self._fit_pending and self.isVisible() and self._items:
            self._fit_pending = False
            self.fit_readable()

    @Slot()
    def _on_fit_timer_timeout(self) -> None:
        self._fit_if_pending()

    # --- building -------------------------------------------------------------------

    def _rebuild(
        self, snapshot: TreeSnapshot, structure: dict[int, int | None]
    ) -> None:
        started = time.perf_counter()
        slots = branch_layout(snapshot.children, snapshot.roots)
        laid_out = time.perf_counter()

        self._scene.clear()
        self._items = {}
        self._path, self._active_id, self._cursor_id = [], None, None
        # Stacking by insertion order (all at z 0): edges, then the active
        # path's overlay, then the nodes; no per-item z values to maintain.
        centres = {
            nid: QPointF(x * COLUMN, depth * ROW) for nid, (x, depth) in slots.items()
        }
        self._centres = centres
        pen = self._style.colors.edge_pen
        for nid, centre in centres.items():
            parent_id = structure[nid]
            if parent_id is not None:
                edge = QGraphicsPathItem(_edge_path(centres[parent_id], centre))
                edge.setPen(pen)
                self._scene.addItem(edge)
        self._path_overlay = QGraphicsPathItem()
        self._path_overlay.setPen(self._style.colors.path_edge_pen)
        self._scene.addItem(self._path_overlay)
        for nid, centre in centres.items():
            item = _NodeItem(snapshot.nodes[nid], self._style)
            item.setPos(centre)
            self._scene.addItem(item)
            self._items[nid] = item
        self._snapshot, self._structure = snapshot, structure
        for parent_id, kids in snapshot.children.items():
            if parent_id is not None and len(kids) > 1:
                self._set_others(parent_id)
        # The bounds follow from the slots; asking the scene would visit every item.
        columns = max((x for x, _ in slots.values()), default=0.0)
        rows = max((depth for _, depth in slots.values()), default=0)
        side = SCENE_MARGIN + NODE_WIDTH / 2
        top = SCENE_MARGIN + NODE_HEIGHT / 2
        self._scene.setSceneRect(
            QRectF(-side, -top, columns * COLUMN + 2 * side, rows * ROW + 2 * top)
        )
        finished = time.perf_counter()
        self.layout_ms = (laid_out - started) * 1000
        self.build_ms = (finished - laid_out) * 1000
        self.rebuilds += 1

    def _set_others(self, parent_id: int | None) -> None:
        """Tell the branches at ``parent_id`` their siblings' texts."""
        if parent_id is None:
            return  # the starts are not branches of one another
        kids = self._snapshot.children.get(parent_id, [])
        if len(kids) < 2:
            return
        nodes = self._snapshot.nodes
        for kid in kids:
            item = self._items[kid]
            others = tuple(
                label_source(nodes[k])[:LABEL_SOURCE_CHARS] for k in kids if k != kid
            )
            if others != item.others:
                item.others = others
                item.forget_label()
                item.update()

    def _draw_path_overlay(self) -> None:
        # The active path's edges, drawn once more in the accent colour over
        # the plain ones: restyling costs the path's length, not the tree's.
        path = QPainterPath()
        for parent_id, child_id in itertools.pairwise(self._path):
            path.addPath(_edge_path(self._centres[parent_id], self._centres[child_id]))
        self._path_overlay.setPath(path)

    def _restyle_all(self) -> None:
        colors = self._style.colors
        for item in self._scene.items():
            if isinstance(item, QGraphicsPathItem):
                overlay = item is self._path_overlay
                item.setPen(colors.path_edge_pen if overlay else colors.edge_pen)
            else:
                item.update()

    # --- cursor and viewport --------------------------------------------------------

    def _move_cursor(self, node_id: int | None, reveal: bool = True) -> None:
        old = self._items.get(self._cursor_id) if self._cursor_id is not None else None
        if old is not None:
            old.is_cursor = False
            old.update()
        self._cursor_id = node_id
        item = self._items.get(node_id) if node_id is not None else None
        if item is not None:
            item.is_cursor = True
            item.update()
            if reveal:
                self.ensureVisible(item, 24, 24)

    def _reveal(self, item: _NodeItem) -> None:
        # Centre on a node only when it is (partly) out of sight: a node the
        # user just clicked stays under the mouse.
        visible = self.mapToScene(self.viewport().rect()).boundingRect()
        if not visible.contains(item.sceneBoundingRect()):
            self.centerOn(item)

    def _node_at(self, position: QPoint) -> int | None:
        for item in self.items(position):
            if isinstance(item, _NodeItem):
                return item.node_id
        return None

    def _child_towards_active(self, node_id: int) -> int | None:
        kids = self._snapshot.children.get(node_id, [])
        if not kids:
            return None
        on_path = set(self._path)
        return next((k for k in kids if k in on_path), kids[-1])

    # --- Qt overrides ---------------------------------------------------------------

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            point = event.position().toPoint()
            self._press = (point, self._node_at(point))
        super().mousePressEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        super().mouseReleaseEvent(event)
        press, self._press = self._press, None
        if event.button() != Qt.MouseButton.LeftButton or press is None:
            return
        point, node_id = press
        moved = (event.position().toPoint() - point).manhattanLength()
        # A drag pans (ScrollHandDrag); only a click switches.
        if node_id is not None and moved < QApplication.startDragDistance():
            self._move_cursor(node_id, reveal=False)
            self.node_activated.emit(node_id)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        if self._node_at(event.position().toPoint()) is None:
            self.fit()
            return
        super().mouseDoubleClickEvent(event)

    def wheelEvent(self, event: QWheelEvent) -> None:
        # Plain wheel scrolls, as in the transcript; Ctrl+wheel zooms.
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            steps = event.angleDelta().y() / 120
            if steps:
                self.zoom(ZOOM_STEP**steps)
            event.accept()
            return
        super().wheelEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        key = event.key()
        Key = Qt.Key
        control = event.modifiers() & Qt.KeyboardModifier.ControlModifier
        if key in (Key.Key_Plus, Key.Key_Equal) and control:
            self.zoom(ZOOM_STEP)
            return
        if key == Key.Key_Minus and control:
            self.zoom(1 / ZOOM_STEP)
            return
        if key == Key.Key_F and not control:
            self.fit()
            return
        cursor = self._cursor_id
        if cursor is None or cursor not in self._items:
            if key in (Key.Key_Up, Key.Key_Down, Key.Key_Left, Key.Key_Right):
                self._move_cursor(self._active_id or self._snapshot.root_id)
                return
            super().keyPressEvent(event)
            return
        node = self._snapshot.nodes[cursor]
        target: int | None = None
        if key == Key.Key_Up:
            target = node.parent_id
        elif key == Key.Key_Down:
            target = self._child_towards_active(cursor)
        elif key in (Key.Key_Left, Key.Key_Right):
            siblings = self._snapshot.siblings(cursor)
            index = siblings.index(cursor) + (1 if key == Key.Key_Right else -1)
            target = siblings[index] if 0 <= index < len(siblings) else None
        elif key in (Key.Key_Return, Key.Key_Enter):
            self.node_activated.emit(cursor)
            return
        elif key == Key.Key_Delete:
            if self._snapshot.deletable(cursor):
                self.delete_requested.emit(cursor)
            return
        else:
            super().keyPressEvent(event)
            return
        if target is not None:
            self._move_cursor(target)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        node_id = self._node_at(event.pos())
        if node_id is None:
            return
        menu = QMenu(self)
        go = QAction(icon("branch"), "Continue from here", menu)
        go.triggered.connect(lambda: self.node_activated.emit(node_id))
        menu.addAction(go)
        if self._snapshot.nodes[node_id].role == Role.ROOT:
            prompt = QAction(PROMPT_ACTION_TEXT, menu)
            prompt.triggered.connect(lambda: self.system_prompt_requested.emit(node_id))
            menu.addAction(prompt)
        if self._snapshot.deletable(node_id):
            delete = QAction(icon("delete"), "Delete branch…", menu)
            delete.triggered.connect(lambda: self.delete_requested.emit(node_id))
            menu.addAction(delete)
        menu.popup(event.globalPos())

    def viewportEvent(self, event: QEvent) -> bool:
        # Tooltips are written when asked for, not for every node at build time.
        if event.type() == QEvent.Type.ToolTip:
            node_id = self._node_at(event.pos())  # type: ignore[attr-defined]
            if node_id is None:
                QToolTip.hideText()
                event.ignore()
            else:
                QToolTip.showText(
                    event.globalPos(),  # type: ignore[attr-defined]
                    node_tooltip(self._snapshot.nodes[node_id]),
                    self.viewport(),
                )
            return True
        return super().viewportEvent(event)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if event.spontaneous():
            return  # the window restored from the taskbar: keep the user's zoom
        # Shown again (the graph chosen over the list): fit. The tree panel
        # brings a hidden graph's tree up to date right after showing it, and
        # set_tree fits then; the timer covers a show with no set_tree after
        # it (the window opening on the graph).
        self._fit_pending = True
        self._fit_timer.start()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._opening_zoom and self._items:
            self.fit_readable()

    def focusInEvent(self, event: QFocusEvent) -> None:
        super().focusInEvent(event)
        self._show_cursor(True)

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self._show_cursor(False)

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.StyleChange):
            self._style.colors = _Colors(self.palette())
            self._restyle_all()
        elif event.type() == QEvent.Type.FontChange:
            self._style.set_font(self.font())
            for item in self._items.values():
                item.forget_label()
            self._restyle_all()

    # --- internals ------------------------------------------------------------------

    def _show_cursor(self, shown: bool) -> None:
        self._style.cursor_shown = shown
        if self._cursor_id in self._items:
            self._items[self._cursor_id].update()
