"""The open conversation's tree in memory: parents, spans and checkpoint index.

A move needs the path to a node (each node with its span) and where the
checkpoints below the fork are. Asked of SQLite on every move, that is a
recursive query and a join: most of a sibling switch's time. This cache
holds one conversation: its index (``repository.tree_index``: every node's
parent and every checkpoint's location and checksum) and the records of the
nodes that paths went through, read with the index or when first needed.

It is dropped whenever ``Database.generation()`` moves: after any write
through the same ``Database`` object (a message added or changed, a branch
or conversation deleted, checkpoints saved, cleared or evicted, from any
thread) and after any commit by another connection or process that SQLite
reports (``PRAGMA data_version``; see ``generation`` for its one gap). The
bookkeeping a restore defers (active node, last use of checkpoints) does not
move it: nothing here depends on it. Should the cache ever be stale all the
same, a checkpoint it points to is either gone or fails its checksum, which
binds the node, the span and its tokens, and the move reprocesses instead:
slower, never wrong.
"""

from __future__ import annotations

from storage import repository
from storage.catalog import ConversationRecord
from storage.db import Database
from storage.errors import NotFound
from storage.repository import (
    CheckpointRef,
    NodeRecord,
    TreeIndex,
    pack_tokens,
)


class TreeCache:
    """The tree of the conversation last moved in, for one backend profile.

    Parameters
    ----------
    db
        The database the tree is read from.
    profile_id
        Whose checkpoints to index (None: none, e.g. without a model).
    """

    def __init__(self, db: Database, profile_id: int | None) -> None:
        self._db = db
        self._profile_id = profile_id
        self._index: TreeIndex | None = None
        self._records: dict[int, NodeRecord] = {}
        self._packed: dict[int, bytes] = {}
        self._generation = -1

    def path(self, node_id: int) -> list[NodeRecord]:
        """Nodes from the root to ``node_id``; raises ``NotFound``."""
        index = self._fresh_index(node_id)
        ids = [node_id]
        parents = index.parents
        while (parent := parents[ids[-1]]) is not None:
            if parent not in parents or len(ids) > len(parents):
                # A parent outside the conversation, or a cycle: damage.
                raise NotFound(f"The path to node {node_id} is broken.")
            ids.append(parent)
        missing = [i for i in ids if i not in self._records]
        if missing:
            self._records.update(repository.get_nodes(self._db, missing))
            if any(i not in self._records for i in missing):
                # Deleted since the index was read: the next call reloads.
                self.forget()
                raise NotFound(f"No node with id {node_id}.")
        return [self._records[i] for i in reversed(ids)]

    def refresh(self, node_id: int) -> None:
        """Read the tree of ``node_id``'s conversation again if it may have changed."""
        self._fresh_index(node_id)

    def conversation(self, conversation_id: int) -> ConversationRecord | None:
        """The record of ``conversation_id`` if it is the one cached and fresh."""
        index = self._index
        if (
            index is None
            or index.conversation.id != conversation_id
            or self._db.generation() != self._generation
        ):
            return None
        return index.conversation

    def checkpoint(self, node_id: int) -> CheckpointRef | None:
        """Where ``node_id``'s checkpoint is (as of the last ``path`` or
        ``refresh`` call)."""
        return self._index.checkpoints.get(node_id) if self._index else None

    @property
    def profile(self) -> str:
        """The fingerprint of the profile whose checkpoints are indexed."""
        return self._index.profile if self._index else ""

    def packed_tokens(self, node: NodeRecord) -> bytes:
        """``node``'s tokens as the database stores them (what checksums bind)."""
        if self._records.get(node.id) is not node:
            return pack_tokens(node.tokens)  # a record changed since it was read
        packed = self._packed.get(node.id)
        if packed is None:
            packed = self._packed[node.id] = pack_tokens(node.tokens)
        return packed

    def below(self, node_id: int) -> list[int]:
        """Every node under ``node_id`` in the cached tree (not itself)."""
        if self._index is None:
            return []
        children: dict[int, list[int]] = {}
        for child, parent in self._index.parents.items():
            if parent is not None:
                children.setdefault(parent, []).append(child)
        found: list[int] = []
        stack = list(children.get(node_id, ()))
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(children.get(node, ()))
        return found

    def forget(self) -> None:
        """Drop everything; the next call reads the tree again."""
        self._index = None
        self._records = {}
        self._packed = {}
        self._generation = -1

    def _fresh_index(self, node_id: int) -> TreeIndex:
        generation = self._db.generation()
        index = self._index
        if (
            index is None
            or generation != self._generation
            or node_id not in index.parents
        ):
            # The generation is taken before reading: a write in between
            # makes the next call read again, never the reverse.
            self.forget()
            index = repository.tree_index(self._db, node_id, self._profile_id)
            self._index, self._generation = index, generation
            self._records = dict(index.nodes)
        return index
