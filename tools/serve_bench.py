"""Arbor's server against llama.cpp's ``llama-server``, side by side.

An agent-like client sends one conversation that grows by a ~150-token user
turn per request, to ~2,000 tokens over 10 requests, to each server (greedy,
the same model, context size and threads); then both servers are restarted
and the conversation goes on; then new conversations with the same system
prompt start, in that conversation and from other clients, five of each
(their medians are reported, being short and so noisy). Each row reports
the time to the first streamed token and the prompt tokens the server
decoded (prompt tokens minus the cached ones). Each server has one client,
which keeps its connection, as an agent's would.

    python tools/serve_bench.py --llama-server PATH/llama-server [--model GGUF]

llama-server is built from the llama.cpp that llama-cpp-python vendors (its
sdist: vendor/llama.cpp, ``cmake --build build --target llama-server``); it
keeps its prompt cache in RAM (``--cache-ram``), so a restart loses it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.platform.starter_model import starter_model_path  # noqa: E402

N_CTX = 4096
THREADS = 2
REQUESTS = 10
SHORT_ROUNDS = 5
REPLY_TOKENS = 24
# fmt: off
WORDS = [
    "index", "page", "split", "merge", "node", "leaf", "root", "branch", "key",
    "value", "order", "search", "insert", "delete", "balance", "height", "level",
    "pointer", "block", "disk", "cache", "write", "read",
]
# fmt: on
SYSTEM = " ".join(
    f"Rule {i}: answer about {WORDS[i % len(WORDS)]} and {WORDS[(i * 7) % len(WORDS)]}."
    for i in range(30)
)


def user_turn(index: int) -> str:
    """A deterministic ~150-token user message."""
    words = [WORDS[(index * 13 + i * 5) % len(WORDS)] for i in range(110)]
    return f"Step {index}: explain " + " ".join(words) + "."


@dataclass
class Row:
    """One request's figures on one server."""

    ttft_ms: float
    decoded: int
    prompt: int


