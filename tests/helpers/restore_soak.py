"""Soaks that restore again and again and tell how much the process grew.

Used by ``tests/system/test_restore_memory.py`` and ``tools/scale_space.py``, each
soak in a fresh process (``python -m tests.helpers.restore_soak reads DIR``): memory
that earlier work freed would otherwise take in what a soak leaks without
the resident set growing at all.

- ``reads``: alternating switches between two branches of
  ``BRANCH_NODES`` checkpointed nodes, read as a restore reads them
  (``CheckpointReader`` over ``Database.read_raw``, checksums verified):
  real blobs of 8 to 40 KB in a real SQLite file, no model;
- ``restores``: alternating real restores between two branches of four
  turns through ``ConversationService`` on a model (the tiny one in tests).

Prints one JSON object: the switches made, the resident set's growth over
them (after a warm-up) and the seconds they took.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from storage import checkpoint_rows, conversation_rows, node_rows, records, tree_reads
from storage.checkpoint_reader import CheckpointReader
from storage.db import Database, open_database
from storage.tree_reads import CheckpointRef

# Nodes below the fork on each branch: the checkpoints one switch reads.
BRANCH_NODES = 16


def rss_bytes() -> int:
    """The resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def grown_by(
    run: Callable[[int], object], times: int, warm_up: int
) -> tuple[int, float]:
    """How much the resident set grew over ``times`` calls of ``run(i)``,
    after ``warm_up`` calls (caches filled, buffers sized), and the seconds
    those calls took."""
    for i in range(warm_up):
        run(i)
    gc.collect()
    before = rss_bytes()
    started = time.perf_counter()
    for i in range(times):
        run(i)
    seconds = time.perf_counter() - started
    gc.collect()
    return rss_bytes() - before, seconds


def _branches(db: Database) -> tuple[list[list[tuple[CheckpointRef, bytes]]], str]:
    """For each of two branches below a fork, the checkpoints a switch to its
    leaf reads with the tokens their checksums bind; and the profile's
    fingerprint."""
    rng = random.Random(23)
    profile = checkpoint_rows.ensure_profile(db, "soak", {})
    _conversation, root = conversation_rows.create_conversation(db, "soak", None)
    fork = node_rows.add_node(db, root.id, "user", "fork", tokens=[1, 2, 3])
    branches = []
    fingerprint = ""
    for branch in range(2):
        parent, ids = fork.id, []
        for n in range(BRANCH_NODES):
            tokens = [rng.randrange(5, 260) for _ in range(rng.randrange(4, 40))]
            node = node_rows.add_node(
                db, parent, "user", f"{branch}.{n}", tokens=tokens
            )
            checkpoint_rows.save_checkpoint(
                db,
                node.id,
                profile,
                "delta",
                node.start_pos,
                node.end_pos,
                rng.randbytes(rng.randrange(8_000, 40_000)),
            )
            parent = node.id
            ids.append(node.id)
        index = tree_reads.tree_index(db, parent, profile)
        fingerprint = index.profile
        branches.append(
            [
                (index.checkpoints[i], records.pack_tokens(index.nodes[i].tokens))
                for i in ids
            ]
        )
    return branches, fingerprint


def soak_reads(folder: Path, switches: int, warm_up: int) -> tuple[int, float]:
    """Growth and seconds of ``switches`` alternating checkpoint reads."""
    db = open_database(folder / "reads.sqlite3")
    try:
        branches, fingerprint = _branches(db)
        reader = CheckpointReader()
        reader.reserve(max(ref.byte_size for b in branches for ref, _t in b))

        def switch(i: int) -> None:
            # What ContextSync._restore_deltas does for each switch.
            with reader.reading(db) as reads:
                for ref, tokens in branches[i % 2]:
                    data = reads.verified(ref, fingerprint, tokens)
                    if isinstance(data, str):
                        raise AssertionError(data)

        return grown_by(switch, switches, warm_up)
    finally:
        db.close()


def soak_restores(
    folder: Path, model: Path, switches: int, warm_up: int
) -> tuple[int, float]:
    """Growth and seconds of ``switches`` alternating real restores."""
    # Imported here: the reads soak needs no llama.cpp.
    from app.backend.engine import LlamaEngine
    from app.backend.settings import BackendSettings
    from app.backend.values import SamplingParams
    from app.conversation.service import ConversationService

    db = open_database(folder / "restores.sqlite3")
    engine = LlamaEngine(model, BackendSettings(n_ctx=1024, n_threads=1))
    try:
        service = ConversationService(db, engine)
        brief = SamplingParams(temperature=0, max_tokens=4)
        _conversation, root = service.new_conversation("Be brief.")
        fork = service.send(root, "Hi", brief).assistant_node
        leaves = []
        for branch in range(2):
            at = fork
            for turn in range(4):
                reply = service.send(at, f"branch {branch}, turn {turn}", brief)
                at = reply.assistant_node
            leaves.append(at)
        service.restore(leaves[0])
        if service.restore(leaves[1]).reprocessed_tokens:
            raise AssertionError("a switch reprocessed: checkpoints were not read")
        return grown_by(lambda i: service.restore(leaves[i % 2]), switches, warm_up)
    finally:
        engine.close()
        db.close()


def main(argv: list[str] | None = None) -> None:
    """Run one soak and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["reads", "restores"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--model", type=Path, help="a GGUF, for restores")
    parser.add_argument("--switches", type=int, default=10_000)
    parser.add_argument("--warm-up", type=int, default=1_000)
    args = parser.parse_args(argv)
    if args.kind == "reads":
        grown, seconds = soak_reads(args.folder, args.switches, args.warm_up)
    else:
        if args.model is None:
            parser.error("restores need --model")
        grown, seconds = soak_restores(
            args.folder, args.model, args.switches, args.warm_up
        )
    json.dump(
        {"switches": args.switches, "grown_bytes": grown, "seconds": seconds},
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
