"""How long deleting takes as what is deleted grows (issue 23), printed as a table.

Each case gets a fresh database file, filled with raw inserts in one
transaction (``add_nodes``; a model would take hours to write 20,000
messages): every node has a short text, which the search index holds, a
span of token ids and a checkpoint with its blob (2 KiB unless told). Then
one repository call deletes, timed in two parts that the caller waits for
together: the deletion's transaction, and the space given back after it
(``release_space``):

- a conversation whose only path has 1,001, 3,001 and 10,001 nodes
  (``delete_conversation``; SQLite's cascades stop at 1,000 levels, so a
  deletion that recursed once per level failed from 1,000 on);
- a branch of 10,000 nodes below the root (``delete_subtree``);
- a bushy 10,000-node conversation from a file with 20,000 nodes: the cost
  must follow what is deleted, not the file.

CPU and wall seconds per case; the target is 1 s each in all, on the 2-core
VM. The exit status is 1 when a case misses it.

    .venv/bin/python tools/scale_delete.py [--dir DIR] [--checkpoint-bytes N]
"""

from __future__ import annotations

import argparse
import inspect
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import insert, select, text
from sqlalchemy.orm import Session

from storage import checkpoint_rows, conversation_rows, node_rows, records, space
from storage.db import Database, open_database
from storage.tables import (
    Checkpoint,
    CheckpointBlob,
    Node,
    checkpoint_checksum,
    utcnow,
)

# What each generated node holds: about a short chat message.
TEXT = "a message of the scale benchmark with a few ordinary words in it, number {}"
SPAN_TOKENS = 48
PROFILE = "scale-delete"
TARGET_S = 1.0


def path_shape(length: int) -> list[int]:
    """``add_nodes`` parents of a chain: each node the child of the one before."""
    return list(range(-1, length - 1))


def bushy_shape(count: int, seed: int = 23) -> list[int]:
    """``add_nodes`` parents of a tree with many branches, as regenerating and
    editing make: each node's parent is one of the few nodes just before it."""
    rng = random.Random(seed)
    return [-1] + [rng.randint(max(-1, i - 8), i - 1) for i in range(1, count)]


def add_nodes(
    db: Database,
    parent_id: int,
    parents: Sequence[int],
    checkpoint_bytes: int = 0,
) -> list[int]:
    """Insert ``len(parents)`` nodes below ``parent_id`` in one transaction.

    ``parents[i]`` is the index of node i's parent among the new nodes
    (smaller than i), or -1 for ``parent_id``. With ``checkpoint_bytes``
    each node also gets a checkpoint of that many bytes (its checksum is a
    real one). Returns the new ids, in the order of ``parents``.
    """
    profile_id = (
        checkpoint_rows.ensure_profile(db, PROFILE, {"tool": PROFILE})
        if checkpoint_bytes
        else None
    )
    with db.write() as s:
        conversation_id = s.execute(
            select(Node.conversation_id).where(Node.id == parent_id)
        ).scalar_one()
        first = _next_id(s, "node")
        ids = [first + i for i in range(len(parents))]
        tokens = list(range(SPAN_TOKENS))
        packed = records.pack_tokens(tokens)
        now = utcnow()
        s.execute(
            insert(Node),
            [
                {
                    "id": node_id,
                    "conversation_id": conversation_id,
                    "parent_id": parent_id if parent < 0 else ids[parent],
                    "role": "user" if i % 2 == 0 else "assistant",
                    "text": TEXT.format(node_id),
                    "tokens": packed,
                    "n_tokens": len(tokens),
                    "start_pos": 0,
                    "chunks": [len(tokens)],
                    "created_at": now,
                }
                for i, (node_id, parent) in enumerate(zip(ids, parents, strict=True))
            ],
        )
        if profile_id is not None:
            _add_checkpoints(s, ids, profile_id, packed, checkpoint_bytes)
        return ids


def _add_checkpoints(
    s: Session, node_ids: list[int], profile_id: int, packed: bytes, size: int
) -> None:
    first = _next_id(s, "checkpoint")
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    rows = []
    for i, node_id in enumerate(node_ids):
        checksum = checkpoint_checksum(
            node_id, PROFILE, "delta", 0, SPAN_TOKENS, packed, data
        )
        rows.append(
            {
                "id": first + i,
                "node_id": node_id,
                "profile_id": profile_id,
                "kind": "delta",
                "start_pos": 0,
                "end_pos": SPAN_TOKENS,
                "byte_size": len(data),
                "checksum": checksum,
            }
        )
    s.execute(insert(Checkpoint), rows)
    s.execute(
        insert(CheckpointBlob),
        [{"checkpoint_id": row["id"], "data": data} for row in rows],
    )


def _next_id(s: Session, table: str) -> int:
    # Past every id the table ever gave (AUTOINCREMENT never gives one twice).
    given = s.execute(
        text("SELECT seq FROM sqlite_sequence WHERE name = :name"), {"name": table}
    ).scalar()
    top = s.execute(text(f"SELECT max(id) FROM {table}")).scalar()
    return max(given or 0, top or 0) + 1


