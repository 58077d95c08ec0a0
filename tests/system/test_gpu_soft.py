"""Offload for real, on Mesa's software Vulkan driver (lavapipe).

These machines have no GPU, but llama.cpp's Vulkan backend runs on lavapipe
once the device is named (GGML_VK_VISIBLE_DEVICES=0: llama.cpp skips
CPU-type Vulkan devices otherwise). Layers, KV cache and compute then live in
device buffers and every capture and restore goes through the device, slowly
but exactly as on a real GPU.

Each step runs in its own process: which Vulkan devices llama.cpp sees is
fixed when a process loads its backends. The tests skip where lavapipe or
the Vulkan backend is missing, unless ARBOR_REQUIRE_GPU_SOFT is set
(.ci/run sets it, so CI cannot pass them by skipping).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.helpers.tiny_model import write_tiny_model

pytestmark = pytest.mark.gpu_soft

LAVAPIPE = {**os.environ, "GGML_VK_VISIBLE_DEVICES": "0"}
GREEDY = ("--temperature", "0", "--max-tokens", "12")


def _run(env: dict[str, str], *args: str | int | Path, module: str = "app") -> Any:
    return run_cli(*args, env=env, module=module).json


@pytest.fixture(scope="module")
def lavapipe(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip (or fail, where required) unless llama.cpp offloads to lavapipe."""
    info = _run(
        LAVAPIPE,
        "--data-dir",
        tmp_path_factory.mktemp("probe"),
        "--model",
        tiny_model,
        "--n-gpu-layers",
        "all",
        "info",
    )
    if not any(d["backend"] == "Vulkan" for d in info["devices"]):
        why = f"no Vulkan device: {info['devices']}, backends {info['backends']}"
        if os.environ.get("ARBOR_REQUIRE_GPU_SOFT"):
            pytest.fail(why)
        pytest.skip(why)


def _on(device_env: dict[str, str], data_dir: Path, model: Path, layers: str):
    def call(*args: str | int) -> Any:
        return _run(
            device_env,
            "--data-dir",
            data_dir,
            "--model",
            model,
            "--n-gpu-layers",
            layers,
            *args,
        )

    return call


def test_info_lists_the_device_and_the_full_offload(lavapipe, tiny_model, tmp_path):
    info = _on(LAVAPIPE, tmp_path, tiny_model, "all")("info")
    vulkan = [d for d in info["devices"] if d["backend"] == "Vulkan"]
    assert vulkan[0]["name"] == "Vulkan0"
    assert "llvmpipe" in vulkan[0]["description"]
    assert vulkan[0]["total_bytes"] > 0
    assert any(d["kind"] == "cpu" for d in info["devices"])
    model = info["model"]
    # Every layer, the output layer included, and the buffers on the device.
    assert model["offloaded_layers"] == model["offloadable_layers"] == 3
    assert model["gpu_bytes"] > 0
    assert model["placement"].startswith("3/3 layers offloaded (Vulkan0")
    assert info["profile"]["offload"].startswith("3/3 on Vulkan0 (Vulkan llvmpipe")
    # The estimate Settings shows is close to what llama.cpp allocated.
    estimated = model["offload_cost"]["estimated_bytes"]
    assert 0.8 < estimated / model["gpu_bytes"] < 1.25, (estimated, model["gpu_bytes"])
    # The CPU backend is a variant llama.cpp picked for this processor.
    assert model["cpu_variant"]
    assert (
        Path(info["backends"]["CPU"]).name == f"libggml-cpu-{model['cpu_variant']}.so"
    )


def test_auto_offloads_what_fits_and_none_means_the_cpu(lavapipe, tiny_model, tmp_path):
    auto = _on(LAVAPIPE, tmp_path, tiny_model, "auto")("info")["model"]
    assert auto["offloaded_layers"] == 3  # a few MiB fit lavapipe's 2 GiB
    cpu = _on(LAVAPIPE, tmp_path, tiny_model, "0")("info")
    assert cpu["model"]["offloaded_layers"] == 0
    assert cpu["model"]["gpu_bytes"] == 0  # no compute buffer on the device either
    assert cpu["profile"]["offload"] == ""


