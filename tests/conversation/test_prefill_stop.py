"""Stop while a long prompt is read (issue 41): the prompt is decoded in
steps of ``prompt_step`` tokens with Stop and the progress between them, so
a stop lands within a step; the message stays stored, unanswered, and the
reply it gets later is exact. In the CLI, Ctrl+C does the same.
"""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.errors import Interrupted
from app.backend.settings import BackendSettings
from app.backend.values import SamplingParams
from app.conversation.batches import Batches
from storage import node_rows
from storage.values import Role
from tests.conftest import ROOT, run_cli
from tests.helpers.replay import replayed_digest
from tests.helpers.tiny_model import write_tiny_model

PARAMS = SamplingParams(temperature=0.8, seed=7, max_tokens=6)
SENTENCE = "the quick brown fox jumps over the lazy dog. "


def _long_text(n_chars: int) -> str:
    # The tiny model's vocabulary is byte-level: a character is a token.
    return (SENTENCE * (n_chars // len(SENTENCE) + 1))[:n_chars]


def test_a_long_message_stopped_while_read_is_kept_and_answered_exactly(
    tiny_model: Path, open_service
) -> None:
    service = open_service(tiny_model, LlamaEngine)
    engine = service.engine
    _conversation, root = service.new_conversation(None)
    text = _long_text(1500)
    told: list[tuple[int, int]] = []

    def stop_at_the_fourth_step(done: int, total: int) -> bool:
        told.append((done, total))
        return len(told) < 4

    engine.decode_watch = stop_at_the_fourth_step
    with pytest.raises(Interrupted):
        service.send(root, text, PARAMS)
    done, total = told[-1]
    assert 0 < done < total and total > 1500
    # Progress came a step at a time, not a whole n_batch.
    steps = [b - a for (a, _), (b, _) in itertools.pairwise(told)]
    assert max(steps) <= engine.prompt_step < engine.n_batch
    kept = [
        (node_id, role)
        for node_id, role, child_text, _use in node_rows.child_texts(service.db, root)
        if child_text == text
    ]
    assert len(kept) == 1 and kept[0][1] == Role.USER
    (message_id, _role) = kept[0]
    assert not node_rows.child_texts(service.db, message_id)  # unanswered

    engine.decode_watch = None
    reply = service.send(root, text, PARAMS)
    assert reply.user_node == message_id  # the kept message, answered
    service.flush_checkpoints()
    path = service.path(reply.assistant_node)
    batches = Batches.of(path[-2].chunks)
    assert len(batches.sizes) > 1 and max(batches.sizes) <= engine.prompt_step
    settings = BackendSettings(n_ctx=2048, n_threads=1)
    assert reply.stats.logits_digest == replayed_digest(tiny_model, path, settings)

    # Another process restores the message from its checkpoint: the same
    # logits, bit for bit, and the same reply.
    again = open_service(tiny_model, LlamaEngine).regenerate(
        reply.assistant_node, PARAMS
    )
    assert again.stats.reprocessed_tokens == 0
    assert again.stats.logits_digest == reply.stats.logits_digest
    assert again.text == reply.text


@pytest.fixture(scope="module")
def deep_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Twelve layers read 3,000 tokens in seconds on one thread: time enough
    # to be stopped once the reading has begun.
    return write_tiny_model(tmp_path_factory.mktemp("deep") / "deep.gguf", n_layer=12)


def test_ctrl_c_stops_arbor_send_while_it_reads_the_prompt(
    data_dir: Path, deep_tiny_model: Path
) -> None:
    common = ("--data-dir", data_dir, "--model", deep_tiny_model)
    root = run_cli(*common, "new").json["node"]
    text = _long_text(3000)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            *map(str, common),
            *("--n-ctx", "4096", "--threads", "1"),
            *("send", str(root), text, "--stream", "--max-tokens", "4"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert first.startswith("arbor: reading the prompt: 0 of "), first
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, err
    assert "Traceback" not in err
    assert out == ""  # no reply
    stopped = re.search(
        r"arbor: stopped: Stopped after reading ([\d,]+) of ([\d,]+)", err
    )
    assert stopped is not None, err
    done, total = (int(n.replace(",", "")) for n in stopped.groups())
    assert done < total and total >= 3000
    nodes = run_cli("--data-dir", data_dir, "tree", "1").json["nodes"]
    message = [n for n in nodes if n["role"] == "user"]
    assert [n["text"] for n in message] == [text]
    assert not [n for n in nodes if n["parent"] == message[0]["id"]]  # unanswered
