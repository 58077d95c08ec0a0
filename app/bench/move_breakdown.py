"""Where the database part of a move goes, step by step.

A move now reads the conversation's tree index with its path (a cold move)
or takes the path from the tree cache (a warm one), opens each checkpoint
blob below the fork and reads it into one reused buffer, verifies the
checksums there, and leaves the active node and the checkpoints' last use
to be written after the move. For comparison, the earlier ways are timed on
the same nodes: the recursive path query, the blobs selected in one query
(``checkpoint_rows.load_checkpoints``) or one transaction each, also writing
``last_used_at`` (``checkpoint_rows.load_checkpoint``), and the active node
written during the move. Each step is timed on its own, for a sibling switch
(the nodes below the fork) and for a cold resume (the whole path).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from app.bench.errors import BenchError
from app.bench.measure import Stopwatch, median
from app.bench.results import MoveBreakdownRow
from app.conversation.tree_cache import TreeCache
from storage import checkpoint_rows, conversation_rows, node_rows
from storage.checkpoint_reader import CheckpointReader
from storage.db import Database


def measure_move_breakdown(
    db: Database,
    profile_id: int,
    leaf_id: int,
    fork_id: int | None,
    repeats: int,
) -> MoveBreakdownRow:
    """Time each database step of moving to ``leaf_id``.

    ``fork_id`` is the deepest node kept in memory (a sibling switch), or
    None for a cold resume that restores the whole path.
    """
    path = node_rows.get_path(db, leaf_id)
    ids = [node.id for node in path]
    first = ids.index(fork_id) + 1 if fork_id is not None else 0
    moved = ids[first:]
    figures: dict[str, list[float]] = {}

    def timed(name: str, step: Callable[[], object]) -> object:
        with Stopwatch() as watch:
            result = step()
        figures.setdefault(name, []).append(watch.ms)
        return result

    reader = CheckpointReader()
    for _ in range(max(repeats, 5)):  # single steps are fast: a few more samples
        cold = TreeCache(db, profile_id)
        timed("index", functools.partial(cold.path, leaf_id))
        timed("cached", functools.partial(cold.path, leaf_id))
        timed("path", lambda: node_rows.get_path(db, leaf_id))
        refs = [(n, cold.checkpoint(n.id)) for n in path[first:] if n.tokens]
        if any(ref is None for _n, ref in refs):
            raise BenchError(f"a checkpoint on the path to node {leaf_id} is missing")
        reader.times.read_ms = reader.times.verify_ms = 0.0
        with reader.reading(db) as reads:
            for node, ref in refs:
                assert ref is not None
                data = reads.verified(ref, cold.profile, cold.packed_tokens(node))
                if isinstance(data, str):
                    raise BenchError(f"checkpoint of node {node.id}: {data}")
        figures.setdefault("blob_read", []).append(reader.times.read_ms)
        figures.setdefault("verify", []).append(reader.times.verify_ms)
        timed(
            "batched", lambda: checkpoint_rows.load_checkpoints(db, moved, profile_id)
        )
        timed(
            "per_node",
            lambda: [checkpoint_rows.load_checkpoint(db, i, profile_id) for i in moved],
        )
        timed("active", lambda: conversation_rows.set_active_node(db, leaf_id))
        conversation_rows.defer_active_node(db, path[0].conversation_id, leaf_id)
        checkpoint_rows.defer_touch(db, moved, profile_id)
        timed("deferred", db.flush_deferred)
    start = path[first - 1].end_pos if first else 0
    return MoveBreakdownRow(
        move="sibling switch" if fork_id is not None else "cold resume",
        kept_tokens=start,
        moved_tokens=path[-1].end_pos - start,
        moved_nodes=len(moved),
        get_path_ms=median(figures["path"]),
        per_node_read_ms=median(figures["per_node"]),
        batched_read_ms=median(figures["batched"]),
        verify_ms=median(figures["verify"]),
        set_active_ms=median(figures["active"]),
        index_ms=median(figures["index"]),
        cached_path_ms=median(figures["cached"]),
        blob_read_ms=median(figures["blob_read"]),
        deferred_write_ms=median(figures["deferred"]),
    )
