"""Run the plan's steps against a deadline, each in a process of its own.

A step starts only if the time left covers its ``least``; it is killed at
its own limit or at the deadline, whichever comes first, and the result file
is written again after every step, so a run cut short still leaves what it
measured. Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tools.gpu_check.plan import Step

# Seconds kept back at the end for writing the report.
RESERVE = 10.0
ROOT = Path(__file__).resolve().parents[2]


def run_steps(
    steps: list[Step],
    env: dict[str, str],
    deadline: float,
    record: dict[str, Any],
    save: Any,
) -> None:
    """Run ``steps`` in order; each outcome goes to ``record["steps"]`` and
    ``save(record)`` is called after each one."""
    outcomes: dict[str, str] = {}
    for step in steps:
        left = deadline - time.monotonic() - RESERVE
        entry: dict[str, Any] = {"id": step.id, "kind": step.kind}
        missing = [n for n in step.needs if outcomes.get(n) != "ok"]
        if missing:
            entry |= {"status": "skipped", "error": f"needs {', '.join(missing)}"}
        elif left < step.least:
            entry |= {"status": "skipped", "error": f"no time left ({left:.0f} s)"}
        else:
            entry |= _run_one(step, env, min(step.timeout, left))
        outcomes[step.id] = entry["status"]
        record["steps"].append(entry)
        save(record)
        print(
            f"[{time.strftime('%H:%M:%S')}] {step.id}: {entry['status']} "
            f"({entry.get('seconds', 0):.1f} s) {entry.get('error', '')}",
            file=sys.stderr,
            flush=True,
        )


def _run_one(step: Step, env: dict[str, str], limit: float) -> dict[str, Any]:
    if step.kind == "llama_bench":
        command = llama_bench_command(step.args)
    else:
        command = [
            sys.executable,
            "-m",
            "tools.gpu_check.steps",
            step.kind,
            json.dumps(step.args),
        ]
    Path(step.args.get("work", ROOT)).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=limit, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired:
        return {
            "status": "timed out",
            "seconds": time.monotonic() - started,
            "error": f"killed after {limit:.0f} s",
        }
    seconds = time.monotonic() - started
    if done.returncode != 0:
        return {
            "status": "failed",
            "seconds": seconds,
            "error": (done.stderr.strip() or done.stdout.strip())[-3000:],
        }
    try:
        if step.kind == "llama_bench":
            result: Any = parse_llama_bench(done.stdout)
        else:
            result = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, KeyError) as error:
        return {
            "status": "failed",
            "seconds": seconds,
            "error": f"unreadable output ({error}): {done.stdout[-1000:]}",
        }
    return {"status": "ok", "seconds": seconds, "result": result}


def llama_bench_command(args: dict[str, Any]) -> list[str]:
    """llama-bench with Arbor's defaults: batches of 512 (n_batch = n_ubatch),
    flash attention off, an f16 KV cache."""
    return [
        args["binary"],
        "-m",
        args["model"],
        "-ngl",
        args["ngl"],
        "-p",
        str(args["prompt_tokens"]),
        "-n",
        str(args["gen_tokens"]),
        "-b",
        "512",
        "-ub",
        "512",
        "-fa",
        "0",
        "-r",
        str(max(2, args["repeats"])),
        "-o",
        "json",
    ]


def parse_llama_bench(stdout: str) -> dict[str, Any]:
    """Prompt and generation tokens/s from llama-bench's JSON output."""
    rows = json.loads(stdout[stdout.index("[") :])
    out: dict[str, Any] = {}
    for row in rows:
        key = "prompt_tps" if row["n_prompt"] else "gen_tps"
        out[key] = row["avg_ts"]
        out["threads"] = row.get("n_threads")
        out["backends"] = row.get("backends")
        out["gpu_info"] = row.get("gpu_info")
    return out


def child_env(sites: list[Path], extra: dict[str, str]) -> dict[str, str]:
    """The environment of the steps: the tree and ``sites`` on the path."""
    env = dict(os.environ)
    paths = [str(ROOT), *map(str, sites)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env | extra
