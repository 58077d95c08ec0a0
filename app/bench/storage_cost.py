"""Scenario 3: checkpoint bytes per token of conversation, vs. full snapshots.

A delta checkpoint holds only its node's cells, so a tree costs about its
token count times the per-token KV size. One whole-context snapshot per node
(what saving llama.cpp's state at every message would give) costs each node's
end position times that size instead.
"""

from __future__ import annotations

from app.bench.measure import ratio
from app.bench.results import StorageRow
from storage import checkpoint_rows, node_rows, tree_reads
from storage.db import Database


def _row(
    shape: str, spans: list[tuple[int, int]], sizes: list[int], kv_bytes_per_token: int
) -> StorageRow:
    """Build a row from each node's (tokens, end position) and checkpoint size."""
    tokens = sum(n for n, _ in spans)
    stored = sum(sizes)
    per_token = ratio(stored, tokens)
    full = sum(end for _, end in spans) * kv_bytes_per_token
    return StorageRow(
        shape=shape,
        nodes=len(spans),
        tokens=tokens,
        checkpoint_bytes=stored,
        bytes_per_token=per_token,
        kv_bytes_per_token=kv_bytes_per_token,
        overhead_pct=(ratio(per_token, kv_bytes_per_token) - 1) * 100,
        full_snapshot_bytes=full,
        full_over_delta=ratio(full, stored),
    )


def linear_storage(
    db: Database, profile_id: int, leaf_id: int, kv_bytes_per_token: int
) -> StorageRow:
    """Storage of the path from the root to ``leaf_id`` (a linear chat)."""
    path = node_rows.get_path(db, leaf_id)
    sizes = checkpoint_rows.checkpointed_nodes(db, [n.id for n in path], profile_id)
    return _row(
        f"linear chat, {len(path) // 2} turns",
        [(len(n.tokens), n.end_pos) for n in path],
        [
            sizes.get(n.id, 0) or _shared_start_bytes(db, profile_id, n.id)
            if n.parent_id is None
            else sizes.get(n.id, 0)
            for n in path
        ],
        kv_bytes_per_token,
    )


def _shared_start_bytes(db: Database, profile_id: int, root_id: int) -> int:
    """The checkpoint bytes of the start whose checkpoint ``root_id`` restores
    from (one system prompt, several conversations; 0 if none): what the
    conversation costs on its own."""
    twin = checkpoint_rows.twin_root(db, root_id, profile_id)
    if twin is None:
        return 0
    return checkpoint_rows.checkpointed_nodes(db, [twin], profile_id).get(twin, 0)


def tree_storage(
    db: Database, profile_id: int, conversation_id: int, kv_bytes_per_token: int
) -> StorageRow:
    """Storage of a whole conversation tree, each span counted once."""
    nodes = tree_reads.tree(db, conversation_id, profile_id)
    ends: dict[int, int] = {}
    for node in nodes:  # parents come before their children
        start = ends[node.parent_id] if node.parent_id is not None else 0
        ends[node.id] = start + node.n_tokens
    leaves = len({n.id for n in nodes} - {n.parent_id for n in nodes})
    return _row(
        f"bushy tree, {leaves} leaves",
        [(n.n_tokens, ends[n.id]) for n in nodes],
        [
            n.checkpoint_bytes or _shared_start_bytes(db, profile_id, n.id)
            if n.parent_id is None
            else n.checkpoint_bytes
            for n in nodes
        ],
        kv_bytes_per_token,
    )


def sqlite_footprint(db: Database) -> dict[str, int]:
    """Bytes of the database file (with its write-ahead log) vs. the blobs in it."""
    with db.engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    files = [db.path, db.path.with_name(db.path.name + "-wal")]
    return {
        "file_bytes": sum(f.stat().st_size for f in files if f.exists()),
        "checkpoint_bytes": checkpoint_rows.total_checkpoint_bytes(db),
    }
