"""Scenario 2: switching between sibling branches that share a long prefix.

The switch is measured on the engine that holds one sibling, through the
service: it keeps the common prefix and applies the other sibling's deltas.
The service holds the conversation's tree in memory, so after the first
switch each one reads only the suffix's blobs; what it defers (active node,
last use) is written between switches by the database's background writer, or
with the next write.
The alternatives run on a second, scratch engine: restoring the whole path
with nothing kept, and decoding the divergent suffix on top of the prefix (a
prefix-caching app, e.g. llama.cpp's server, switching branches).
"""

from __future__ import annotations

from collections.abc import Callable

from app.backend.engine import LlamaEngine
from app.bench.errors import BenchError
from app.bench.instrumented import BenchService
from app.bench.measure import Stopwatch, median, ratio
from app.bench.results import SiblingSwitchRow
from app.bench.workload import SiblingPair
from app.conversation.service import ConversationService
from storage import checkpoint_rows, node_rows
from storage.records import NodeRecord


def _suffix(path: list[NodeRecord], fork_id: int) -> list[NodeRecord]:
    """Return the nodes of ``path`` below ``fork_id``."""
    ids = [node.id for node in path]
    return path[ids.index(fork_id) + 1 :]


def run_sibling_switch(
    service: BenchService,
    scratch: LlamaEngine,
    pair: SiblingPair,
    prefix_reprocess_ms: float,
    repeats: int,
    progress: Callable[[str], None],
) -> SiblingSwitchRow:
    """Switch ``repeats`` times each way between the pair's leaves.

    ``prefix_reprocess_ms`` is the measured time to decode the path up to the
    fork (the cold-resume row of the fork node); adding the suffix's measured
    time gives the full reprocessing without decoding the prefix again.
    """
    db, engine = service.db, service.timed_engine
    assert service.profile_id is not None
    fork = node_rows.get_node(db, pair.fork_id)
    suffixes = {leaf: _suffix(service.path(leaf), pair.fork_id) for leaf in pair.leaves}
    stored = checkpoint_rows.checkpointed_nodes(
        db, [n.id for nodes in suffixes.values() for n in nodes], service.profile_id
    )
    suffix_bytes = {
        leaf: sum(stored.get(n.id, 0) for n in nodes)
        for leaf, nodes in suffixes.items()
    }
    first, second = pair.leaves
    service.restore(first)
    switch, sync, backend, read, excess = [], [], [], [], []
    read_ms, verify_ms = [], []
    full_restore, suffix_reprocess = [], []
    for _ in range(repeats):
        for leaf in (second, first):
            engine.reset_times()
            with Stopwatch() as wall:
                stats = service.restore(leaf)
            if stats.kept_tokens != fork.end_pos or stats.reprocessed_tokens:
                raise BenchError(
                    f"switch to node {leaf} kept {stats.kept_tokens} tokens "
                    f"(expected {fork.end_pos}) and reprocessed "
                    f"{stats.reprocessed_tokens}: " + "; ".join(stats.fallbacks)
                )
            switch.append(wall.ms)
            sync.append(stats.restore_ms)
            read_ms.append(stats.read_ms)
            verify_ms.append(stats.verify_ms)
            backend.append(engine.times.switch_ms)
            read.append(stats.checkpoint_bytes_read)
            excess.append(stats.checkpoint_bytes_read - suffix_bytes[leaf])
        # A throwaway service: the scratch engine is moved by hand below, which
        # would leave a long-lived service believing it holds the leaf.
        with Stopwatch() as wall:
            stats = ConversationService(db, scratch).restore(first)
        if stats.kept_tokens or stats.reprocessed_tokens:
            raise BenchError(f"full restore of node {first} did not restore everything")
        full_restore.append(wall.ms)
        scratch.truncate(fork.end_pos)
        with Stopwatch() as wall:
            scratch.decode([t for node in suffixes[first] for t in node.tokens])
        suffix_reprocess.append(wall.ms)
    suffix_tokens = int(
        median(node_rows.get_node(db, leaf).end_pos for leaf in pair.leaves)
    )
    suffix_tokens -= fork.end_pos
    row = SiblingSwitchRow(
        prefix_tokens=fork.end_pos,
        suffix_tokens=suffix_tokens,
        suffix_nodes=len(suffixes[first]),
        switch_ms=median(switch),
        sync_ms=median(sync),
        backend_ms=median(backend),
        bytes_read=int(median(read)),
        suffix_checkpoint_bytes=int(median(suffix_bytes.values())),
        excess_bytes=max(excess),
        full_restore_ms=median(full_restore),
        suffix_reprocess_ms=median(suffix_reprocess),
        full_reprocess_ms=prefix_reprocess_ms + median(suffix_reprocess),
        vs_full_restore=ratio(median(full_restore), median(switch)),
        vs_suffix_reprocess=ratio(median(suffix_reprocess), median(switch)),
        vs_full_reprocess=ratio(
            prefix_reprocess_ms + median(suffix_reprocess), median(switch)
        ),
        read_ms=median(read_ms),
        verify_ms=median(verify_ms),
    )
    progress(
        f"sibling switch, {row.prefix_tokens}-token prefix, {row.suffix_tokens}-token "
        f"suffix: {row.switch_ms:.2f} ms ({row.backend_ms:.2f} ms in llama.cpp)"
    )
    return row