def free_port() -> int:
    """A port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A server process, started and stopped."""

    def __init__(self, name: str, command: list[str], port: int) -> None:
        self.name = name
        self.command = command
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self._client: openai.OpenAI | None = None

    def start(self, model: str) -> None:
        """Start it and wait until it answers a chat request."""
        self.process = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{self.port}/v1", api_key="x", max_retries=0
        )
        client = self.client()
        deadline = time.monotonic() + 300
        while True:
            try:
                client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": "warm up"}],
                    max_tokens=1,
                    user="warmup",  # Arbor: a conversation of its own
                )
                return
            except (openai.APIConnectionError, openai.InternalServerError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def stop(self) -> None:
        """SIGINT, as Ctrl+C, and wait."""
        assert self.process is not None
        self.process.send_signal(2)
        self.process.wait(timeout=120)

    def client(self) -> openai.OpenAI:
        """Its openai client (made when it started)."""
        assert self._client is not None
        return self._client


def ask(
    server: Server,
    model: str,
    messages: list[dict[str, str]],
    user: str | None = None,
) -> tuple[Row, str]:
    """One streamed request: its figures and the reply's text. ``user``
    names another client (for Arbor, another conversation)."""
    started = time.perf_counter()
    first: float | None = None
    text = []
    usage: Any = None
    timings: dict[str, Any] = {}
    stream = server.client().chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=REPLY_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        **({"user": user} if user else {}),
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            if first is None:
                first = time.perf_counter()
            text.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
        timings = (chunk.model_extra or {}).get("timings") or timings
    assert first is not None and usage is not None
    cached = 0
    details = usage.prompt_tokens_details
    if details is not None and details.cached_tokens is not None:
        cached = details.cached_tokens
    decoded = usage.prompt_tokens - cached
    if timings.get("prompt_n") is not None:  # llama-server says it exactly
        decoded = int(timings["prompt_n"])
    return Row((first - started) * 1000, decoded, usage.prompt_tokens), "".join(text)


def run(servers: dict[str, Server], model: str) -> dict[str, dict[str, Any]]:
    """The whole scenario, each step on every server in turn (never two at
    once), so that the machine's noise falls on both alike."""
    for server in servers.values():
        server.start(model)
    histories = {name: [{"role": "system", "content": SYSTEM}] for name in servers}
    results: dict[str, dict[str, Any]] = {
        name: {key: [] for key in ("growing", *SHORT)} for name in servers
    }

    def step(key: str, name: str, messages: list[dict[str, str]], **kw: Any) -> str:
        row, reply = ask(servers[name], model, messages, **kw)
        if key == "restarted":
            results[name][key] = row
        else:
            results[name][key].append(row)
        return reply

    for index in range(REQUESTS):
        for name, messages in histories.items():
            messages.append({"role": "user", "content": user_turn(index)})
            reply = step("growing", name, messages)
            messages.append({"role": "assistant", "content": reply})
    for server in servers.values():
        server.stop()
        server.start(model)
    for name, messages in histories.items():
        messages.append({"role": "user", "content": user_turn(REQUESTS)})
        step("restarted", name, messages)
    system = {"role": "system", "content": SYSTEM}
    for index in range(SHORT_ROUNDS):
        for name in servers:
            hello = [system, {"role": "user", "content": f"Hi, {WORDS[index]}."}]
            step("new_with_known_system", name, hello)
            # Another client: for Arbor a new conversation, whose start is
            # the same system prompt's start of the first one.
            other = [system, {"role": "user", "content": f"Yo, {WORDS[-index]}."}]
            step("other_client_known_system", name, other, user=f"client {index}")
    for server in servers.values():
        server.stop()
    return results


# The short rows, each asked SHORT_ROUNDS times, and their names.
SHORT = {
    "new_with_known_system": "new conversation, known system prompt",
    "other_client_known_system": "another client, known system prompt",
}


def main() -> None:
    """Run both servers and print the table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-server", type=Path, required=True)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    model = (args.model or starter_model_path()).resolve()
    data = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    arbor_port, llama_port = free_port(), free_port()
    arbor = Server(
        "arbor",
        [
            sys.executable,
            "-m",
            "app",
            "--data-dir",
            str(data),
            "--model",
            str(model),
            "--n-ctx",
            str(N_CTX),
            "--threads",
            str(THREADS),
            "--n-gpu-layers",
            "0",
            "serve",
            "--port",
            str(arbor_port),
        ],
        arbor_port,
    )
    llama = Server(
        "llama-server",
        [
            str(args.llama_server),
            "-m",
            str(model),
            "-c",
            str(N_CTX),
            "-t",
            str(THREADS),
            "-ngl",
            "0",
            "-np",
            "1",
            "--port",
            str(llama_port),
            "--host",
            "127.0.0.1",
            "--no-webui",
            # Arbor's defaults: flash attention off, batches of 512.
            "-fa",
            "off",
            "-b",
            "512",
        ],
        llama_port,
    )
    results = run({"arbor": arbor, "llama-server": llama}, model.stem)
    shutil.rmtree(data, ignore_errors=True)
    print_table(results)
    if args.json:
        args.json.write_text(
            json.dumps(results, default=lambda r: r.__dict__, indent=2)
        )


def print_table(results: dict[str, dict[str, Any]]) -> None:
    """The figures as a Markdown table."""
    head = ["request", "context tokens", "Arbor TTFT", "llama-server TTFT"]
    head += ["Arbor decoded", "llama-server decoded"]
    print("| " + " | ".join(head) + " |")
    print("|---" * len(head) + "|")
    a, b = results["arbor"], results["llama-server"]
    rows = [
        (f"growing {i + 1}", x, y)
        for i, (x, y) in enumerate(zip(a["growing"], b["growing"], strict=True))
    ]
    rows.append(("after a restart", a["restarted"], b["restarted"]))
    for name, x, y in rows:
        cells = [name, f"{x.prompt:,}", f"{x.ttft_ms:.0f} ms", f"{y.ttft_ms:.0f} ms"]
        cells += [f"{x.decoded:,}", f"{y.decoded:,}"]
        print("| " + " | ".join(cells) + " |")
    for key, name in SHORT.items():
        cells = [f"{name} (median of {len(a[key])})", f"{a[key][0].prompt:,}"]
        cells += [_spread(a[key]), _spread(b[key])]
        cells += [f"{a[key][0].decoded:,}", f"{b[key][0].decoded:,}"]
        print("| " + " | ".join(cells) + " |")
    warm_a = statistics.median(r.ttft_ms for r in a["growing"][1:])
    warm_b = statistics.median(r.ttft_ms for r in b["growing"][1:])
    print(
        f"\nwarm continues (requests 2-{REQUESTS}), median TTFT: "
        f"Arbor {warm_a:.0f} ms, llama-server {warm_b:.0f} ms"
    )


def _spread(rows: list[Row]) -> str:
    """The median time to the first token, with the lowest and highest."""
    times = sorted(r.ttft_ms for r in rows)
    return f"{statistics.median(times):.0f} ms ({times[0]:.0f} to {times[-1]:.0f})"


if __name__ == "__main__":
    main()
