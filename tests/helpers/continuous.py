"""The continuous arm of an exactness test, run in a process of its own.

``python -m tests.helpers.continuous MODEL DATA_DIR [FLAG ...]`` loads MODEL with
``arbor``'s own global flags (``--n-gpu-layers all``, ``--worker HOST:PORT``,
...), holds one conversation in that one engine, never restoring a
checkpoint, and prints the first reply's text and the second reply's text and
logits digest. A process of its own: the devices llama.cpp sees (a Vulkan
device the environment names, the workers registered) are fixed for a
process, and a native abort there would not end the test run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.values import SamplingParams
from app.cli.parser import backend_settings, build_parser
from app.conversation.service import ConversationService
from storage.db import open_database

GREEDY = SamplingParams(temperature=0, max_tokens=12)


def main(model: Path, data_dir: Path, flags: list[str]) -> None:
    """Send two turns in one process; print what the test compares."""
    settings = backend_settings(build_parser().parse_args([*flags, "info"]))
    db = open_database(data_dir / "continuous.sqlite3")
    engine = LlamaEngine(model, settings)
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
                    "profile": engine.profile_details,
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
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
