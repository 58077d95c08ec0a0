"""The memory and GUI-thread time of the tree's graph view for large trees
(issue 23), in a window with no model, printed as a table.

Each tree is a bushy conversation (``scale_delete.bushy_shape``: forks
everywhere, as regenerating and editing make) inserted without a model. The
window opens it in the list view, then switches to the graph; RSS is read
before the conversation is shown and after the graph is drawn.

    QT_QPA_PLATFORM=offscreen .venv/bin/python tools/graph_memory.py [--nodes N ...]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tools.scale_delete import add_nodes, bushy_shape
from tools.window_timing import _no_model, _settled_cpu_ms


def rss_mib() -> float:
    """This process's resident memory now, in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * resource.getpagesize() / (1 << 20)


def measure(nodes: int) -> dict[str, float]:
    """Show a ``nodes``-node tree in the graph view of a fresh window."""
    from PySide6.QtWidgets import QApplication

    import app.qt.gui
    from app.platform.paths import database_path
    from app.qt.gui import build_window, keep_painting_on_the_gui_thread
    from storage import conversation_rows
    from storage.db import open_database

    keep_painting_on_the_gui_thread()
    qt_app = QApplication.instance() or QApplication([])
    with tempfile.TemporaryDirectory() as folder:
        db = open_database(database_path(Path(folder)))
        conversation, root = conversation_rows.create_conversation(db, "big", None)
        ids = add_nodes(db, root.id, bushy_shape(nodes - 1))
        conversation_rows.set_active_node(db, ids[-1])
        conversation_rows.create_conversation(
            db, "small", None
        )  # the window opens here
        app.qt.gui.remembered_or_starter_model = _no_model
        window = build_window(db, None, gpu_supported=False)
        window.resize(1280, 800)
        window.show()
        _settled_cpu_ms(qt_app, lambda: None)
        before = rss_mib()
        shown = _settled_cpu_ms(
            qt_app, lambda: window.show_conversation(conversation.id)
        )
        started = time.perf_counter()
        graph = _settled_cpu_ms(qt_app, lambda: window.tree_panel.set_mode("graph"))
        wall = (time.perf_counter() - started) * 1000
        after = rss_mib()
        window.close()
        db.close()
        qt_app.processEvents()
    return {
        "show (list) ms": shown,
        "graph ms": graph,
        "graph wall ms": wall,
        "RSS growth MiB": after - before,
    }


def main() -> int:
    """Measure each size and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    rows = {n: measure(n) for n in args.nodes}
    keys = list(next(iter(rows.values())))
    print(f"{'nodes':>8}" + "".join(f"{k:>17}" for k in keys))
    for n, row in rows.items():
        print(f"{n:8,}" + "".join(f"{row[k]:17,.1f}" for k in keys))
    print("(CPU ms of the GUI thread, with 0.6 s of the event loop after each step)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
