"""What must not grow with the file (issue 23): listing, search and a cold
restore, in a small database and in a large one, printed as a table.

Each file holds one real conversation written by the tiny test model (its
checkpoints are real) and many generated ones (``scale_delete.add_nodes``:
raw inserts with short texts the search index holds, and checkpoints of
``--checkpoint-kib`` each): as many conversations in both files, each
``--scale`` times longer in the large one. Medians of a few runs each:

- ``list``: the conversation list (``conversation_rows.list_conversations``);
- ``search``: a word only the real conversation holds, so that both files
  have the same hits (``text_search.search``);
- cold restore: a new engine and service, then the real conversation's last
  node restored from its checkpoints (the figure the status bar shows).

    .venv/bin/python tools/scale_flat.py [--scale 20] [--checkpoint-kib 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage import conversation_rows, text_search
from storage.db import open_database
from tests.helpers.tiny_model import write_tiny_model
from tools.scale_delete import add_nodes, bushy_shape

SETTINGS = BackendSettings(n_ctx=4096, n_threads=1)
REAL_TURNS = 12
BASE_CONVERSATIONS = 10
NODES_PER_CONVERSATION = 100
RUNS = 5


def build(path: Path, model: Path, scale: int, checkpoint_kib: int) -> int:
    """Fill a database; return the last node of its real conversation."""
    db = open_database(path)
    with LlamaEngine(model, SETTINGS) as engine:
        service = ConversationService(db, engine)
        _conversation, node = service.new_conversation("Be brief.")
        for turn in range(REAL_TURNS):
            reply = service.send(
                node, f"Question {turn}?", SamplingParams(temperature=0, max_tokens=8)
            )
            node = reply.assistant_node
        service.close()
    for _ in range(BASE_CONVERSATIONS):
        _conv, root = conversation_rows.create_conversation(db, "generated", None)
        add_nodes(
            db,
            root.id,
            bushy_shape(NODES_PER_CONVERSATION * scale),
            checkpoint_kib * 1024,
        )
    db.close()
    return node


def median_ms(action: Callable[[], object], runs: int = RUNS) -> float:
    """The median wall time of ``action`` in milliseconds."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(path: Path, model: Path, last: int) -> dict[str, float]:
    """The three figures for the file at ``path``."""
    db = open_database(path)
    try:
        figures = {
            "list": median_ms(lambda: conversation_rows.list_conversations(db)),
            "search": median_ms(lambda: text_search.search(db, "question", 50)),
        }
        restores = []
        for _ in range(3):
            with LlamaEngine(model, SETTINGS) as engine:
                service = ConversationService(db, engine)
                stats = service.restore(last)
                assert stats.reprocessed_tokens == 0, stats.fallbacks
                restores.append(stats.restore_ms)
                service.close()
        figures["cold restore"] = statistics.median(restores)
        figures["nodes"] = float(_count(db, "node"))
        figures["MB"] = path.stat().st_size / 1e6
    finally:
        db.close()
    return figures


def _count(db, table: str) -> int:
    with db.read_raw() as raw:
        return int(raw.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def main() -> int:
    """Build both files, measure them and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=int, default=20)
    parser.add_argument("--checkpoint-kib", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="arbor-flat-") as folder:
        root = Path(folder)
        model = write_tiny_model(root / "tiny.gguf")
        rows = {}
        for name, scale in (("small", 1), ("large", args.scale)):
            path = root / f"{name}.sqlite3"
            last = build(path, model, scale, args.checkpoint_kib)
            rows[name] = measure(path, model, last)
    small, large = rows["small"], rows["large"]
    print(f"{'':14}{'small':>12}{'large':>12}{'large/small':>13}")
    for key, unit in (("nodes", ""), ("MB", ""), ("list", " ms"), ("search", " ms")):
        _row(key + unit, small[key], large[key])
    _row("cold restore ms", small["cold restore"], large["cold restore"])
    return 0


def _row(name: str, small: float, large: float) -> None:
    print(f"{name:14}{small:12,.1f}{large:12,.1f}{large / max(small, 1e-9):13.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
