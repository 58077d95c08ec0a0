"""Edge cases found by an adversarial test, through the real stack.

The CLI in a subprocess (as a user runs it) on the tiny generated model and a
real SQLite file: out-of-range ids and settings, bytes that are not UTF-8, a
relative data folder, a truncated model file, a context that is too large for
the model or the memory. Then the service: replies cut by the context, a
failed send retried, the interactive chat going on after an error.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import llama_cpp
import pytest

from app.backend import engine as engine_module
from app.backend.engine import LlamaEngine
from app.backend.errors import BackendError, ModelFileError
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.service import ConversationService
from app.conversation.streams import Streams
from app.platform.paths import database_path
from storage import node_rows
from storage.db import open_database
from tests.conftest import ROOT, run_cli

GREEDY = ("--temperature", "0")


def _one_line_error(result, status: int) -> str:
    """The single stderr line of a failed command (asserting how it failed)."""
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- arguments checked at the edge -----------------------------------------------


@pytest.mark.parametrize("node_id", ["0", "-1", str(2**63), str(2**64)])
def test_node_ids_outside_sqlite_range_are_usage_errors(data_dir, node_id):
    line = _one_line_error(run_cli("--data-dir", data_dir, "show", node_id), 2)
    assert "node id must be a positive integer below 2^63" in line


def test_conversation_ids_are_checked_too(data_dir):
    line = _one_line_error(run_cli("--data-dir", data_dir, "tree", str(2**63)), 2)
    assert "conversation id must be a positive integer below 2^63" in line


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nan", "temperature must be a finite number"),
        ("inf", "temperature must be a finite number"),
        ("-1", "temperature must be at least 0"),
    ],
)
def test_sampling_values_must_be_finite_and_in_range(
    data_dir, tiny_model, value, message
):
    result = run_cli(
        "--data-dir",
        data_dir,
        "--model",
        tiny_model,
        "send",
        "1",
        "hi",
        "--temperature",
        value,
    )
    assert message in _one_line_error(result, 2)


@pytest.mark.parametrize("n_ctx", ["0", "-5", "4294967360"])
def test_context_sizes_outside_llama_cpp_range_are_usage_errors(
    data_dir, tiny_model, n_ctx
):
    # 4294967360 would wrap to 64 in llama.cpp's uint32.
    result = run_cli(
        "--data-dir", data_dir, "--model", tiny_model, "--n-ctx", n_ctx, "info"
    )
    assert "context size (n_ctx) must be between 64" in _one_line_error(result, 2)


def test_a_context_beyond_the_training_length_fails_fast(data_dir, tiny_model):
    started = time.perf_counter()
    result = run_cli(
        "--data-dir", data_dir, "--model", tiny_model, "--n-ctx", "1000000000", "info"
    )
    assert time.perf_counter() - started < 10
    line = _one_line_error(result, 1)
    assert "this model was trained for 32768 tokens" in line


def test_message_bytes_that_are_not_utf8_are_refused(data_dir, tiny_model):
    argv = [sys.executable, "-m", "app", "--data-dir", str(data_dir)]
    argv += ["--model", str(tiny_model), "send", "1", b"caf\xe9"]
    completed = subprocess.run(argv, capture_output=True, cwd=ROOT, timeout=60)
    assert completed.returncode == 2
    stderr = completed.stderr.decode("utf-8", errors="replace")
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert "the message is not valid UTF-8" in stderr


def test_a_relative_data_dir_means_the_same_folder_each_time(tmp_path):
    def arbor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "app", "--data-dir", "rel-data", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
            env=_env_with_app_on_path(),
        )

    created = arbor("new", "--title", "Here")
    assert created.returncode == 0, created.stderr
    listed = arbor("list")
    assert listed.returncode == 0, listed.stderr
    titles = [c["title"] for c in json.loads(listed.stdout)["conversations"]]
    assert titles == ["Here"]
    assert any((tmp_path / "rel-data").iterdir())


def _env_with_app_on_path() -> dict[str, str]:
    # From another folder, `python -m app` must still find this checkout.
    return {**os.environ, "PYTHONPATH": str(ROOT)}


# --- the model and its context ----------------------------------------------------


def test_a_truncated_model_reports_what_llama_cpp_says(data_dir, tiny_model, tmp_path):
    cut = tmp_path / "cut.gguf"
    data = tiny_model.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    result = run_cli("--data-dir", data_dir, "--model", cut, "info")
    line = _one_line_error(result, 1)
    assert "llama.cpp says:" in line
    assert "not within the file bounds" in line


def test_native_log_levels_follow_ggml(tiny_model, tmp_path, caplog):
    # ggml.h: WARN = 3, ERROR = 4 (3 used to be taken for an error).
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_model.read_bytes()[:-4096])
    with (
        caplog.at_level(logging.DEBUG, logger="app.backend.engine"),
        pytest.raises(ModelFileError, match=r"llama\.cpp says"),
    ):
        LlamaEngine(cut, BackendSettings(n_ctx=256))
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any("file bounds" in r.getMessage() for r in errors)
    assert not any(r.levelno == logging.WARNING for r in caplog.records)


def test_a_context_that_does_not_fit_in_memory_is_refused(tiny_model, monkeypatch):
    # The tiny model's KV cache takes 256 bytes a token: 8 MiB at 32768.
    monkeypatch.setattr(engine_module, "available_memory", lambda: 2**20)
    with pytest.raises(BackendError, match=r"needs about 8.0 MiB .* only 1.0 MiB"):
        LlamaEngine(tiny_model, BackendSettings(n_ctx=32768))


def test_the_default_context_shrinks_to_a_short_training_length(
    tiny_model, monkeypatch
):
    monkeypatch.setattr(llama_cpp, "llama_model_n_ctx_train", lambda _model: 2048)
    with LlamaEngine(tiny_model, BackendSettings()) as engine:
        assert engine.n_ctx == 2048
        assert "trained for 2048 tokens" in engine.info.context_note
    with pytest.raises(BackendError, match="trained for 2048 tokens"):
        LlamaEngine(tiny_model, BackendSettings(n_ctx=3072))


# --- replies and retries --------------------------------------------------------


def test_a_reply_cut_by_the_context_is_truncated(arbor):
    settings = ("--n-ctx", "128")
    root = arbor("new", extra=settings)["node"]
    reply = arbor("send", root, "Hi", *GREEDY, "--max-tokens", "1000", extra=settings)
    assert reply["stats"]["stop_reason"] == "context_full"
    shown = arbor("show", reply["assistant_node"])["messages"][-1]
    assert shown["status"] == "truncated"
    tree = arbor("tree", 1)["nodes"]
    truncated = next(n for n in tree if n["id"] == reply["assistant_node"])
    assert truncated["status"] == "truncated"
    assert truncated["checkpoint_bytes"] > 0  # a valid node, restorable


@pytest.fixture
def service(data_dir, tiny_model):
    """The conversation service on the tiny model and a fresh database."""
    engine = LlamaEngine(tiny_model, BackendSettings(n_ctx=512))
    yield ConversationService(open_database(database_path(data_dir)), engine)
    engine.close()


def test_a_failed_send_retried_answers_the_same_message(service):
    params = SamplingParams(temperature=0, max_tokens=6)
    _conversation, root = service.new_conversation()

    def fail(_piece: str) -> None:
        raise RuntimeError("generation failed")

    with pytest.raises(RuntimeError):
        service.send(root, "Hello", params, Streams(on_token=fail))
    first_try = node_rows.get_children(service.db, root)
    assert [(n.role, n.text) for n in first_try] == [("user", "Hello")]
    assert node_rows.get_children(service.db, first_try[0].id) == []

    reply = service.send(root, "Hello", params)
    assert reply.user_node == first_try[0].id
    users = node_rows.get_children(service.db, root)
    assert [n.id for n in users] == [first_try[0].id]
    replies = node_rows.get_children(service.db, users[0].id)
    assert [(n.id, n.status) for n in replies] == [(reply.assistant_node, "complete")]

    # The context the failure left behind was not trusted: the reply is the
    # one a fresh conversation gets.
    _other, other_root = service.new_conversation()
    assert service.send(other_root, "Hello", params).text == reply.text


def test_chat_reports_an_error_and_goes_on(data_dir, tiny_model):
    lines = b"\xff\xfe\n" + b"x" * 400 + b"\nHi\n"
    argv = [sys.executable, "-m", "app", "--data-dir", str(data_dir)]
    argv += ["--model", str(tiny_model), "--n-ctx", "128", "chat", *GREEDY]
    completed = subprocess.run(
        [*argv, "--max-tokens", "3"],
        input=lines,
        capture_output=True,
        cwd=ROOT,
        timeout=60,
    )
    stderr = completed.stderr.decode()
    assert completed.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "the message is not valid UTF-8" in stderr
    assert "needs about" in stderr  # the long message: too big for the context
    assert "[3 tokens" in stderr  # and the short one was answered
