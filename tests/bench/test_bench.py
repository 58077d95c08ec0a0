"""``arbor bench`` on the tiny model: every section and row comes out, well-formed.

Timings are not asserted (the tiny model says nothing about speed); what is
asserted holds on any machine: rows present, figures positive, ratios
computed from the figures beside them, and the properties the design
guarantees (a sibling switch reads only the suffix, greedy replies are the
same with checkpointing on or off).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.bench.config import BenchConfig
from tests.conftest import run_cli

QUICK = BenchConfig.quick()


@pytest.fixture(scope="module")
def bench(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Any]:
    """One quick run through the CLI: its Markdown and its JSON."""
    json_path = tmp_path_factory.mktemp("bench") / "bench.json"
    # One thread: the tiny model gains nothing from two, and a busy CI machine
    # makes llama.cpp's thread barriers slow.
    result = run_cli(
        "--model",
        tiny_model,
        "--n-ctx",
        "1024",
        "--threads",
        "1",
        "bench",
        "--quick",
        "--json",
        json_path,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout, json.loads(json_path.read_text())


def test_markdown_has_every_section(bench):
    markdown, data = bench
    for heading in (
        "### 1. Cold resume",
        "### 2. Sibling switch",
        "### 3. Storage",
        "### 4. Overhead",
        "### 5. Alternatives",
        "### Targets",
    ):
        assert heading in markdown
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    expected_rows = sum(
        1 + len(data[key])  # a header row per table
        for key in (
            "cold_resume",
            "sibling_switch",
            "move_breakdown",
            "storage",
            "overhead",
            "node_writes",
            "alternatives",
            "targets",
        )
    )
    assert len(rows) == expected_rows


def test_cold_resume_rows(bench):
    _, data = bench
    rows = data["cold_resume"]
    assert [r["target_tokens"] for r in rows] == list(QUICK.path_targets)
    for row in rows:
        assert row["path_tokens"] >= row["target_tokens"] - 32
        assert row["nodes"] > 1 and row["bytes_read"] > 0
        for key in ("restore_ms", "sync_ms", "backend_ms", "reprocess_ms", "load_ms"):
            assert row[key] > 0, key
        assert row["speedup"] == pytest.approx(
            row["reprocess_ms"] / row["restore_ms"], rel=1e-3
        )
        assert row["best_speedup"] == pytest.approx(
            row["best_reprocess_ms"] / row["best_restore_ms"], rel=1e-3
        )


def test_sibling_switch_reads_only_the_suffix(bench):
    _, data = bench
    rows = data["sibling_switch"]
    assert [(r["prefix_tokens"] > 0, r["suffix_nodes"]) for r in rows] == [
        (True, 2)
    ] * len(QUICK.sibling_cases)
    for row in rows:
        assert row["bytes_read"] == row["suffix_checkpoint_bytes"] > 0
        assert row["excess_bytes"] <= 0
        assert row["full_reprocess_ms"] > row["suffix_reprocess_ms"] > 0
        assert row["vs_full_restore"] == pytest.approx(
            row["full_restore_ms"] / row["switch_ms"], rel=1e-3
        )
    breakdown = data["move_breakdown"]
    moves = [r["move"] for r in breakdown]
    assert moves == ["cold resume"] * len(QUICK.path_targets) + [
        "sibling switch"
    ] * len(rows)
    for row in breakdown:
        assert row["moved_nodes"] > 0 and row["moved_tokens"] > 0
        for key in ("get_path_ms", "per_node_read_ms", "batched_read_ms", "verify_ms"):
            assert row[key] > 0, key


def test_storage_rows(bench):
    _, data = bench
    linear, bushy = data["storage"]
    assert linear["shape"].startswith("linear chat")
    assert bushy["shape"].startswith("bushy tree")
    for row in (linear, bushy):
        # A delta holds every KV byte of its tokens plus a little metadata.
        assert row["bytes_per_token"] >= row["kv_bytes_per_token"]
        assert row["full_snapshot_bytes"] > row["checkpoint_bytes"] > 0
    assert data["sqlite"]["file_bytes"] >= data["sqlite"]["checkpoint_bytes"] > 0


def test_overhead_rows(bench):
    _, data = bench
    rows = {r["mode"]: r for r in data["overhead"]}
    assert list(rows) == ["off", "sync", "queued"]
    # Greedy, same context: every mode generates the same reply.
    assert len({r["generated_tokens"] for r in rows.values()}) == 1
    assert rows["off"]["checkpoint_ms"] == 0
    assert rows["sync"]["checkpoint_ms"] > 0
    for row in rows.values():
        assert row["reply_tps"] > 0 and row["generate_tps"] > 0
    assert data["node_writes"] and all(r["write_ms"] > 0 for r in data["node_writes"])


def test_every_target_is_judged(bench):
    _, data = bench
    assert len(data["targets"]) == 5
    assert all(isinstance(t["met"], bool) and t["measured"] for t in data["targets"])
    assert data["model"]["kv_bytes_per_token"] > 0 and data["machine"]["cpu"]


def test_alternatives_rows(bench):
    _, data = bench
    rows = data["alternatives"]
    assert [r["n"] for r in rows] == list(QUICK.alternatives_counts)
    for row in rows:
        assert row["sequential_tokens"] > 0 and row["parallel_tokens"] > 0
        assert row["parallel_ms"] > row["redecode_ms"] > 0
        expected = row["parallel_tps"] / row["sequential_tps"]
        assert row["speedup"] == pytest.approx(expected, rel=1e-3, abs=1e-3)
