"""``n=4`` in one request against four requests one after another, side by
side on one ``arbor serve``: the wall time for four replies to one message.

With ``n``, Arbor samples the replies together, one decode per step over
four forks of the context (``ConversationService.regenerate_parallel``);
four requests sample them one at a time. Both start from the same stored
message, so neither decodes the prompt: the difference is the sampling
alone. Each round alternates which goes first; the rows are medians.

    python tools/alternatives_bench.py [--model GGUF] [--tokens 64] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.platform.starter_model import starter_model_path  # noqa: E402
from tools.agent_bench import ArborServer, free_port  # noqa: E402

N = 4
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Write a short story about a lighthouse keeper."},
]


def together(client: openai.OpenAI, tokens: int, seed: int) -> tuple[float, int]:
    """One request for N replies: seconds, tokens generated."""
    started = time.perf_counter()
    response = client.chat.completions.create(
        model="m",
        messages=MESSAGES,
        n=N,
        max_tokens=tokens,
        seed=seed,
        temperature=0.8,
    )
    assert response.usage is not None
    return time.perf_counter() - started, response.usage.completion_tokens


def one_by_one(client: openai.OpenAI, tokens: int, seed: int) -> tuple[float, int]:
    """N requests for one reply each: seconds, tokens generated."""
    started = time.perf_counter()
    generated = 0
    for k in range(N):
        response = client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            max_tokens=tokens,
            seed=seed + k,
            temperature=0.8,
        )
        assert response.usage is not None
        generated += response.usage.completion_tokens
    return time.perf_counter() - started, generated


def main() -> None:
    """Run the rounds; print the medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = args.model or starter_model_path()
    with tempfile.TemporaryDirectory() as folder:
        server = ArborServer(Path(folder), model, free_port())
        server.start()
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{server.port}/v1",
            api_key="unused",
            max_retries=0,
        )
        # The message is stored and its context decoded once, before timing.
        client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=1)
        rows: dict[str, list[tuple[float, int]]] = {"n=4": [], "4 requests": []}
        for round_ in range(args.rounds):
            order = [("n=4", together), ("4 requests", one_by_one)]
            for name, run in order if round_ % 2 == 0 else order[::-1]:
                rows[name].append(run(client, args.tokens, 100 * round_))
        client.close()
        server.stop()
    print(
        f"model: {model.name}; {N} replies of up to {args.tokens} tokens, "
        f"median of {args.rounds} rounds"
    )
    medians = {}
    for name, runs in rows.items():
        seconds = statistics.median(s for s, _t in runs)
        tokens = statistics.median(t for _s, t in runs)
        medians[name] = seconds
        print(
            f"{name:>11}: {seconds:6.2f} s, {tokens:5.0f} tokens, "
            f"{tokens / seconds:6.1f} tok/s"
        )
    print(f"n=4 is {medians['4 requests'] / medians['n=4']:.2f}x faster")


if __name__ == "__main__":
    main()
