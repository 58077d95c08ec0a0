"""What reprocessing costs: exact replay of the recorded batch sizes against
decoding each node's tokens in full batches, side by side.

Reprocessing decodes a node's stored tokens again when its checkpoint is gone
(evicted, cleared, damaged, made by another backend profile). Replaying the
batch sizes the tokens were first decoded in (one token at a time for a
generated reply) reproduces the KV cells bit for bit, so checkpoints made
below that node still restore exactly; full batches are several times faster
but give other cells. This tool builds a conversation on the starter model
(or ``--model``), then, in one engine, decodes its path both ways in turn
(``--repeats`` rounds, alternating, so that a busy machine slows both alike)
and prints the medians and their ratio, with a plain prompt decode of the
same length for scale.

    python tools/reprocess_speed.py --turns 6 --reply-tokens 120 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.batches import redecode
from app.conversation.service import ConversationService
from app.platform.starter_model import starter_model_path
from storage.db import open_database

QUESTIONS = [
    "Explain how a B-tree keeps itself balanced.",
    "How does that compare with a red-black tree?",
    "Write a short Python function that inserts into a sorted list.",
    "What is its time complexity, and why?",
    "Summarise everything so far in three bullet points.",
    "Which of these structures would you pick for a database index?",
    "And for an in-memory cache?",
    "Thank you. One last question: what is a trie?",
]


def main() -> None:
    """Build the conversation, time both ways, print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=starter_model_path())
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--reply-tokens", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    settings = BackendSettings(n_ctx=4096)
    with tempfile.TemporaryDirectory() as scratch:
        db = open_database(Path(scratch) / "arbor.sqlite3")
        engine = LlamaEngine(args.model, settings)
        service = ConversationService(db, engine)
        _conversation, node = service.new_conversation("Be concise.")
        params = SamplingParams(temperature=0.7, max_tokens=args.reply_tokens, seed=7)
        for question in QUESTIONS[: args.turns]:
            node = service.send(node, question, params).assistant_node
        path = service.path(node)
        tokens = [t for n in path for t in n.tokens]
        rows = {"exact replay": [], "full batches": [], "one prompt": []}
        for _round in range(args.repeats):
            rows["exact replay"].append(_time(engine, path, exact=True))
            rows["full batches"].append(_time(engine, path, exact=False))
            rows["one prompt"].append(_time_prompt(engine, tokens))
        service.close()
        engine.close()
        db.close()
    medians = {name: statistics.median(times) for name, times in rows.items()}
    print(
        json.dumps(
            {
                "model": args.model.name,
                "path_tokens": len(tokens),
                "generated_tokens": sum(
                    len(n.tokens) for n in path if n.role == "assistant"
                ),
                "repeats": args.repeats,
                "seconds": {k: round(v, 2) for k, v in medians.items()},
                "exact_over_batches": round(
                    medians["exact replay"] / medians["full batches"], 2
                ),
                "exact_tokens_per_second": round(
                    len(tokens) / medians["exact replay"], 1
                ),
                "batches_tokens_per_second": round(
                    len(tokens) / medians["full batches"], 1
                ),
            },
            indent=2,
        )
    )


def _time(engine: LlamaEngine, path: list, exact: bool) -> float:
    # Reprocessing the whole path from an empty context, node by node, as
    # ContextSync does.
    engine.truncate(0)
    started = time.perf_counter()
    before = None
    for node in path:
        if not (exact and redecode(engine, node, before)):
            engine.decode(node.tokens)
        before = node
    return time.perf_counter() - started


def _time_prompt(engine: LlamaEngine, tokens: list[int]) -> float:
    engine.truncate(0)
    started = time.perf_counter()
    engine.decode(tokens)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
