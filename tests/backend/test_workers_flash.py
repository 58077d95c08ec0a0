"""Flash attention is always on with workers (issue 25): without it the V
cache is stored transposed, and a checkpoint is read back from a worker one
network round trip per V row. On this machine alone the setting stays as
given, so local profiles (and their checkpoints) are what they were.

Models on workers are loaded by ``arbor`` processes, never by pytest's: a
worker that fails aborts the process that registered it.
"""

from __future__ import annotations

from app.backend.settings import BackendSettings
from tests.conftest import run_cli
from tests.helpers.workers import free_port, running_worker


def test_workers_turn_flash_attention_on_and_this_machine_keeps_the_setting():
    assert BackendSettings(workers=("127.0.0.1:50052",)).uses_flash_attn
    assert not BackendSettings().uses_flash_attn
    assert BackendSettings(flash_attn=True).uses_flash_attn


def test_a_model_on_a_worker_computes_with_flash_attention(tiny_model, data_dir):
    address = f"127.0.0.1:{free_port()}"
    with running_worker(address):
        on_worker = run_cli(
            "--data-dir", data_dir, "--model", tiny_model, "--worker", address, "info"
        ).json
    local = run_cli("--data-dir", data_dir, "--model", tiny_model, "info").json

    assert on_worker["profile"]["flash_attn"] is True
    assert local["profile"]["flash_attn"] is False
    assert "workers" not in local["profile"]
