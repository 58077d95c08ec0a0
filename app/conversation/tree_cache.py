"""The open conversation's tree in memory: parents, spans and checkpoint index.

A move needs the path to a node (each node with its span) and where the
checkpoints below the fork are. Asked of SQLite on every move, that is a
recursive query and a join: most of a sibling switch's time. This cache
holds one conversation: its index (``tree_reads.tree_index``: every node's
parent and every checkpoint's location and checksum) and the records of the
nodes that paths went through, read with the index or when first needed.

It follows ``Database.generation()``, which moves after any write through
the same ``Database`` object (a message added or changed, a branch or
conversation deleted, checkpoints saved, cleared or evicted, from any
thread) and after any commit by another connection or process that SQLite
reports (``PRAGMA data_version``; see ``generation``). When
every write since it last looked named the nodes it changed
(``Database.changing`` and ``adding``: the service's replies and moves, the
checkpoint writer), only those are read again: their records, parents and
checkpoints (``storage/checkpoint_refs.py``), a few indexed look-ups instead
of the whole tree (75 ms of CPU at 10,000 nodes, ``tools/scale_tree_visits.py``).
Any write that named nothing (a conversation's title or model, a deletion,
another connection's or process's commit, a node added whose block has not
ended) drops everything, and the next call reads the tree again.

The bookkeeping a restore defers (active node, last use of checkpoints)
does not move the generation: nothing here depends on it, and the
conversation's record may be behind on it (and on its time of change), as
after the named writes, which change it in passing. Should the cache ever
be stale all the same (a named write that changed more than it named), a
checkpoint it points to is either gone or fails its checksum, which binds
the node, the span and its tokens, and the move reprocesses instead:
slower, never wrong.

One thread uses a cache (the service's); writes on other threads (the
checkpoint writer's) reach it only through the ``Database``.
"""

from __future__ import annotations

from collections.abc import Collection

