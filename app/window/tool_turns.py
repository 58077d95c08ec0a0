"""What the window shows and says of tool use, without Qt.

A reply that calls tools is followed on its path by one result per call, in
the order of the calls. Where the path ends inside that run (the reply, or
some of its results) the calls without a result are waiting for the user:
the first of them is asked about in its card (Run, Edit arguments, Deny).
When a tool turn ends, the window says why it stopped where it did.
"""

from __future__ import annotations

from app.conversation.tree_snapshot import TreeSnapshot
from storage import tool_use
from storage.values import Role

# What the model's turn ended with (``app.conversation.tool_loop.Ending``),
# as the status bar says it.
_ENDINGS = {
    "needs_approval": (
        "The model asks to run a tool: Run, Edit arguments or Deny it in its card."
    ),
    "step_limit": (
        "Stopped at the step limit ({limit} rounds of tool calls): Run the "
        "waiting call to go on."
    ),
}


def waiting_calls(snapshot: TreeSnapshot, node_id: int) -> dict[int, list[str]]:
    """The calls that wait for the user on the path to ``node_id``: the
    reply that made them -> their ids, in order ({} when none waits).

    Only the path's last reply with calls can wait, and only when the path
    ends at it or among its results.
    """
    path = snapshot.path(node_id)
    results: list[str] = []
    for position in range(len(path) - 1, -1, -1):
        node = snapshot.nodes[path[position]]
        if node.role == Role.TOOL:
            results.append(tool_use.answered_call(node.tool_use)[0])
            continue
        calls = tool_use.calls_of(node.tool_use)
        if node.role != Role.ASSISTANT or not calls:
            return {}
        waiting = [call["id"] for call in calls if call["id"] not in results]
        return {node.id: waiting} if waiting else {}
    return {}


def ending_text(ending: str | None, step_limit: int) -> str | None:
    """What the status bar says of a tool turn that ended with ``ending``
    (None: it answered, or it was no tool turn)."""
    text = _ENDINGS.get(ending or "")
    return text.format(limit=step_limit) if text else None


def offers_tools(snapshot: TreeSnapshot, node_id: int | None) -> bool:
    """Whether the start of ``node_id``'s branch offers tools to the model."""
    if node_id is None or node_id not in snapshot:
        return False
    root = snapshot.nodes[snapshot.path(node_id)[0]]
    return bool(tool_use.tools_of(root.tool_use))
