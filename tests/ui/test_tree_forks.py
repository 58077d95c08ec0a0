"""Forks read apart in the tree list and the graph (issue 41), and messages
of tool use carry a mark of their own in both (issue 40).

The user's case: the first message edited, so that two versions of it stand
under the start, each answered. In the list each version's first row carries
a k/n mark, the rest of its branch is set in by that mark's width, and the two
labels start where the texts differ; in the graph each branch has its own
column and rows of its own, at a zoom whose labels read.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import pytest
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QFontInfo, QFontMetrics, QPixmap

from app.conversation.tree_snapshot import TreeSnapshot
from app.qt.models.conversation_tree import (
    ConversationTreeModel,
    differing_text,
    row_label,
    tool_mark,
)
from app.qt.views.tree import tree_graph
from app.qt.views.tree.tree_graph import TreeGraphView, node_tooltip
from storage import exchange, tool_use, tree_reads
from storage.records import NodeSummary
from tests.ui.conftest import send, wait_idle

WINDOW_SIZE = (1280, 800)
SHARED = "Can you explain how the Roman Republic became an empire, in"
FIRST = f"{SHARED} a few paragraphs?"
EDITED = f"{SHARED} one sentence?"
CALL = {"id": "call_1", "name": "get_current_time", "arguments": '{"tz": "Oslo"}'}


def _screenshot(widget, name: str) -> None:
    """Save ``widget`` as NAME.png in $ARBOR_TEST_SCREENSHOTS, when set."""
    folder = os.environ.get("ARBOR_TEST_SCREENSHOTS")
    if folder:
        widget.grab().save(os.path.join(folder, f"{name}.png"))


def _edit_first_message(qtbot, window, text: str) -> None:
    qtbot.mouseClick(window.transcript.cards[0].edit_button, Qt.MouseButton.LeftButton)
    window.composer.edit.selectAll()
    qtbot.keyClicks(window.composer.edit, text)
    qtbot.keyClick(
        window.composer.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier
    )
    wait_idle(qtbot, window)


def _forked_conversation(db) -> tuple[int, dict[str, int]]:  # type: ignore[no-untyped-def]
    """The first message edited, and the edited branch asking for a tool."""
    nodes = [
        {"id": 1, "parent": None, "role": "root", "text": ""},
        {"id": 2, "parent": 1, "role": "user", "text": FIRST},
        {"id": 3, "parent": 2, "role": "assistant", "text": "Through civil wars."},
        {"id": 4, "parent": 1, "role": "user", "text": EDITED},
        {"id": 5, "parent": 4, "role": "assistant", "text": "Augustus took power."},
        {"id": 6, "parent": 5, "role": "user", "text": "What time is it in Oslo?"},
        {
            "id": 7,
            "parent": 6,
            "role": "assistant",
            "text": "",
            "tool_use": tool_use.calling([CALL]),
        },
        {
            "id": 8,
            "parent": 7,
            "role": "tool",
            "text": "06:00",
            "tool_use": tool_use.answering("call_1", "get_current_time"),
        },
        {"id": 9, "parent": 8, "role": "assistant", "text": "Six in the morning."},
    ]
    imported = exchange.import_json(
        db,
        {
            "format": exchange.FORMAT,
            "version": exchange.VERSION,
            "title": "Rome",
            "active": 9,
            "nodes": nodes,
        },
    )
    snapshot_ids = sorted(n.id for n in tree_reads.tree(db, imported.conversation_id))
    names = (
        "root",
        "first",
        "reply",
        "edited",
        "answer",
        "ask",
        "call",
        "result",
        "last",
    )
    return imported.conversation_id, dict(zip(names, snapshot_ids, strict=True))


def _text_left(view, index: QModelIndex) -> int:
    """Where a row's text starts: after its indentation and its mark."""
    decoration = index.data(Qt.ItemDataRole.DecorationRole)
    width = decoration.deviceIndependentSize().width() if decoration else 0
    return view.visualRect(index).left() + int(width)


# --- the user's case, through the real window -------------------------------------


