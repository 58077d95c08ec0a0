"""The CLI: JSON out, and bad input answered with one line and a non-zero status."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli


def _one_line_error(result) -> str:
    assert result.returncode != 0
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_list_show_tree_describe_the_conversation(arbor):
    created = arbor("new", "--title", "Trees", "--system", "Be brief.")
    reply = arbor(
        "send", created["node"], "Hi", "--temperature", "0", "--max-tokens", "3"
    )
    listed = arbor("list")["conversations"]
    assert [(c["id"], c["title"]) for c in listed] == [
        (created["conversation"], "Trees")
    ]
    assert listed[0]["checkpoint_bytes"] > 0
    shown = arbor("show", reply["assistant_node"])
    assert [m["role"] for m in shown["messages"]] == ["system", "user", "assistant"]
    assert shown["messages"][0]["text"] == "Be brief."
    assert shown["messages"][2]["generation"]["params"]["temperature"] == 0
    tree = arbor("tree", created["conversation"])["nodes"]
    assert [n["parent"] for n in tree] == [None, created["node"], reply["user_node"]]
    assert all(n["checkpoint_bytes"] > 0 and n["tokens"] > 0 for n in tree)
    for key in (
        "restored_tokens",
        "kept_tokens",
        "reprocessed_tokens",
        "restore_ms",
        "prompt_tokens",
        "prompt_ms",
        "generated_tokens",
        "generate_ms",
        "checkpoint_bytes_written",
    ):
        assert key in reply["stats"]


def test_seed_is_recorded_and_reproduces_the_reply(arbor):
    root = arbor("new")["node"]
    first = arbor("send", root, "Roll", "--temperature", "1.0", "--max-tokens", "8")
    seed = arbor("show", first["assistant_node"])["messages"][-1]["generation"][
        "params"
    ]["seed"]
    assert isinstance(seed, int)
    again = arbor(
        "send",
        root,
        "Roll",
        "--temperature",
        "1.0",
        "--max-tokens",
        "8",
        "--seed",
        seed,
    )
    assert again["text"] == first["text"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "999"), "No node with id 999"),
        (("tree", "42"), "No conversation with id 42"),
        (("send", "999", "hello"), "No node with id 999"),
        (("send",), "usage error"),
        (("send", "x", "hi"), "usage error"),
        (("--kv-type", "f8", "list"), "usage error"),
        (("frobnicate",), "usage error"),
    ],
)
def test_bad_input_gives_one_line(data_dir, tiny_model, args, message):
    line = _one_line_error(
        run_cli("--data-dir", data_dir, "--model", tiny_model, *args)
    )
    assert message in line


def test_bad_model_files_give_one_line(data_dir, tmp_path: Path, tiny_model: Path):
    root = run_cli("--data-dir", data_dir, "new").json["node"]
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("hello, I am not a model")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(tiny_model.read_bytes()[: tiny_model.stat().st_size // 2])
    cases = [
        (tmp_path / "missing.gguf", "does not exist"),
        (not_gguf, "not a GGUF model"),
        (truncated, "could not be loaded"),
    ]
    for model, message in cases:
        line = _one_line_error(
            run_cli("--data-dir", data_dir, "--model", model, "send", root, "hi")
        )
        assert message in line
    # Nothing was lost: the message that could not be answered was never half-written.
    assert (
        run_cli("--data-dir", data_dir, "tree", "1").json["nodes"][0]["role"] == "root"
    )


def test_newer_database_is_refused_untouched(data_dir: Path):
    import sqlite3

    db = data_dir / "arbor.sqlite3"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE future (x)")
        con.execute("PRAGMA user_version = 99")
    before = db.read_bytes()
    line = _one_line_error(run_cli("--data-dir", data_dir, "list"))
    assert "newer version of Arbor" in line
    assert db.read_bytes() == before


def test_info_reports_the_model_and_gpu_support(arbor, data_dir):
    info = arbor("info")
    assert info["model"]["name"] == "arbor-tiny-test"
    assert isinstance(info["model"]["gpu_offload_supported"], bool)
    assert info["model"]["state_kind"] == "delta"
    assert "n_ctx" not in info["profile"]  # deltas restore into any context size
    assert info["database"] == str(data_dir / "arbor.sqlite3")


def test_help_is_plain_text():
    result = run_cli("--help")
    assert result.returncode == 0
    assert "send" in result.stdout and "Traceback" not in result.stderr


def test_delete_a_conversation_and_clear_checkpoints(arbor):
    root = arbor("new", "--system", "Be brief.")["node"]
    reply = arbor("send", root, "Hello", "--temperature", "0", "--max-tokens", "4")
    conversation = arbor("list")["conversations"][0]["id"]
    kept = arbor("new")["conversation"]

    cleared = arbor("clear-checkpoints", conversation)
    assert cleared == {
        "conversation": conversation,
        "bytes_freed": cleared["bytes_freed"],
    }
    assert cleared["bytes_freed"] > 0
    # Messages stay; the next visit rebuilds the checkpoints.
    shown = arbor("show", reply["assistant_node"])
    assert [m["role"] for m in shown["messages"]][-1] == "assistant"
    assert arbor("clear-checkpoints")["bytes_freed"] >= 0

    assert arbor("delete-conversation", conversation) == {
        "deleted_conversation": conversation
    }
    assert [c["id"] for c in arbor("list")["conversations"]] == [kept]