def new_conversation(
    db: Database, parents: Sequence[int], checkpoint_bytes: int = 0
) -> tuple[int, list[int]]:
    """A conversation of its root and nodes of the shape ``parents`` below it:
    its id, and the ids of the root and the nodes."""
    conversation, root = conversation_rows.create_conversation(db, "scale", None)
    ids = add_nodes(db, root.id, parents, checkpoint_bytes)
    return conversation.id, [root.id, *ids]


@dataclass(frozen=True)
class Timing:
    """One deletion: what it removed, out of how much, and what it cost.

    ``cpu_s`` and ``wall_s`` are the deletion's transaction, ``space_cpu_s``
    and ``space_wall_s`` the space given back after it (``release_space``,
    which the repository's deleting functions run before they return).
    """

    case: str
    deleted: int
    in_file: int
    cpu_s: float
    wall_s: float
    space_cpu_s: float
    space_wall_s: float

    @property
    def total_cpu_s(self) -> float:
        """What the caller's thread spends in all."""
        return self.cpu_s + self.space_cpu_s

    @property
    def total_wall_s(self) -> float:
        """How long the caller waits in all."""
        return self.wall_s + self.space_wall_s


def _timed(call: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    call()
    return time.process_time() - cpu, time.perf_counter() - wall


# A case: the database to fill, and what it returns: the deleting function
# and its argument.
Build = Callable[[Database], tuple[Callable[..., object], int]]


def measure(folder: Path, checkpoint_bytes: int = 2048) -> list[Timing]:
    """Build and delete every case in fresh files under ``folder``."""
    timings: list[Timing] = []

    def case(name: str, build: Build) -> None:
        path = folder / f"{len(timings)}.sqlite3"
        db = open_database(path)
        try:
            function, argument = build(db)
            before = _count_nodes(db)
            # The deletion and the space given back, timed apart: the
            # function without its @_releases_space, then that step.
            deleting = inspect.unwrap(function)
            cpu, wall = _timed(lambda: deleting(db, argument))
            space_cpu, space_wall = _timed(lambda: space.release_space(db))
            after = _count_nodes(db)
        finally:
            db.close()
        for leftover in folder.glob(f"{path.name}*"):
            leftover.unlink()
        timings.append(
            Timing(name, before - after, before, cpu, wall, space_cpu, space_wall)
        )

    for length in (1_001, 3_001, 10_001):

        def path(
            db: Database, length: int = length
        ) -> tuple[Callable[..., object], int]:
            cid, _ids = new_conversation(db, path_shape(length - 1), checkpoint_bytes)
            return conversation_rows.delete_conversation, cid

        case(f"conversation, a {length:,}-node path", path)

    def branch(db: Database) -> tuple[Callable[..., object], int]:
        _cid, ids = new_conversation(db, path_shape(10_000), checkpoint_bytes)
        return node_rows.delete_subtree, ids[1]

    case("branch of 10,000 nodes below the root", branch)

    def half(db: Database) -> tuple[Callable[..., object], int]:
        cid, _ids = new_conversation(db, bushy_shape(9_999), checkpoint_bytes)
        new_conversation(db, bushy_shape(9_999, seed=32), checkpoint_bytes)
        return conversation_rows.delete_conversation, cid

    case("bushy 10,000-node conversation", half)
    return timings


def _count_nodes(db: Database) -> int:
    with db.read() as s:
        return int(s.execute(text("SELECT count(*) FROM node")).scalar_one())


def print_table(timings: Sequence[Timing]) -> None:
    """The timings as a plain text table, each total marked against the target."""
    columns = ("deleted", "in file", "delete CPU/wall", "space CPU/wall", "total")
    widths = (7, 7, 15, 14, 13)
    header = f"{'case':<38} " + " ".join(
        f"{name:>{width}}" for name, width in zip(columns, widths, strict=True)
    )
    print(header + "   (seconds)")
    print("-" * len(header))
    for t in timings:
        cells = (
            f"{t.deleted:,}",
            f"{t.in_file:,}",
            f"{t.cpu_s:.3f}/{t.wall_s:.3f}",
            f"{t.space_cpu_s:.3f}/{t.space_wall_s:.3f}",
            f"{t.total_cpu_s:.3f}/{t.total_wall_s:.3f}",
        )
        late = max(t.total_cpu_s, t.total_wall_s) > TARGET_S
        print(
            f"{t.case:<38} "
            + " ".join(f"{c:>{w}}" for c, w in zip(cells, widths, strict=True))
            + ("  > 1 s" if late else "")
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print; the exit status is 1 if a case missed the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dir", type=Path, help="folder for the scratch databases (default: temp)"
    )
    parser.add_argument(
        "--checkpoint-bytes",
        type=int,
        default=2048,
        help="bytes of each node's checkpoint (0: none)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        timings = measure(Path(folder), args.checkpoint_bytes)
    print_table(timings)
    late = [t for t in timings if max(t.total_cpu_s, t.total_wall_s) > TARGET_S]
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main())
