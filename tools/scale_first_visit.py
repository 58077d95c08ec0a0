"""What the first visit of an imported path costs as the path grows (issue 23).

A linear conversation of N messages (a root, then user and assistant turns)
is imported, as ``arbor import`` would, so that no span is rendered and no
node checkpointed; then one ``restore`` of its last node renders every
span, decodes them all and saves every checkpoint. On the tiny test model
(written with a 65,536-token context so that 1,001 messages fit), one
thread, CPU seconds (``time.process_time``) of:

- ``total``: the whole restore;
- ``decode``: the model's ``decode`` calls. Its cost per token grows with
  the position (attention reads every cell before it), so it grows faster
  than the path: that part is the model's;
- ``capture``: copying each span's KV cells out for its checkpoint
  (llama.cpp, through the engine);
- ``spans``: ``spans.ensure_spans`` (the template's texts, the folding,
  tokenizing, the one write of the spans);
- ``other``: the rest (reading the path, saving checkpoints, bookkeeping).

The parts are the CPU of the thread that visits (``time.thread_time``), the
total that of the process (``time.process_time``), so ``other`` holds what
a checkpoint writer's thread spends.

``not decode`` is total minus decode, per node in the last column; the
target is that its ratio between the longest and the shortest path stays
within 1.5 (the work per node is flat). The exit status is 1 when it does
not.

By default checkpoints are written at once (``DirectWriter``: a reprocess
saves them in batches, one transaction each); ``--queued`` writes them as
the window and the CLI do, through a ``CheckpointWriter`` thread (its CPU
counts too: the total runs until the service is closed and the queue is
written).

    .venv/bin/python tools/scale_first_visit.py [--sizes 101,1001] [--queued]
        [--dir DIR]
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.backend.engine import LlamaEngine
from app.backend.errors import ContextFullError
from app.backend.settings import BackendSettings
from app.conversation import spans
from app.conversation.checkpoint_writer import CheckpointWriter
from app.conversation.service import ConversationService
from storage import exchange
from storage.db import open_database
from tests.helpers.tiny_model import write_tiny_model

N_CTX = 65536
TARGET_RATIO = 1.5
SIZES = (101, 1001)
# A path that cannot fit: refused before any span is rendered (spans.check_fits).
UNFIT_NODES = 3001
UNFIT_CONTEXT = 4096


@dataclass
class Figures:
    """CPU seconds of one first visit, by part."""

    nodes: int
    tokens: int
    total: float = 0.0
    decode: float = 0.0
    capture: float = 0.0
    spans: float = 0.0

    @property
    def not_decode(self) -> float:
        """Everything but the model's decoding."""
        return self.total - self.decode

    @property
    def other(self) -> float:
        """What is neither decoding, capturing nor placing spans."""
        return self.not_decode - self.capture - self.spans


def imported_path(db: Any, nodes: int) -> int:
    """Import a linear conversation of ``nodes`` nodes; the last node's id."""
    rows: list[dict[str, Any]] = [
        {"id": 0, "parent": None, "role": "root", "text": "Be brief."}
    ]
    for i in range(1, nodes):
        role = "user" if i % 2 else "assistant"
        rows.append(
            {"id": i, "parent": i - 1, "role": role, "text": f"message {i} about trees"}
        )
    data = {
        "format": exchange.FORMAT,
        "version": exchange.VERSION,
        "title": f"{nodes} nodes",
        "nodes": rows,
        "active": nodes - 1,
    }
    active = exchange.import_json(db, data).active_node_id
    assert active is not None
    return active


def refused(folder: Path, model: Path, nodes: int, n_ctx: int) -> float:
    """Wall seconds until the first visit of a ``nodes``-node imported path
    that cannot fit an ``n_ctx`` context is refused."""
    db = open_database(folder / f"unfit-{nodes}.sqlite3")
    try:
        last = imported_path(db, nodes)
        with LlamaEngine(model, BackendSettings(n_ctx=n_ctx, n_threads=1)) as engine:
            service = ConversationService(db, engine)
            started = time.perf_counter()
            try:
                service.restore(last)
            except ContextFullError:
                return time.perf_counter() - started
            finally:
                service.close()
        raise AssertionError("the path fitted")
    finally:
        db.close()


