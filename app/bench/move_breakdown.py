"""Where the database part of a move goes, step by step.

A move reads the path with a recursive query, reads the checkpoints below the
fork in one read-only query (``repository.load_checkpoints``), verifies their
CRC-32, and writes the active node. For comparison the same blobs are also
read the way the first version did: one transaction per node, each also
writing ``last_used_at`` (``repository.load_checkpoint``). Each step is timed
on its own, for a sibling switch (the nodes below the fork) and for a cold
resume (the whole path).
"""

from __future__ import annotations

from app.bench.errors import BenchError
from app.bench.measure import Stopwatch, median
from app.bench.results import MoveBreakdownRow
from storage import repository
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
    path = repository.get_path(db, leaf_id)
    ids = [node.id for node in path]
    first = ids.index(fork_id) + 1 if fork_id is not None else 0
    moved = ids[first:]
    figures: dict[str, list[float]] = {
        "path": [],
        "per_node": [],
        "batched": [],
        "verify": [],
        "active": [],
    }
    for _ in range(max(repeats, 5)):  # single steps are fast: a few more samples
        with Stopwatch() as watch:
            repository.get_path(db, leaf_id)
        figures["path"].append(watch.ms)
        with Stopwatch() as watch:
            stored = [repository.load_checkpoint(db, i, profile_id) for i in moved]
        figures["per_node"].append(watch.ms)
        with Stopwatch() as watch:
            intact = all(s is not None and s.is_intact() for s in stored)
        figures["verify"].append(watch.ms)
        if not intact:
            raise BenchError(f"a checkpoint on the path to node {leaf_id} is missing")
        with Stopwatch() as watch:
            batched = repository.load_checkpoints(db, moved, profile_id)
        figures["batched"].append(watch.ms)
        if sorted(len(b.data) for b in batched.values()) != sorted(
            len(s.data) for s in stored if s
        ):
            raise BenchError("the batched read returned other blobs")
        with Stopwatch() as watch:
            repository.set_active_node(db, leaf_id)
        figures["active"].append(watch.ms)
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
    )
