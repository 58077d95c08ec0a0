"""Where a sibling switch's wall time goes, and what a batched read would save.

A prototype for a proposed change to ``storage``/``context_sync``, measured
here only: the shipped switch reads each divergent node's checkpoint in its
own ORM transaction (which also writes ``last_used_at``), and around it reads
the path with a recursive query and writes the active node. The batched read
fetches every blob of the suffix with one read-only Core query.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import select

from app.bench.errors import BenchError
from app.bench.measure import Stopwatch, median
from app.bench.results import SwitchBreakdownRow
from storage import repository
from storage.db import Database
from storage.models import Checkpoint, CheckpointBlob


def _batched_read(db: Database, node_ids: list[int], profile_id: int) -> int:
    """Read and verify the checkpoints of ``node_ids`` in one query; return bytes."""
    query = (
        select(Checkpoint.checksum, CheckpointBlob.data)
        .join(CheckpointBlob, CheckpointBlob.checkpoint_id == Checkpoint.id)
        .where(Checkpoint.node_id.in_(node_ids), Checkpoint.profile_id == profile_id)
    )
    with db.engine.connect() as connection:
        rows = connection.execute(query).all()
    if any(hashlib.sha256(data).hexdigest() != checksum for checksum, data in rows):
        raise BenchError("a checkpoint failed its checksum")
    return sum(len(data) for _, data in rows)


def measure_switch_breakdown(
    db: Database,
    profile_id: int,
    fork_id: int,
    leaf_id: int,
    repeats: int,
) -> SwitchBreakdownRow:
    """Time each database step of switching to ``leaf_id`` (forked at ``fork_id``)."""
    path = repository.get_path(db, leaf_id)
    ids = [node.id for node in path]
    suffix_ids = ids[ids.index(fork_id) + 1 :]
    figures: dict[str, list[float]] = {
        "path": [],
        "per_node": [],
        "batched": [],
        "active": [],
    }
    for _ in range(max(repeats, 5)):  # single steps are fast: a few more samples
        with Stopwatch() as watch:
            repository.get_path(db, leaf_id)
        figures["path"].append(watch.ms)
        with Stopwatch() as watch:
            for node_id in suffix_ids:
                stored = repository.load_checkpoint(db, node_id, profile_id)
                if stored is None or not stored.is_intact():
                    raise BenchError(f"node {node_id} has no intact checkpoint")
        figures["per_node"].append(watch.ms)
        with Stopwatch() as watch:
            _batched_read(db, suffix_ids, profile_id)
        figures["batched"].append(watch.ms)
        with Stopwatch() as watch:
            repository.set_active_node(db, leaf_id)
        figures["active"].append(watch.ms)
    return SwitchBreakdownRow(
        prefix_tokens=path[len(ids) - len(suffix_ids) - 1].end_pos,
        suffix_tokens=path[-1].end_pos - path[len(ids) - len(suffix_ids) - 1].end_pos,
        suffix_nodes=len(suffix_ids),
        get_path_ms=median(figures["path"]),
        per_node_read_ms=median(figures["per_node"]),
        batched_read_ms=median(figures["batched"]),
        set_active_ms=median(figures["active"]),
    )