def _timed(function: Callable[..., Any], add: Callable[[float], None]) -> Any:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        # This thread's CPU only: a checkpoint writer's thread runs meanwhile.
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            add(time.thread_time() - started)

    return wrapper


def first_visit(folder: Path, model: Path, nodes: int, queued: bool = False) -> Figures:
    """Import an ``nodes``-node path into a fresh file and visit its end once."""
    db = open_database(folder / f"visit-{nodes}-{queued}.sqlite3")
    settings = BackendSettings(n_ctx=N_CTX, n_threads=1)
    try:
        with LlamaEngine(model, settings) as engine:
            service = ConversationService(
                db, engine, CheckpointWriter(db) if queued else None
            )
            last = imported_path(db, nodes)
            figures = Figures(nodes, 0)

            def add_to(name: str) -> Callable[[float], None]:
                def add(seconds: float) -> None:
                    setattr(figures, name, getattr(figures, name) + seconds)

                return add

            engine.decode = _timed(engine.decode, add_to("decode"))  # type: ignore[method-assign]
            engine.capture = _timed(engine.capture, add_to("capture"))  # type: ignore[method-assign]
            ensure = spans.ensure_spans
            spans.ensure_spans = _timed(ensure, add_to("spans"))
            try:
                started = time.process_time()
                stats = service.restore(last)
                service.close()  # every checkpoint written
                figures.total = time.process_time() - started
            finally:
                spans.ensure_spans = ensure
            figures.tokens = stats.reprocessed_tokens
        return figures
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    """Run the sizes asked for and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default=",".join(map(str, SIZES)),
        help="path lengths in nodes, the root included (default 101,1001)",
    )
    parser.add_argument(
        "--queued",
        action="store_true",
        help="write checkpoints through a CheckpointWriter, as the app does",
    )
    parser.add_argument("--dir", type=Path, help="where the files go (default: temp)")
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        model = write_tiny_model(folder / "tiny-64k.gguf", context_length=N_CTX)
        rows = [first_visit(folder, model, size, args.queued) for size in sizes]
        unfit = refused(folder, model, UNFIT_NODES, UNFIT_CONTEXT)
    header = (
        f"{'nodes':>6} {'tokens':>7} {'total':>7} {'decode':>7} {'capture':>7} "
        f"{'spans':>6} {'other':>6} {'not decode':>10} {'per node':>9}"
    )
    writer = "queued" if args.queued else "written at once"
    print(
        "First visit of an imported path, CPU seconds (tiny model, 1 thread, "
        f"checkpoints {writer})"
    )
    print(header)
    for r in rows:
        print(
            f"{r.nodes:>6} {r.tokens:>7} {r.total:>7.2f} {r.decode:>7.2f} "
            f"{r.capture:>7.2f} {r.spans:>6.2f} {r.other:>6.2f} "
            f"{r.not_decode:>10.2f} {r.not_decode / r.nodes * 1000:>7.2f}ms"
        )
    print(
        f"a {UNFIT_NODES:,}-node path that cannot fit a {UNFIT_CONTEXT:,}-token "
        f"context: refused in {unfit:.2f} s (target < 2 s)"
    )
    if len(rows) < 2:
        return 0
    small, large = rows[0], rows[-1]
    ratio = (large.not_decode / large.nodes) / (small.not_decode / small.nodes)
    decode_ratio = (large.decode / large.tokens) / (small.decode / small.tokens)
    print(
        f"per-node CPU other than decoding, {large.nodes} vs {small.nodes} nodes: "
        f"{ratio:.2f}x (target <= {TARGET_RATIO}); the model's decode per token: "
        f"{decode_ratio:.2f}x"
    )
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
