"""Which calls wait on a path, and what a tool turn's ending says
(``app/window/tool_turns.py``), on snapshots built from plain records."""

from __future__ import annotations

from datetime import UTC, datetime

from app.conversation.tree_snapshot import TreeSnapshot
from app.window.tool_turns import ending_text, offers_tools, waiting_calls
from storage import tool_use
from storage.records import NodeSummary
from storage.values import Role, Status

TOOLS = [{"type": "function", "function": {"name": "get_time"}}]
CALLS = [
    {"id": "a", "name": "get_time", "arguments": "{}"},
    {"id": "b", "name": "get_time", "arguments": '{"zone": "UTC"}'},
]


def _node(node_id: int, parent: int | None, role: Role, use=None) -> NodeSummary:  # type: ignore[no-untyped-def]
    return NodeSummary(
        id=node_id,
        parent_id=parent,
        role=role,
        text="",
        n_tokens=1,
        status=Status.COMPLETE,
        checkpoint_bytes=0,
        created_at=datetime.now(UTC),
        tool_use=use,
    )


def _snapshot() -> TreeSnapshot:
    """A start offering a tool, a question, a reply with two calls, the
    first call's result, and (a sibling branch) a plain answer."""
    return TreeSnapshot(
        1,
        [
            _node(1, None, Role.ROOT, tool_use.offering(TOOLS)),
            _node(2, 1, Role.USER),
            _node(3, 2, Role.ASSISTANT, tool_use.calling(CALLS)),
            _node(4, 3, Role.TOOL, tool_use.answering("a", "get_time")),
            _node(5, 2, Role.ASSISTANT),
        ],
    )


def test_the_calls_without_a_result_wait_where_the_path_ends_among_them():
    snapshot = _snapshot()
    assert waiting_calls(snapshot, 3) == {3: ["a", "b"]}
    assert waiting_calls(snapshot, 4) == {3: ["b"]}
    # Elsewhere nothing waits: a question, a plain reply, the start.
    assert waiting_calls(snapshot, 2) == {}
    assert waiting_calls(snapshot, 5) == {}
    assert waiting_calls(snapshot, 1) == {}


def test_every_call_answered_waits_no_more():
    snapshot = _snapshot()
    answered = TreeSnapshot(
        1,
        [
            *snapshot.nodes.values(),
            _node(6, 4, Role.TOOL, tool_use.answering("b", "get_time")),
        ],
    )
    assert waiting_calls(answered, 6) == {}


def test_what_an_ending_says():
    assert "Run, Edit arguments or Deny" in (ending_text("needs_approval", 8) or "")
    assert "8 rounds" in (ending_text("step_limit", 8) or "")
    assert ending_text("answered", 8) is None and ending_text(None, 8) is None


def test_a_branch_offers_tools_where_its_start_does():
    snapshot = _snapshot()
    assert offers_tools(snapshot, 5) and offers_tools(snapshot, 1)
    assert not offers_tools(snapshot, None) and not offers_tools(snapshot, 99)
