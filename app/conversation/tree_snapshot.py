"""A conversation tree held in memory for the views (Qt-free).

Built from the ``NodeSummary`` list of ``storage.tree_reads``; answers what
the transcript and the tree panel ask: a node's path, its siblings, where a
branch leads.
"""

from __future__ import annotations

from storage.records import NodeSummary


class TreeSnapshot:
    """The nodes of one conversation, indexed by id and by parent."""

    def __init__(self, conversation_id: int | None, nodes: list[NodeSummary]) -> None:
        self.conversation_id = conversation_id
        self.nodes: dict[int, NodeSummary] = {n.id: n for n in nodes}
        self.children: dict[int | None, list[int]] = {}
        for (
            node
        ) in nodes:  # parents come first and ids grow: children stay oldest first
            self.children.setdefault(node.parent_id, []).append(node.id)
            self.children.setdefault(node.id, [])

    @classmethod
    def empty(cls) -> TreeSnapshot:
        """A snapshot of no conversation."""
        return cls(None, [])

    @property
    def roots(self) -> list[int]:
        """The conversation's starts, oldest first: one per system prompt."""
        return self.children.get(None, [])

    @property
    def root_id(self) -> int | None:
        """The conversation's first start, if any."""
        return self.roots[0] if self.roots else None

    def deletable(self, node_id: int) -> bool:
        """Whether ``node_id``'s branch can be deleted: any message, and a
        start where the conversation has another (one per system prompt)."""
        return self.nodes[node_id].parent_id is not None or len(self.roots) > 1

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.nodes

    def path(self, node_id: int) -> list[int]:
        """Ids from the root down to ``node_id``."""
        ids: list[int] = []
        current: int | None = node_id
        while current is not None:
            ids.append(current)
            current = self.nodes[current].parent_id
        return ids[::-1]

    def siblings(self, node_id: int) -> list[int]:
        """Ids of the node and its siblings, oldest first."""
        return self.children[self.nodes[node_id].parent_id]

    def transcript(self, node_id: int) -> list[NodeSummary]:
        """The messages from the root down to ``node_id``."""
        return [self.nodes[nid] for nid in self.path(node_id)]

    def latest_leaf(self, node_id: int) -> int:
        """Follow the newest child from ``node_id`` down to a leaf.

        Switching to a sibling branch shows where that branch was last
        extended, rather than stopping at the switched message.
        """
        while self.children.get(node_id):
            node_id = self.children[node_id][-1]
        return node_id

    def descendant_count(self, node_id: int) -> int:
        """How many nodes lie below ``node_id`` (what deleting it also deletes)."""
        pending, count = list(self.children.get(node_id, [])), 0
        while pending:
            count += 1
            pending.extend(self.children.get(pending.pop(), []))
        return count

    # --- keyboard navigation: where each move from the active node leads ---------

    def sibling_step(self, node_id: int, step: int) -> int | None:
        """The branch ``step`` siblings away at the deepest fork on the path.

        The fork is the deepest message of the path that has siblings, as the
        transcript's sibling arrows show it; the result is where that branch was last
        extended. None when there is no sibling that way.
        """
        for nid in reversed(self.path(node_id)):
            siblings = self.siblings(nid)
            if len(siblings) > 1:
                index = siblings.index(nid) + step
                if 0 <= index < len(siblings):
                    return self.latest_leaf(siblings[index])
                return None
        return None

    def parent_of(self, node_id: int) -> int | None:
        """The node's parent (None for the root)."""
        return self.nodes[node_id].parent_id

    def newest_child(self, node_id: int) -> int | None:
        """The most recent child of the node, if it has any."""
        children = self.children.get(node_id)
        return children[-1] if children else None

    def last_of_role(self, node_id: int, role: str) -> int | None:
        """The deepest node of ``role`` on the path to ``node_id``."""
        return next(
            (n for n in reversed(self.path(node_id)) if self.nodes[n].role == role),
            None,
        )
