"""A conversation's tree, read fast: the index a move needs (parents,
checkpoints, the path's nodes) and the rows the window lists, in plain SQL
on sqlite3's own connection."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field

from storage import conversation_listing
from storage.checkpoint_rows import TWIN_OF_START
from storage.conversation_listing import ConversationRecord
from storage.db import Database
from storage.errors import NotFound
from storage.lookup import (
    IDS_PER_QUERY,
    not_found_message,
    require_valid_id,
    valid_id,
    valid_ids,
)
from storage.records import NODE_COLUMNS, NodeRecord, NodeSummary, node_from_stored
from storage.tables import (
    Conversation,
    Node,
)
from storage.values import Role, Status

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointRef:
    """Where a node's checkpoint is, and what its checksum was made over.

    ``checkpoint_id`` is also the row id of its blob (``checkpoint_blob``).
    """

    node_id: int
    checkpoint_id: int
    kind: str
    start_pos: int
    end_pos: int
    byte_size: int
    checksum: str


@dataclass(frozen=True)
class TreeIndex:
    """A conversation's shape, and the nodes of one path in it.

    ``parents`` maps every node to its parent; ``checkpoints`` every node
    with a checkpoint of the profile asked for to where it is; ``profile``
    is that profile's fingerprint ("" when none was asked for); ``nodes``
    holds the records of the path to the node the index was asked for.
    """

    conversation: ConversationRecord
    parents: dict[int, int | None]
    checkpoints: dict[int, CheckpointRef]
    profile: str = ""
    nodes: dict[int, NodeRecord] = field(default_factory=dict)


# The statements of a move's reads (a restore, a switch), in plain SQL on
# sqlite3's own connection (``Database.read_raw``): a restore in a new process
# would otherwise spend more time in SQLAlchemy's first executions of them
# (some 15 ms, 4 to 6 ms of a cold resume unprofiled) than reading. Rows
# become records through the same mappings as the ORM's rows do
# (``records.node_from_stored``, ``conversation_listing.conversation_from_stored``).
_NODE_COLUMNS = ", ".join(NODE_COLUMNS)

_CONVERSATION_OF = "SELECT conversation_id FROM node WHERE id = ?"

_PARENTS = "SELECT id, parent_id FROM node WHERE conversation_id = ?"

_CHECKPOINTS = (
    "SELECT c.node_id, c.id, c.kind, c.start_pos, c.end_pos, c.byte_size, "
    "c.checksum, p.fingerprint FROM checkpoint c "
    "JOIN node n ON n.id = c.node_id JOIN backend_profile p ON p.id = c.profile_id "
    "WHERE n.conversation_id = ? AND c.profile_id = ?"
)

_NODES = "SELECT " + _NODE_COLUMNS + " FROM node WHERE id IN ({marks})"


def _read_nodes(raw: sqlite3.Connection, ids: list[int]) -> dict[int, NodeRecord]:
    records: dict[int, NodeRecord] = {}
    for at in range(0, len(ids), IDS_PER_QUERY):
        batch = ids[at : at + IDS_PER_QUERY]
        statement = _NODES.format(marks=",".join("?" * len(batch)))
        for row in raw.execute(statement, batch):
            records[row[0]] = node_from_stored(row)
    return records


def tree_index(db: Database, node_id: int, profile_id: int | None) -> TreeIndex:
    """The index of the conversation holding ``node_id``, with the nodes of
    its path, from one snapshot; raises ``NotFound``."""
    require_valid_id(Node, node_id)
    with db.read_raw() as raw:
        found = raw.execute(_CONVERSATION_OF, (node_id,)).fetchone()
        if found is None:
            raise NotFound(f"No node with id {node_id}.")
        conversation_id = found[0]
        conversation = raw.execute(
            conversation_listing.CONVERSATION_BY_ID, (conversation_id,)
        ).fetchone()
        parents: dict[int, int | None] = dict(
            raw.execute(_PARENTS, (conversation_id,)).fetchall()
        )
        checkpoints: dict[int, CheckpointRef] = {}
        profile = ""
        if profile_id is not None and valid_id(profile_id):
            for row in raw.execute(_CHECKPOINTS, (conversation_id, profile_id)):
                checkpoints[row[0]] = CheckpointRef(*row[:7])
                profile = row[7]
        path = [node_id]
        while (parent := parents.get(path[-1])) is not None and len(path) <= len(
            parents
        ):
            path.append(parent)
        nodes = _read_nodes(raw, path)
    return TreeIndex(
        conversation_listing.conversation_from_stored(conversation),
        parents,
        checkpoints,
        profile,
        nodes,
    )


def get_nodes(db: Database, node_ids: Sequence[int]) -> dict[int, NodeRecord]:
    """The nodes of ``node_ids`` that exist, by id, read in one snapshot."""
    ids = valid_ids(list(node_ids))
    if not ids:
        return {}
    with db.read_raw() as raw:
        return _read_nodes(raw, ids)


# Every node of a conversation with its checkpoints' bytes, on the raw
# connection: the tree panel asks for it each time a conversation opens, and
# through the ORM a 10,000-node tree took 0.41 s, most of it making rows.
_TREE = f"""
SELECT n.id, n.parent_id, n.role, n.text, n.n_tokens, n.status, n.created_at,
       n.generation, n.thinking, n.tool_use,
       (SELECT sum(c.byte_size) FROM checkpoint AS c
        WHERE c.node_id = n.id AND (:profile IS NULL OR c.profile_id = :profile)),
       CASE WHEN n.parent_id IS NULL AND n.n_tokens > 0 THEN (
        -- A start's twin, as twin_root finds one: asked of starts only.
        SELECT c.byte_size FROM node AS m JOIN checkpoint AS c ON c.node_id = m.id
        WHERE {TWIN_OF_START} LIMIT 1) END
FROM node AS n WHERE n.conversation_id = :conversation ORDER BY n.id
"""

_CONVERSATION_EXISTS = "SELECT 1 FROM conversation WHERE id = ?"


def tree(
    db: Database, conversation_id: int, profile_id: int | None = None
) -> list[NodeSummary]:
    """Every node of a conversation, parents before children, without token data.

    ``checkpoint_bytes`` counts the checkpoints of ``profile_id`` (all profiles
    when None). Raises ``NotFound`` for a conversation that is not there.
    """
    require_valid_id(Conversation, conversation_id)
    with db.read_raw() as raw:
        if raw.execute(_CONVERSATION_EXISTS, (conversation_id,)).fetchone() is None:
            raise NotFound(not_found_message(Conversation, conversation_id))
        rows = raw.execute(
            _TREE, {"conversation": conversation_id, "profile": profile_id}
        ).fetchall()
    roles = {role.value: role for role in Role}
    statuses = {status.value: status for status in Status}
    return [
        NodeSummary(
            id=node_id,
            parent_id=parent_id,
            role=roles[role],
            text=text_,
            n_tokens=n_tokens,
            status=statuses[status],
            checkpoint_bytes=size or 0,
            created_at=conversation_listing.timestamp(created_at),
            generation=conversation_listing.stored_json(generation),
            thinking=thinking or "",
            shared_checkpoint_bytes=0 if size else twin_size or 0,
            tool_use=conversation_listing.stored_json(use),
        )
        for (
            node_id,
            parent_id,
            role,
            text_,
            n_tokens,
            status,
            created_at,
            generation,
            thinking,
            use,
            size,
            twin_size,
        ) in rows
    ]
