"""What one generated token costs through the service: the Python of the
sampling loop on top of llama.cpp's decode.

Sends ``--replies`` greedy replies of ``--max-tokens`` each to a fresh
conversation on the tiny test model (or ``--model``), one thread, and prints
the median milliseconds per generated token of all but the first two (the
warm-up). Run it in two checkouts one after the other, alternating, to compare
two versions of the pipeline on one machine:

    PYTHONPATH=. .venv/bin/python tools/generation_speed.py
    (cd ../old && PYTHONPATH=. ../main/.venv/bin/python tools/generation_speed.py)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage.db import open_database
from tests.helpers.tiny_model import write_tiny_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--replies", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = args.model or write_tiny_model(Path(folder) / "tiny.gguf")
        db = open_database(Path(folder) / "arbor.sqlite3")
        settings = BackendSettings(n_ctx=4096, n_threads=1)
        with LlamaEngine(model, settings) as engine:
            service = ConversationService(db, engine)
            _conversation, root = service.new_conversation("Be brief.")
            per_token = []
            for i in range(args.replies):
                params = SamplingParams(temperature=0, max_tokens=args.max_tokens)
                stats = service.send(root, f"Question {i}?", params).stats
                per_token.append(stats.generate_ms / max(stats.generated_tokens, 1))
            service.close()
        db.close()
    print(
        f"ms per generated token, median of {len(per_token[2:])}: "
        f"{statistics.median(per_token[2:]):.4f}"
    )


if __name__ == "__main__":
    main()