def test_an_edited_first_message_reads_as_two_branches_in_the_list(qtbot, make_window):
    window = make_window()
    window.resize(*WINDOW_SIZE)
    send(qtbot, window, FIRST)
    _edit_first_message(qtbot, window, EDITED)
    model, view = window.tree_model, window.tree_panel.view
    snapshot = model.snapshot
    first, edited = snapshot.children[snapshot.root_id]
    (reply,) = snapshot.children[first]
    (answer,) = snapshot.children[edited]

    # Each version is marked with its place at the fork.
    assert model.branch_of(first) == (1, 2) and model.branch_of(edited) == (2, 2)
    assert model.branch_of(reply) is None and model.branch_of(answer) is None
    marks = [
        model.index_of(n).data(Qt.ItemDataRole.DecorationRole) for n in (first, edited)
    ]
    assert all(isinstance(mark, QPixmap) and not mark.isNull() for mark in marks)
    assert "branch 1 of 2" in model.index_of(first).data(Qt.ItemDataRole.ToolTipRole)

    # Their labels start where they differ: what the view shows of each,
    # elided to its column, is not the same.
    labels = [model.index_of(n).data() for n in (first, edited)]
    assert labels == ["You: …in a few paragraphs?", "You: …in one sentence?"]
    metrics = QFontMetrics(view.font())
    shown = {
        metrics.elidedText(label, Qt.TextElideMode.ElideRight, view.columnWidth(0) - 60)
        for label in labels
    }
    assert len(shown) == 2, shown

    # A branch's replies are set in under its first row's text; the fork's
    # own chain is not.
    assert _text_left(view, model.index_of(reply)) == _text_left(
        view, model.index_of(first)
    )
    assert _text_left(view, model.index_of(answer)) == _text_left(
        view, model.index_of(edited)
    )
    start = model.index_of(snapshot.root_id)
    assert _text_left(view, model.index_of(reply)) > _text_left(view, start)
    # And the list shows the first branch, then the second.
    tops = [view.visualRect(model.index_of(n)).top() for n in (first, reply, edited)]
    assert tops == sorted(tops)


def test_the_graph_opens_readable_with_one_branch_per_column(qtbot, make_window):
    window = make_window()
    window.resize(*WINDOW_SIZE)
    conversation, ids = _forked_conversation(window.db)
    window.presenter.select_conversation(conversation)
    wait_idle(qtbot, window)
    qtbot.mouseClick(window.tree_panel.graph_button, Qt.MouseButton.LeftButton)
    graph = window.tree_panel.graph
    assert graph.active_id == ids["last"]
    # The panel settles its layout (the graph's hint is longer than the
    # list's) after the switch: the graph fits again to what it is left.
    qtbot.wait(50)
    _screenshot(window.tree_panel, "graph_open")

    centres = {nid: graph._items[nid].scenePos() for nid in graph.node_ids()}
    # One node per row: no branch's message beside another's.
    ys = [point.y() for point in centres.values()]
    assert len(set(ys)) == len(ys)
    # One column per branch, the second branch below the first.
    columns = {nid: point.x() for nid, point in centres.items()}
    first_branch = {columns[ids["first"]], columns[ids["reply"]]}
    second_branch = {
        columns[n] for n in ("edited", "answer", "call", "last") for n in [ids[n]]
    }
    assert len(first_branch) == 1 and len(second_branch) == 1
    assert first_branch != second_branch
    assert centres[ids["edited"]].y() > centres[ids["reply"]].y()

    # On open: readable labels (9 px at least), and everything in view.
    font_px = QFontInfo(graph._style.label_font).pixelSize()
    assert font_px * graph.transform().m11() >= tree_graph.READABLE_LABEL_PX - 0.01
    visible = graph.mapToScene(graph.viewport().rect()).boundingRect()
    for nid in graph.node_ids():
        assert visible.contains(graph._items[nid].sceneBoundingRect()), nid
    bar = graph.horizontalScrollBar()
    assert bar.maximum() <= bar.minimum()  # not cut off at the right

    # The versions' labels differ where their texts do; tool nodes are marked.
    assert (
        graph._items[ids["edited"]].label(graph._style.label_font).startswith("…in one")
    )
    assert graph._items[ids["call"]].tool == ("call", "calls get_current_time")
    assert graph._items[ids["result"]].tool == ("result", "result of get_current_time")
    snapshot = window.tree_model.snapshot
    assert "calls get_current_time" in node_tooltip(snapshot.nodes[ids["call"]])
    assert "result of get_current_time" in node_tooltip(snapshot.nodes[ids["result"]])


def test_the_list_marks_tool_calls_and_results(qtbot, make_window):
    window = make_window()
    window.resize(*WINDOW_SIZE)
    conversation, ids = _forked_conversation(window.db)
    window.presenter.select_conversation(conversation)
    wait_idle(qtbot, window)
    model, view = window.tree_model, window.tree_panel.view
    _screenshot(window.tree_panel, "tree_fork")

    def tip(name: str) -> str:
        return model.index_of(ids[name]).data(Qt.ItemDataRole.ToolTipRole)

    assert tip("call").startswith("⚙ Calls get_current_time")
    assert tip("result").startswith("↩ Result of get_current_time")
    assert "⚙" not in tip("answer") and "↩" not in tip("answer")
    # The glyph stands in the branch's margin: the row's text lines up with
    # its neighbours'.
    marks = {
        name: model.index_of(ids[name]).data(Qt.ItemDataRole.DecorationRole)
        for name in ("answer", "call", "result")
    }
    assert len({mark.cacheKey() for mark in marks.values()}) == 3  # three looks
    lefts = {_text_left(view, model.index_of(ids[n])) for n in marks}
    assert len(lefts) == 1
    # Labels readable: who, and what the tool use was.
    assert model.index_of(ids["call"]).data() == "Assistant: Calls get_current_time"
    assert (
        model.index_of(ids["result"])
        .data()
        .startswith("Tool: Result of get_current_time: 06:00")
    )


# --- the model alone ---------------------------------------------------------------


