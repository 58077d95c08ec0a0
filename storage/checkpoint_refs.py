"""Where some nodes' checkpoints are: what a write changes of a tree index.

``tree_reads.tree_index`` reads where every checkpoint of a conversation
is; after a write that named the nodes it changed (``Database.changing``),
a cache reads again only theirs, here: one indexed look-up per node
(``ix_checkpoint_node_profile``), whatever the size of the tree.
"""

from __future__ import annotations

from collections.abc import Iterable

from storage.db import Database
from storage.tree_reads import CheckpointRef

# The columns of tree_reads.tree_index's checkpoint query, for some nodes.
_REFS = (
    "SELECT c.node_id, c.id, c.kind, c.start_pos, c.end_pos, c.byte_size, "
    "c.checksum, p.fingerprint FROM checkpoint c "
    "JOIN backend_profile p ON p.id = c.profile_id "
    "WHERE c.profile_id = ? AND c.node_id IN ({marks})"
)
# Ids bound per statement: SQLite before 3.32 allows 999 variables.
_IDS_PER_READ = 500
# Row ids SQLite can hold (binding a larger Python int raises OverflowError).
_MAX_ID = 2**63 - 1


def checkpoint_refs(
    db: Database, node_ids: Iterable[int], profile_id: int
) -> tuple[dict[int, CheckpointRef], str]:
    """The checkpoints of ``node_ids`` for the profile, by node, read in one
    snapshot, and the profile's fingerprint ("" when none was found)."""
    ids = sorted({i for i in node_ids if 0 < i <= _MAX_ID})
    refs: dict[int, CheckpointRef] = {}
    profile = ""
    if not ids or not 0 < profile_id <= _MAX_ID:
        return refs, profile
    with db.read_raw() as raw:
        for at in range(0, len(ids), _IDS_PER_READ):
            batch = ids[at : at + _IDS_PER_READ]
            statement = _REFS.format(marks=",".join("?" * len(batch)))
            for row in raw.execute(statement, [profile_id, *batch]):
                refs[row[0]] = CheckpointRef(*row[:7])
                profile = row[7]
    return refs, profile
