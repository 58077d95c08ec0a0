"""The check's verdicts and figures, as JSON and as a short Markdown table.

``summarize`` reads the steps' raw results (``record["steps"]``) into the
fields the table shows: ``checks`` (every exactness verdict, passed True or
False, or None where its step did not run), ``cold_resume``,
``state_speed``, ``speed`` (Arbor beside llama-bench) and ``copy``. Standard
library only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULT_FILE = "gpu_check.json"
TABLE_FILE = "gpu_check.md"
# The kinds of step whose results hold exactness verdicts.
_VERDICT_KINDS = ("exact", "batch_replay", "placement")


def summarize(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with ``checks``, ``cold_resume``, ``state_speed``,
    ``speed``, ``copy`` and ``passed`` filled in from its steps."""
    checks: list[dict[str, Any]] = []
    cold: list[dict[str, Any]] = []
    state: list[dict[str, Any]] = []
    speed: dict[str, dict[str, Any]] = {}
    copy: dict[str, Any] = {}
    for step in record["steps"]:
        kind, result = step["kind"], step.get("result")
        # Which model a figure is of: "speed big", "cold resume main", ...
        role = "big" if " big" in step["id"] else "main"
        if kind in _VERDICT_KINDS:
            if result is None:
                checks.append(
                    {
                        "check": step["id"],
                        "passed": False if step["status"] != "skipped" else None,
                        "detail": step.get("error", "")[-300:],
                    }
                )
                continue
            for name, passed in result["verdicts"].items():
                checks.append({"check": f"{step['id']}: {name}", "passed": passed})
            arm = result.get("continuous") or {}
            if arm and record.get("on_gpu"):
                checks.append(
                    {
                        "check": f"{step['id']}: every layer on the GPU",
                        "passed": arm["offloaded_layers"] == arm["offloadable_layers"],
                        "detail": arm.get("placement", ""),
                    }
                )
        elif result is None:
            continue
        elif kind == "cold_resume":
            cold += [{"model": role} | row for row in result["rows"]]
        elif kind == "state_speed":
            state += [
                {"model": role, "flash_attn": result["flash_attn"]} | row
                for row in result["rows"]
            ]
            copy = result["copy"]
            for row in result["rows"]:
                checks.append(
                    {
                        "check": f"{step['id']}: {row['tokens']} tokens restored",
                        "passed": row["restored_logits_equal"],
                    }
                )
        elif kind in ("speed", "llama_bench"):
            side = "arbor" if kind == "speed" else "llama_bench"
            speed.setdefault(role, {})[side] = result
    ran = [c["passed"] for c in checks if c["passed"] is not None]
    return record | {
        "checks": checks,
        "cold_resume": cold,
        "state_speed": state,
        "speed": speed,
        "copy": copy,
        "passed": bool(ran) and all(ran) and len(ran) == len(checks),
    }


def write(out: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Write the JSON and the table into ``out``; return the summary."""
    summary = summarize(record)
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULT_FILE).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (out / TABLE_FILE).write_text(table(summary))
    return summary


def _mark(passed: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "not run"}[passed]


def _rate(side: dict[str, Any], key: str) -> str:
    return f"{side[key]:.1f}" if key in side else "-"


def table(s: dict[str, Any]) -> str:
    """A short Markdown report of ``s`` (a ``summarize`` result)."""
    build = s.get("build") or {}
    lines = [
        f"# GPU check ({s['backend']}, {s.get('device') or 'CPU'})",
        "",
        s["status_note"],
        "",
        *([f"STOPPED: {s['stopped']}", ""] if s.get("stopped") else []),
        f"- build: {build.get('backend') or 'none'} "
        + "; ".join(
            f"{a['backend']} {'ok' if a['ok'] else 'no'} {a['seconds']} s {a['reason']}"
            for a in build.get("attempts", [])
        ),
        f"- elapsed: {s.get('elapsed_s', 0):.0f} s of {s['deadline_s']:.0f} s; "
        f"verdict: {'ALL PASS' if s['passed'] else 'NOT ALL PASSED'}",
        "",
        "| check | result |",
        "|---|---|",
    ]
    lines += [
        f"| {c['check']} | {_mark(c['passed'])}"
        + (f" ({c['detail'][:120]})" if c.get("detail") and not c["passed"] else "")
        + " |"
        for c in s["checks"]
    ]
    if s["cold_resume"]:
        lines += [
            "",
            "| model | tokens | MB read | cold resume ms | reprocess ms | speedup |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['model']} | {r['path_tokens']} | {r['bytes_read'] / 1e6:.1f} "
            f"| {r['restore_ms']:.1f} | {r['reprocess_ms']:.1f} | {r['speedup']:.1f}x |"
            for r in s["cold_resume"]
        ]
    if s["state_speed"]:
        copy = s["copy"]
        lines += [
            "",
            f"Copy rate ({copy.get('device', '?')}): device to host "
            f"{copy.get('device_to_host_gbps', 0):.2f} GB/s, host to device "
            f"{copy.get('host_to_device_gbps', 0):.2f} GB/s, a "
            f"{copy.get('small_get_bytes', 0)}-byte get "
            f"{copy.get('small_get_us', 0):.1f} µs",
            "",
            "| model | flash attn | tokens | MB | capture GB/s | restore GB/s |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['model']} | {'on' if r['flash_attn'] else 'off'} | {r['tokens']} "
            f"| {r['bytes'] / 1e6:.1f} | {r['capture_gbps']:.2f} "
            f"| {r['restore_gbps']:.2f} |"
            for r in s["state_speed"]
        ]
    if s["speed"]:
        lines += [
            "",
            "| model | Arbor prompt tok/s | llama-bench pp | Arbor gen tok/s "
            "| llama-bench tg |",
            "|---|---|---|---|---|",
        ]
        for model, sides in s["speed"].items():
            arbor, bench = sides.get("arbor", {}), sides.get("llama_bench", {})
            lines.append(
                f"| {model} | {_rate(arbor, 'prompt_tps')} "
                f"| {_rate(bench, 'prompt_tps')} | {_rate(arbor, 'gen_tps')} "
                f"| {_rate(bench, 'gen_tps')} |"
            )
    failed = [st for st in s["steps"] if st["status"] != "ok"]
    if failed:
        lines += ["", "Steps that did not finish:", ""]
        lines += [
            f"- {st['id']}: {st['status']}: {st.get('error', '')[-200:]}"
            for st in failed
        ]
    return "\n".join(lines) + "\n"