from storage import tree_reads
from storage.checkpoint_refs import checkpoint_refs
from storage.conversation_listing import ConversationRecord
from storage.db import Database
from storage.errors import NotFound
from storage.records import NodeRecord, pack_tokens
from storage.tree_reads import CheckpointRef


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
        self._conversation: ConversationRecord | None = None
        self._parents: dict[int, int | None] = {}
        # Made from _parents when first needed, then kept up with it.
        self._children: dict[int, list[int]] | None = None
        self._checkpoints: dict[int, CheckpointRef] = {}
        self._profile = ""
        self._records: dict[int, NodeRecord] = {}
        self._packed: dict[int, bytes] = {}
        self._generation = -1

    def path(self, node_id: int) -> list[NodeRecord]:
        """Nodes from the root to ``node_id``; raises ``NotFound``."""
        self._fresh(node_id)
        ids = [node_id]
        parents = self._parents
        while (parent := parents[ids[-1]]) is not None:
            if parent not in parents or len(ids) > len(parents):
                # A parent outside the conversation, or a cycle: damage.
                raise NotFound(f"The path to node {node_id} is broken.")
            ids.append(parent)
        missing = [i for i in ids if i not in self._records]
        if missing:
            self._records.update(tree_reads.get_nodes(self._db, missing))
            if any(i not in self._records for i in missing):
                # Deleted since the index was read: the next call reloads.
                self.forget()
                raise NotFound(f"No node with id {node_id}.")
        return [self._records[i] for i in reversed(ids)]

    def refresh(self, node_id: int) -> None:
        """Bring the tree of ``node_id``'s conversation up to date."""
        self._fresh(node_id)

    def conversation(self, conversation_id: int) -> ConversationRecord | None:
        """The record of ``conversation_id`` if it is the one cached and fresh."""
        conversation = self._conversation
        if (
            conversation is None
            or conversation.id != conversation_id
            or not self._caught_up()
        ):
            return None
        return conversation

    def checkpoint(self, node_id: int) -> CheckpointRef | None:
        """Where ``node_id``'s checkpoint is (as of the last ``path`` or
        ``refresh`` call)."""
        return self._checkpoints.get(node_id)

    @property
    def profile(self) -> str:
        """The fingerprint of the profile whose checkpoints are indexed."""
        return self._profile

    def packed_tokens(self, node: NodeRecord) -> bytes:
        """``node``'s tokens as the database stores them (what checksums bind)."""
        if self._records.get(node.id) is not node:
            return pack_tokens(node.tokens)  # a record changed since it was read
        packed = self._packed.get(node.id)
        if packed is None:
            packed = self._packed[node.id] = pack_tokens(node.tokens)
        return packed

    def has_children(self, node_id: int) -> bool:
        """Whether ``node_id`` has children in the cached tree (as of the
        last ``path`` or ``refresh`` call)."""
        return bool(self._children_map().get(node_id))

    def below(self, node_id: int) -> list[int]:
        """Every node under ``node_id`` in the cached tree (not itself)."""
        children = self._children_map()
        found: list[int] = []
        stack = list(children.get(node_id, ()))
        while stack:
            node = stack.pop()
            found.append(node)
            stack.extend(children.get(node, ()))
        return found

    def forget(self) -> None:
        """Drop everything; the next call reads the tree again."""
        self._conversation = None
        self._parents = {}
        self._children = None
        self._checkpoints = {}
        self._profile = ""
        self._records = {}
        self._packed = {}
        self._generation = -1

    def _fresh(self, node_id: int) -> None:
        if (
            self._conversation is not None
            and self._caught_up()
            and node_id in self._parents
        ):
            return
        # The generation is taken before reading: a write in between makes
        # the next call read again (or follow it), never the reverse.
        self.forget()
        generation = self._db.generation()
        index = tree_reads.tree_index(self._db, node_id, self._profile_id)
        self._conversation = index.conversation
        self._parents = index.parents
        self._checkpoints = index.checkpoints
        self._profile = index.profile
        self._records = dict(index.nodes)
        self._generation = generation

    def _caught_up(self) -> bool:
        """Follow the writes since the last look; False (and everything
        forgotten) where one cannot be followed."""
        generation, changed = self._db.changes_since(self._generation)
        if changed is None or (changed and not self._follow(changed)):
            self.forget()
            return False
        self._generation = generation
        return True

    def _follow(self, changed: Collection[int]) -> bool:
        """Read ``changed`` nodes again: records, parents, checkpoints.

        Read after ``changes_since`` took the generation, so what is read
        holds at least those writes (maybe later ones too, which the next
        look follows or drops for). False where the tree cannot be patched:
        a node of it gone (only deletions, which name nothing, do that), or
        one whose parent it does not know.
        """
        assert self._conversation is not None
        conversation_id = self._conversation.id
        # Ascending: a parent (older) before the children added with it.
        ids = sorted(changed)
        records = tree_reads.get_nodes(self._db, ids)
        refs: dict[int, CheckpointRef] = {}
        if self._profile_id is not None:
            refs, profile = checkpoint_refs(self._db, ids, self._profile_id)
            self._profile = profile or self._profile
        parents = self._parents
        for node_id in ids:
            record = records.get(node_id)
            if record is None or record.conversation_id != conversation_id:
                if node_id in parents:
                    return False
                continue  # another conversation's node
            parent = record.parent_id
            if node_id not in parents:
                if parent is not None and parent not in parents:
                    return False
                parents[node_id] = parent
                if self._children is not None and parent is not None:
                    self._children.setdefault(parent, []).append(node_id)
            elif parents[node_id] != parent:
                return False  # nothing moves a node: damage, or not ours
            if self._records.get(node_id) != record:
                # Kept when equal: the same object tells the context that
                # holds it that nothing changed (and its packed tokens stay).
                self._records[node_id] = record
                self._packed.pop(node_id, None)
            ref = refs.get(node_id)
            if ref is None:
                self._checkpoints.pop(node_id, None)
            else:
                self._checkpoints[node_id] = ref
        return True

    def _children_map(self) -> dict[int, list[int]]:
        if self._children is None:
            children: dict[int, list[int]] = {}
            for child, parent in self._parents.items():
                if parent is not None:
                    children.setdefault(parent, []).append(child)
            self._children = children
        return self._children
