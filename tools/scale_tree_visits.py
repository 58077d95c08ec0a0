"""Visiting the nodes of a large tree one by one (issue 23): CPU per visit.

Each visit here is a first one: the node has no checkpoint, so it is
decoded, its batch sizes recorded and its checkpoint saved, writes that
moved ``Database.generation()`` and made the tree cache read the whole
conversation again (85 ms of CPU at 10,000 nodes) before the next visit.
Now those writes name their nodes (``Database.changing``) and the cache
reads only those again: the cost of a visit should not follow the tree.

Each tree grows from one seed path the tiny test model writes (a system
prompt and ``SEED_TURNS`` exchanges, with their checkpoints), then raw
copies of its nodes, which keep its spans and so are valid for the model:

- the visited part: below the seed's first reply, ``BRANCHING`` copies of
  the next seed node under each node, down to the seed's depth; ``--visits``
  of them are restored one after the other in depth-first order, so that
  each visit decodes that node alone (its parent is restored or held);
- filler: copies of the seed's first exchange under the root, up to each of
  ``--sizes`` nodes in all, each with a copy of its seed's checkpoint row,
  as a tree visited before has (the whole-tree read indexes them all; their
  blobs are 64 bytes each, never read: no visit goes there).

CPU (``time.process_time``, all threads) per visit, median and mean, and how
many times the whole tree was read (``tree_reads.tree_index``), per size;
with ``--old-cache FILE`` (e.g. ``git show HEAD~1:app/conversation/tree_cache.py``
saved to a file) the same visits again with that ``TreeCache``. Checkpoints
are written at once, or with ``--queued`` on the writer's thread, as the
window does:

    .venv/bin/python tools/scale_tree_visits.py [--sizes 1000 10000]
        [--visits 200] [--queued] [--old-cache /tmp/old_tree_cache.py]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import text

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation import service as service_module
from app.conversation.checkpoint_writer import CheckpointWriter
from app.conversation.service import ConversationService
from app.conversation.tree_cache import TreeCache
from storage import tree_reads
from storage.db import Database, open_database
from tests.helpers.tiny_model import write_tiny_model

SETTINGS = BackendSettings(n_ctx=2048, n_threads=1)
SEED_TURNS = 4
BRANCHING = 3
# The seed node the visited part hangs below (its first reply), and the
# deepest seed node copied into it (the seed has 1 + 2 * SEED_TURNS nodes).
REGION_TOP = 2
REGION_DEEPEST = 2 * SEED_TURNS - 1

_COPY = (
    "INSERT INTO node (id, conversation_id, parent_id, role, text, thinking, "
    "span_text, tokens, n_tokens, start_pos, chunks, vocab_id, status, "
    "generation, created_at) SELECT :id, conversation_id, :parent, role, text, "
    "thinking, span_text, tokens, n_tokens, start_pos, chunks, vocab_id, status, "
    "generation, created_at FROM node WHERE id = :seed"
)
_COPY_CHECKPOINT = (
    "INSERT INTO checkpoint (node_id, profile_id, kind, start_pos, end_pos, "
    "byte_size, checksum, created_at, last_used_at) SELECT :node, profile_id, "
    "kind, start_pos, end_pos, byte_size, checksum, created_at, last_used_at "
    "FROM checkpoint WHERE node_id = :seed"
)
_FAKE_BLOBS = (
    "INSERT INTO checkpoint_blob (checkpoint_id, data) SELECT c.id, zeroblob(64) "
    "FROM checkpoint c LEFT JOIN checkpoint_blob b ON b.checkpoint_id = c.id "
    "WHERE b.checkpoint_id IS NULL"
)


def _seed(db: Database, engine: LlamaEngine) -> list[int]:
    """The seed path: root, then SEED_TURNS exchanges; its node ids."""
    service = ConversationService(db, engine)
    _conversation, node = service.new_conversation("Answer in a few words.")
    path = [node]
    for turn in range(SEED_TURNS):
        reply = service.send(
            node,
            f"Question number {turn} about trees?",
            SamplingParams(temperature=0, max_tokens=12),
        )
        assert reply.user_node is not None
        path += [reply.user_node, reply.assistant_node]
        node = reply.assistant_node
    service.close()
    return path


def _next_id(db: Database) -> int:
    with db.read_raw() as raw:
        given = raw.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = 'node'"
        ).fetchone()
        top = raw.execute("SELECT max(id) FROM node").fetchone()
    return max(given[0] if given else 0, top[0] or 0) + 1


def _copies(
    db: Database, rows: list[tuple[int, int]], checkpoints: bool = False
) -> list[int]:
    """Insert a copy of each ``(seed, parent)``'s seed under parent (with its
    checkpoint row if asked); their ids."""
    first = _next_id(db)
    ids = [first + i for i in range(len(rows))]
    with db.write() as s:
        s.execute(
            text(_COPY),
            [
                {"id": node_id, "parent": parent, "seed": seed}
                for node_id, (seed, parent) in zip(ids, rows, strict=True)
            ],
        )
        if checkpoints and ids:
            s.execute(
                text(_COPY_CHECKPOINT),
                [
                    {"node": node_id, "seed": seed}
                    for node_id, (seed, _parent) in zip(ids, rows, strict=True)
                ],
            )
            s.execute(text(_FAKE_BLOBS))
    return ids


def build(path: Path, model: Path, size: int, visits: int) -> list[int]:
    """Fill a database with a tree of ``size`` nodes; the nodes to visit."""
    db = open_database(path)
    with LlamaEngine(model, SETTINGS) as engine:
        seed = _seed(db, engine)
    # The visited part, level by level, then its nodes in depth-first order.
    children: dict[int, list[int]] = {}
    level = [seed[REGION_TOP]]
    for depth in range(REGION_TOP + 1, REGION_DEEPEST + 1):
        rows = [(seed[depth], parent) for parent in level for _ in range(BRANCHING)]
        level = _copies(db, rows)
        for (_seed_id, parent), node in zip(rows, level, strict=True):
            children.setdefault(parent, []).append(node)
    order: list[int] = []
    stack = list(reversed(children[seed[REGION_TOP]]))
    while stack and len(order) < visits:
        node = stack.pop()
        order.append(node)
        stack.extend(reversed(children.get(node, [])))
    # Filler: copies of the first exchange under the root.
    with db.read_raw() as raw:
        nodes = int(raw.execute("SELECT count(*) FROM node").fetchone()[0])
    pairs = max(0, size - nodes) // 2
    users = _copies(db, [(seed[1], seed[0])] * pairs, checkpoints=True)
    _copies(db, [(seed[2], user) for user in users], checkpoints=True)
    db.close()
    return order


@dataclass(frozen=True)
class Visits:
    """CPU per visit and whole-tree reads of one run."""

    nodes: int
    cache: str
    cpu_ms: list[float]
    tree_reads: int
    reprocessed: int

    @property
    def median_ms(self) -> float:
        """The median CPU of a visit."""
        return statistics.median(self.cpu_ms)

    @property
    def mean_ms(self) -> float:
        """The mean CPU of a visit."""
        return statistics.fmean(self.cpu_ms)


def visit(
    path: Path, model: Path, order: list[int], cache: str, queued: bool
) -> Visits:
    """Restore each node of ``order`` in turn, in a copy of the database at
    ``path`` (the visits save checkpoints: each run starts from none)."""
    copy = path.with_name(f"{path.stem}-{cache}.sqlite3")
    copy.write_bytes(path.read_bytes())
    db = open_database(copy)
    reads = 0
    original = tree_reads.tree_index

    def counting(
        db: Database, node_id: int, profile_id: int | None
    ) -> tree_reads.TreeIndex:
        nonlocal reads
        reads += 1
        return original(db, node_id, profile_id)

    tree_reads.tree_index = counting
    try:
        with LlamaEngine(model, SETTINGS) as engine:
            sink = CheckpointWriter(db) if queued else None
            service = ConversationService(db, engine, sink)
            service.restore(order[0])  # the first read of the tree: not counted
            reads, cpu, reprocessed = 0, [], 0
            for node in order[1:]:
                started = time.process_time()
                stats = service.restore(node)
                cpu.append((time.process_time() - started) * 1000)
                reprocessed += stats.reprocessed_tokens
            with db.read_raw() as raw:
                nodes = int(raw.execute("SELECT count(*) FROM node").fetchone()[0])
            service.close()
    finally:
        tree_reads.tree_index = original
        db.close()
    return Visits(nodes, cache, cpu, reads, reprocessed)


def _load_cache(file: Path) -> type[TreeCache]:
    spec = importlib.util.spec_from_file_location("old_tree_cache", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cache: type[TreeCache] = module.TreeCache
    return cache


def main() -> int:
    """Build each tree, visit it with each cache and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--visits", type=int, default=200)
    parser.add_argument("--queued", action="store_true", help="a writer thread")
    parser.add_argument("--old-cache", type=Path, help="a tree_cache.py to compare")
    args = parser.parse_args()
    caches = {"follows": TreeCache}
    if args.old_cache is not None:
        caches["old"] = _load_cache(args.old_cache)
    results: list[Visits] = []
    with tempfile.TemporaryDirectory(prefix="arbor-visits-") as folder:
        root = Path(folder)
        model = write_tiny_model(root / "tiny.gguf")
        for size in args.sizes:
            path = root / f"tree-{size}.sqlite3"
            order = build(path, model, size, args.visits)
            for name, cache in caches.items():
                # The class the service makes its cache of (it names it).
                service_module.TreeCache = cache  # type: ignore[attr-defined]
                try:
                    results.append(visit(path, model, order, name, args.queued))
                finally:
                    service_module.TreeCache = TreeCache  # type: ignore[attr-defined]
    print(
        f"{'nodes':>7} {'cache':8} {'visits':>6} {'median ms':>10} "
        f"{'mean ms':>8} {'tree reads':>10} {'reprocessed':>11}"
    )
    for r in results:
        print(
            f"{r.nodes:7,} {r.cache:8} {len(r.cpu_ms):6} {r.median_ms:10.2f} "
            f"{r.mean_ms:8.2f} {r.tree_reads:10} {r.reprocessed:11,}"
        )
    for name in caches:
        runs = [r for r in results if r.cache == name]
        if len(runs) > 1:
            ratio = runs[-1].median_ms / runs[0].median_ms
            print(
                f"{name}: median CPU per visit at {runs[-1].nodes:,} nodes / "
                f"{runs[0].nodes:,} nodes = {ratio:.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