def test_cold_resume_on_the_device_is_exact(lavapipe, tiny_model, tmp_path):
    """A branched conversation on the device: each step a new process, no
    reprocessing, and the logits of continuous decoding on the device."""
    gpu = _on(LAVAPIPE, tmp_path / "cold", tiny_model, "all")
    root = gpu("new", "--system", "Answer briefly.")["node"]
    first = gpu("send", root, "Tell me about trees.", *GREEDY)
    branch = gpu("send", root, "Tell me about rivers.", *GREEDY)
    back = gpu("send", first["assistant_node"], "And about branches?", *GREEDY)
    assert back["stats"]["reprocessed_tokens"] == 0
    assert back["stats"]["fallbacks"] == []
    assert back["stats"]["restored_tokens"] == first["stats"]["context_tokens"]
    assert branch["stats"]["reprocessed_tokens"] == 0

    # The same turns decoded in one process that never restores, on the device.
    continuous = _run(
        LAVAPIPE,
        tiny_model,
        tmp_path,
        "--n-gpu-layers",
        "all",
        module="tests.helpers.continuous",
    )
    assert continuous["offloaded_layers"] == 3
    assert continuous["first_text"] == first["text"]
    assert continuous["second_digest"] == back["stats"]["logits_digest"]
    assert continuous["second_text"] == back["text"]


def test_checkpoints_from_the_device_are_not_applied_on_the_cpu(
    lavapipe, tiny_model, tmp_path
):
    data_dir = tmp_path / "moves"
    gpu = _on(LAVAPIPE, data_dir, tiny_model, "all")
    cpu = _on(LAVAPIPE, data_dir, tiny_model, "0")
    root = gpu("new")["node"]
    first = gpu("send", root, "Tell me about trees.", *GREEDY)

    on_cpu = cpu("send", first["assistant_node"], "Why?", *GREEDY)
    # Cells the device computed are not what the CPU computes: the path is
    # reprocessed, and the reason names the device.
    assert on_cpu["stats"]["restored_tokens"] == 0
    assert on_cpu["stats"]["reprocessed_tokens"] == first["stats"]["context_tokens"]
    (reason,) = on_cpu["stats"]["fallbacks"]
    assert "made with its layers placed otherwise (with 3/3 on Vulkan0" in reason

    # The device's checkpoints are still there for the device.
    again = gpu("send", first["assistant_node"], "Why?", *GREEDY)
    assert again["stats"]["reprocessed_tokens"] == 0
    assert again["stats"]["fallbacks"] == []


def test_a_context_too_large_for_the_device_is_refused_with_both_figures(
    lavapipe, tmp_path
):
    # A tiny model claiming a 16M-token training context: 9M tokens of its
    # KV cache (256 bytes each) are 2.3 GB, more than lavapipe's 2 GiB, while
    # the machine's memory would hold them.
    model = write_tiny_model(tmp_path / "long.gguf", context_length=1 << 24)
    flags = ["--model", str(model), "--n-gpu-layers", "all", "--n-ctx", "9000000"]
    result = run_cli("--data-dir", tmp_path / "data", *flags, "info", env=LAVAPIPE)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert "A context of 9000000 tokens needs about 2.1 GiB of Vulkan0" in message
    assert "memory for its KV cache, but only 2.0 GiB is free there" in message


@pytest.mark.parametrize("lost", ["message", "reply"])
def test_a_span_that_shared_its_batch_is_decoded_again_exactly_on_the_device(
    lavapipe, tiny_model, tmp_path, lost
):
    """A message decoded in one batch with its reply's opening: on the device
    too, decoding it again alone (its batch made whole with filler), or the
    reply (its batch begun with the message's end), gives the cells it had,
    byte for byte (app/conversation/batches.py)."""
    result = _run(
        LAVAPIPE,
        tiny_model,
        tmp_path,
        lost,
        "--n-gpu-layers",
        "all",
        module="tests.helpers.batch_replay",
    )
    assert result["offloaded_layers"] == 3
    assert result["shared"]
    assert result["reprocessed"] == result["below_tokens"]
    assert result["same_checkpoints"] and result["record_kept"]
    # The control: on the device a batch's size changes its cells (on the CPU
    # the tiny model's message gives the same either way), so this test would
    # see a replay that did not make the shared batch whole.
    assert result["plain_batches_differ"]
