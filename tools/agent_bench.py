"""A pydantic-ai agent of 10 steps against ``arbor serve``, with a server
restart in the middle: what each step decodes and what it finds cached.

Each step of a tool-calling agent sends the whole history again: the system
prompt and tools, the question, every call and every result. Arbor matches
it node by node against the tree, so a step should decode only its new turn
(the last tool result and the reply's opening), also right after the server
was restarted (the context then comes back from the checkpoints on disk).

The agent must return a structured ``Report``; its output tool refuses until
the tenth request, and its one function tool, ``measure``, restarts the
server at its fifth call. The figures are read from the server's request
log (one line per request: cached, decoded, generated).

    python tools/agent_bench.py [--model GGUF] [--steps 10]
"""

from __future__ import annotations

import argparse
import re
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.platform.starter_model import starter_model_path  # noqa: E402

LOG_LINE = re.compile(
    r"POST /v1/chat/completions 200 (\d+) ms · conversation \d+, (\d+) cached, "
    r"(\d+) decoded, (\d+) generated"
)


class Report(BaseModel):
    """What the agent returns."""

    verdict: Literal["dry", "wet"]
    readings: int


class ArborServer:
    """``arbor serve`` on a fixed port, restartable."""

    def __init__(self, data_dir: Path, model: Path, port: int) -> None:
        self.data_dir, self.model, self.port = data_dir, model, port
        self.logs: list[str] = []
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        """Start it and wait until it is ready."""
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app",
                "--data-dir",
                str(self.data_dir),
                "--model",
                str(self.model),
                "--n-ctx",
                "4096",
                "serve",
                "--port",
                str(self.port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert self.process.stdout is not None
        self.process.stdout.readline()
        assert self.process.stdout.readline().startswith("Ready:")

    def stop(self) -> None:
        """Stop it as Ctrl+C does; keep its request log."""
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        _out, err = self.process.communicate(timeout=120)
        self.logs.append(err)


def free_port() -> int:
    """A port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    """Run the agent; print one row per request."""
    from pydantic_ai import Agent, ModelRetry, RunContext
    from pydantic_ai.exceptions import UsageLimitExceeded
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.usage import UsageLimits

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    model_path = args.model or starter_model_path()
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        server = ArborServer(Path(folder), model_path, port)
        server.start()
        measured = 0

        model = OpenAIChatModel(
            "starter",
            provider=OpenAIProvider(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="unused"
            ),
        )
        agent = Agent(
            model,
            output_type=Report,
            system_prompt="You measure the weather with your tool, then report.",
            model_settings={
                "temperature": 0.7,
                "seed": 1,
                "max_tokens": 96,
                "parallel_tool_calls": False,
            },
            retries=args.steps,
        )

        @agent.tool_plain
        def measure(place: Literal["garden", "roof", "field"]) -> str:
            """Measure the rain at a place."""
            nonlocal measured
            measured += 1
            if measured == args.steps // 2:
                server.stop()  # the next step is answered by a new process
                server.start()
            return f"{place}: {measured * 3} mm of rain"

        @agent.output_validator
        def enough(ctx: RunContext[None], report: Report) -> Report:
            if ctx.usage.requests < args.steps:
                raise ModelRetry("Measure again before reporting.")
            return report

        try:
            agent.run_sync(
                "Is it wet outside?",
                usage_limits=UsageLimits(request_limit=args.steps),
            )
            ending = "reported"
        except UsageLimitExceeded:
            ending = "stopped at the request limit"
        server.stop()
    rows = [LOG_LINE.search(line) for log in server.logs for line in log.splitlines()]
    steps = [row for row in rows if row is not None]
    print(
        f"model: {model_path.name}; {len(steps)} requests, {ending}; "
        f"restart after tool call {args.steps // 2}"
    )
    print(f"{'step':>4} {'ms':>6} {'cached':>7} {'decoded':>8} {'generated':>9}")
    for number, row in enumerate(steps, 1):
        ms, cached, decoded, generated = row.groups()
        print(f"{number:>4} {ms:>6} {cached:>7} {decoded:>8} {generated:>9}")


if __name__ == "__main__":
    main()
