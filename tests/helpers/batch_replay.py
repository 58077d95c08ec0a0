"""Whether a span that shared its batch is decoded again exactly, in a process
of its own (for the device: which Vulkan devices llama.cpp sees is fixed for a
process).

``python -m tests.helpers.batch_replay MODEL DATA_DIR LOST [FLAG ...]`` makes a
conversation with ``arbor``'s global flags (``--n-gpu-layers all``), deletes
the checkpoint of the first message (``LOST`` = message) or of its reply
(reply), restores the path below it in a fresh engine and prints JSON: the
fallbacks, whether every checkpoint made anew is byte for byte the old one,
and, as a control, whether decoding the lost span in plain batches instead
would have given other cells.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.cli.parser import backend_settings, build_parser
from app.conversation.batches import Batches
from storage import node_rows
from tests.helpers.real_service import opened_service

GREEDY = SamplingParams(temperature=0, max_tokens=6)
SYSTEM = "You answer in one short sentence, about trees and nothing else."


def replay_check(model: Path, path: Path, lost: str, settings: BackendSettings) -> Any:
    """Make, damage and restore; what the test asserts (see the module)."""
    with opened_service(path, model, settings) as service:
        _conv, root = service.new_conversation(SYSTEM)
        first = service.send(root, "Which tree is the tallest?", GREEDY)
        second = service.send(first.assistant_node, "And the oldest?", GREEDY)
        # Checkpoints made on the cells of the first message and of its reply,
        # besides those of the path: decoding them again must be exact.
        service.regenerate(first.assistant_node, GREEDY)
        service.send(first.assistant_node, "And the widest?", GREEDY)
        node = first.user_node if lost == "message" else first.assistant_node
        assert node is not None
        recorded = node_rows.get_node(service.db, node).chunks
        shared = Batches.of(recorded)
        below = [n.id for n in service.path(second.assistant_node) if n.id >= node]
    before = {n: _blob(path, n) for n in below}
    with sqlite3.connect(path) as con:
        con.execute("DELETE FROM checkpoint WHERE node_id = ?", (node,))

    with opened_service(path, model, settings) as service:
        stats = service.restore(second.assistant_node)
        service.flush_checkpoints()
        after = {n: _blob(path, n) for n in below}
        lost_node = node_rows.get_node(service.db, node)
        assert service.engine is not None
        plain = _plain_cells(service.engine, service.path(node))
        return {
            "shared": bool(shared.lead or shared.tail),
            "fallbacks": stats.fallbacks,
            "reprocessed": stats.reprocessed_tokens,
            "below_tokens": sum(
                len(node_rows.get_node(service.db, n).tokens) for n in below
            ),
            "same_checkpoints": after == before,
            "record_kept": lost_node.chunks == recorded,
            "plain_batches_differ": plain != before[node],
            "offloaded_layers": service.engine.info.offloaded_layers,
        }


def _plain_cells(engine: LlamaEngine, path: list[Any]) -> bytes:
    """The lost span's cells decoded in plain batches after its path (the
    control: what not replaying its batches would have stored)."""
    node = path[-1]
    engine.truncate(node.start_pos)
    engine.decode(node.tokens)
    return engine.capture(node.start_pos, node.end_pos)


def _blob(db_path: Path, node_id: int) -> bytes:
    with sqlite3.connect(db_path) as con:
        row = con.execute(
            "SELECT b.data FROM checkpoint c JOIN checkpoint_blob b "
            "ON b.checkpoint_id = c.id WHERE c.node_id = ?",
            (node_id,),
        ).fetchone()
    assert row is not None, f"node {node_id} has no checkpoint"
    return bytes(row[0])


def main(model: Path, data_dir: Path, lost: str, flags: list[str]) -> None:
    """Run the check with ``arbor``'s global ``flags``; print its JSON."""
    settings = backend_settings(build_parser().parse_args([*flags, "info"]))
    result = replay_check(model, data_dir / f"{lost}.sqlite3", lost, settings)
    print(json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:])