def _summary(node_id: int, parent: int | None, text: str = "x") -> NodeSummary:
    role = "root" if parent is None else ("user", "assistant")[node_id % 2]
    return NodeSummary(
        id=node_id,
        parent_id=parent,
        role=role,
        text=text,
        n_tokens=node_id,
        status="complete",
        checkpoint_bytes=0,
        created_at=datetime.now(UTC),
    )


def test_marks_follow_branches_as_they_come_and_go(qtbot, qtmodeltester):
    model = ConversationTreeModel()
    base = [_summary(1, None), _summary(2, 1, FIRST), _summary(3, 2)]
    model.set_snapshot(TreeSnapshot(1, base))
    assert model.index_of(2).data(Qt.ItemDataRole.DecorationRole) is None
    assert model.index_of(2).data() == row_label("user", FIRST, False)
    qtmodeltester.check(model)

    # A second version: the first is told its mark and its label changed.
    grown = [*base, _summary(4, 1, EDITED), _summary(5, 4)]
    with qtbot.waitSignal(
        model.dataChanged,
        check_params_cb=lambda first, _last, roles: (
            first == model.index_of(2) and int(Qt.ItemDataRole.DecorationRole) in roles
        ),
    ):
        model.set_snapshot(TreeSnapshot(1, grown))
    assert model.branch_of(2) == (1, 2) and model.branch_of(4) == (2, 2)
    assert model.index_of(2).data() == "You: …in a few paragraphs?"
    assert model.index_of(3).data(Qt.ItemDataRole.DecorationRole) is not None
    qtmodeltester.check(model)

    # A third: k/3.
    model.set_snapshot(TreeSnapshot(1, [*grown, _summary(6, 1, "Something else")]))
    assert [model.branch_of(n) for n in (2, 4, 6)] == [(1, 3), (2, 3), (3, 3)]
    assert model.index_of(6).data() == "You: Something else"

    # Back to one version: no marks, no set-in, the whole label again.
    model.set_snapshot(TreeSnapshot(1, base))
    assert model.branch_of(2) is None
    assert model.index_of(2).data(Qt.ItemDataRole.DecorationRole) is None
    assert model.index_of(3).data(Qt.ItemDataRole.DecorationRole) is None
    assert model.index_of(2).data().startswith("You: Can you explain")
    qtmodeltester.check(model)


def test_a_streaming_sibling_relabels_the_others(qtbot):
    model = ConversationTreeModel()
    nodes = [_summary(1, None), _summary(2, 1, FIRST), _summary(4, 1, "Can")]
    model.set_snapshot(TreeSnapshot(1, nodes))
    assert model.index_of(2).data() == row_label("user", FIRST, False)
    with qtbot.waitSignal(
        model.dataChanged,
        check_params_cb=lambda first, _last, _roles: first == model.index_of(2),
    ):
        model.set_snapshot(TreeSnapshot(1, [*nodes[:2], _summary(4, 1, EDITED)]))
    assert model.index_of(2).data() == "You: …in a few paragraphs?"


@pytest.mark.parametrize(
    ("text", "others", "expected"),
    [
        (FIRST, [EDITED], "…in a few paragraphs?"),
        (EDITED, [FIRST, "Other"], "…in one sentence?"),
        ("Tell me a joke", ["Tell me a story"], None),  # too short to skip
        ("Tell me a short joke", ["Tell me a short story"], "…short joke"),
        ("Same text here", ["Same text here"], None),  # nothing of its own
        ("Hi there", [], None),
        ("**Bold** start of the day", ["Bold start of the night"], "…the day"),
    ],
)
def test_labels_show_where_sibling_texts_differ(text, others, expected):
    assert differing_text(text, others) == expected


def test_tool_marks_name_the_tools():
    def node(role: str, use: dict | None) -> NodeSummary:
        return NodeSummary(
            1, None, role, "", 0, "complete", 0, datetime.now(UTC), tool_use=use
        )

    two = [CALL, {**CALL, "id": "c2", "name": "search"}]
    assert tool_mark(node("assistant", tool_use.calling(two))) == (
        "call",
        "calls get_current_time, search",
    )
    assert tool_mark(node("tool", tool_use.answering("c", "search"))) == (
        "result",
        "result of search",
    )
    assert tool_mark(node("assistant", None)) is None
    assert tool_mark(node("user", None)) is None


def test_the_graph_labels_forks_and_tools_alone(qtbot):
    graph = TreeGraphView()
    qtbot.addWidget(graph)
    graph.resize(340, 500)
    graph.show()
    nodes = [
        _summary(1, None),
        _summary(2, 1, FIRST),
        _summary(3, 2),
        _summary(4, 1, EDITED),
    ]
    graph.set_tree(TreeSnapshot(1, nodes), 4)
    font = graph._style.label_font
    assert graph._items[2].label(font).startswith("…in a few")
    # A sibling's text changing relabels the others.
    nodes[3] = _summary(4, 1, "Something else entirely")
    graph.set_tree(TreeSnapshot(1, nodes), 4)
    assert graph._items[2].label(font).startswith("Can you")
