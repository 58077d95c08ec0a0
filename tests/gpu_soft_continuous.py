"""The continuous arm of tests/test_gpu_soft.py, run in its own process.

``python -m tests.gpu_soft_continuous MODEL DATA_DIR`` holds one conversation
in one engine with every layer offloaded, never restoring a checkpoint, and
prints the first reply's text and the second reply's text and logits digest.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import ALL_GPU_LAYERS, BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from storage.db import open_database

GREEDY = SamplingParams(temperature=0, max_tokens=12)


def main(model: Path, data_dir: Path) -> None:
    """Send two turns in one process; print what the test compares."""
    db = open_database(data_dir / "continuous.sqlite3")
    engine = LlamaEngine(model, BackendSettings(n_gpu_layers=ALL_GPU_LAYERS))
    try:
        service = ConversationService(db, engine)
        _conv, root = service.new_conversation("Answer briefly.")
        first = service.send(root, "Tell me about trees.", GREEDY)
        second = service.send(first.assistant_node, "And about branches?", GREEDY)
        assert second.stats.restored_tokens == 0, "the continuous arm restored"
        print(
            json.dumps(
                {
                    "offloaded_layers": engine.info.offloaded_layers,
                    "first_text": first.text,
                    "second_text": second.text,
                    "second_digest": second.stats.logits_digest,
                }
            )
        )
    finally:
        engine.close()
        db.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
