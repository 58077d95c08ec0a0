"""A model on ``arbor worker``s (issue 25, the client side): ``--worker
HOST:PORT`` places the layers on the workers' devices, split by their free
memory or by hand (``--worker-layers``), ``arbor info`` says where,
checkpoints made there restore exactly there and nowhere else, and a worker
that cannot be used is a one-line error, never an abort.

Every model loaded with workers is loaded by an ``arbor`` process (or
``tests.helpers.continuous``), never by pytest's: llama.cpp aborts the process that
registered a worker when that worker fails, and this one must survive that.
The workers are ``arbor worker`` processes on 127.0.0.1, two for the module.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.backend import rpc_client
from app.backend.errors import InvalidSetting
from app.backend.rpc_worker import hello
from app.backend.settings import AUTO_GPU_LAYERS, BackendSettings
from tests.conftest import CliResult, run_cli
from tests.helpers.workers import free_port, free_ports, running_worker

GREEDY = ("--temperature", "0", "--max-tokens", "12")


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[str, str]]:
    """Two workers serving this machine's CPU: their addresses."""
    first, second = (f"127.0.0.1:{port}" for port in free_ports(2))
    with running_worker(first), running_worker(second):
        yield first, second


def _arbor(data_dir: Path, model: Path, *workers: str):
    """``arbor`` on ``data_dir`` and ``model``, with ``--worker`` for each of
    ``workers``: the command's result."""
    flags = [flag for worker in workers for flag in ("--worker", worker)]

    def call(*args: str | int) -> CliResult:
        return run_cli("--data-dir", data_dir, "--model", model, *flags, *args)

    return call


def _json(call, *args: str | int) -> Any:
    return call(*args).json


def _held(info: Any) -> dict[str, list[int]]:
    """The layers each device holds, by its worker's address ("CPU" here)."""
    return {
        h["where"] if h["device"].startswith("RPC") else "CPU": h["layers"]
        for h in info["model"]["layer_holders"]
    }


def test_a_worker_of_this_install_speaks_the_protocol_the_client_expects(workers):
    major, minor, _patch = map(int, hello(*_host_port(workers[0])).split("."))
    assert (major, minor) == rpc_client.PROTOCOL


def test_the_layers_are_placed_across_both_workers(workers, tiny_model, data_dir):
    info = _json(_arbor(data_dir, tiny_model, *workers), "info")
    model = info["model"]
    # Every layer, the output layer included, is on a worker's device.
    assert model["offloaded_layers"] == model["offloadable_layers"] == 3
    holders = {h["where"]: h for h in model["layer_holders"]}
    assert set(holders) == set(workers), model["layer_holders"]
    # Split by the workers' memory (equal here): layers 0-1, then the output.
    assert holders[workers[0]]["layers"] == [0, 1]
    assert holders[workers[1]]["layers"] == [2]
    assert all(h["bytes"] > 0 for h in holders.values())
    assert all(h["device"].startswith("RPC") for h in holders.values())
    # The workers' devices are llama.cpp devices of this process now.
    rpc = [d for d in info["devices"] if d["backend"] == "RPC"]
    assert {d["description"] for d in rpc} == set(workers)
    # The profile names what holds each run of layers, and no repacking.
    signature = info["profile"]["workers"]
    assert signature.startswith(f"layers 0-1 on {workers[0]} device 0 (")
    assert f"layer 2 on {workers[1]} device 0 (" in signature
    assert signature.endswith("; weights not repacked")


def test_a_split_by_hand_gives_each_worker_exactly_its_count(
    workers, tiny_model, data_dir
):
    first, second = workers
    # The split by free memory gives the first worker layers 0-1 (above);
    # by hand, the first holds one layer, the second the next and the output.
    info = _json(
        _arbor(data_dir, tiny_model, *workers), "--worker-layers", "1,2", "info"
    )
    assert _held(info) == {first: [0], second: [1, 2]}
    assert info["model"]["offloaded_layers"] == 3
    assert info["profile"]["workers"].startswith(
        f"layer 0 on {first} device 0 (",
    )
    # Fewer than the model has: this computer keeps the first layers; a
    # worker given 0 holds none.
    info = _json(
        _arbor(data_dir, tiny_model, *workers), "--worker-layers", "1,1", "info"
    )
    assert _held(info) == {"CPU": [0], first: [1], second: [2]}
    info = _json(
        _arbor(data_dir, tiny_model, *workers), "--worker-layers", "0,3", "info"
    )
    assert _held(info) == {second: [0, 1, 2]}


def test_a_worker_with_several_devices_shares_its_count_evenly():
    def worker(address: str, n_devices: int) -> rpc_client.Worker:
        return rpc_client.Worker(
            address,
            "7.0.0",
            tuple(
                rpc_client.WorkerDevice(f"RPC{i}", i, 0, 2**30)
                for i in range(n_devices)
            ),
        )

    workers = [worker("a:1", 3), worker("b:2", 1), worker("c:3", 2)]
    # 10 over three devices: 4, 3, 3; 0 leaves both of c's devices empty.
    assert rpc_client.device_shares(workers, [10, 5, 0]) == [4, 3, 3, 5, 0, 0]


def test_more_layers_by_hand_than_the_model_has_is_a_one_line_error(
    workers, tiny_model, data_dir
):
    result = _arbor(data_dir, tiny_model, *workers)("--worker-layers", "2,2", "info")
    _one_line_error(
        result, "add up to 4", "tiny.gguf has (3 layers: 0-1 and the output)"
    )


def test_checkpoints_of_another_split_are_not_applied(workers, tiny_model, data_dir):
    by_memory = _arbor(data_dir, tiny_model, *workers)
    root = _json(by_memory, "new")["node"]
    first = _json(by_memory, "send", root, "Tell me about trees.", *GREEDY)
    # The same workers, split otherwise: another profile (its placement
    # signature differs), so what the split by memory made is decoded again.
    moved = _json(
        by_memory,
        "--worker-layers",
        "1,2",
        "send",
        first["assistant_node"],
        "Why?",
        *GREEDY,
    )
    assert moved["stats"]["restored_tokens"] == 0
    assert moved["stats"]["reprocessed_tokens"] == first["stats"]["context_tokens"]
    assert any(
        f"on workers (layers 0-1 on {workers[0]}" in f
        for f in moved["stats"]["fallbacks"]
    ), moved["stats"]["fallbacks"]
    # Under the same split by hand, its own checkpoints restore.
    again = _json(
        by_memory,
        "--worker-layers",
        "1,2",
        "send",
        moved["assistant_node"],
        "Why?",
        *GREEDY,
    )
    assert again["stats"]["reprocessed_tokens"] == 0
    assert again["stats"]["fallbacks"] == []


def test_cold_resume_on_workers_is_exact(workers, tiny_model, tmp_path):
    """A branched conversation on the workers, each step a new process: no
    reprocessing, and the logits of continuous decoding on the same workers."""
    (tmp_path / "cold").mkdir()
    on_workers = _arbor(tmp_path / "cold", tiny_model, *workers)
    root = _json(on_workers, "new", "--system", "Answer briefly.")["node"]
    first = _json(on_workers, "send", root, "Tell me about trees.", *GREEDY)
    branch = _json(on_workers, "send", root, "Tell me about rivers.", *GREEDY)
    back = _json(
        on_workers, "send", first["assistant_node"], "And about branches?", *GREEDY
    )
    assert branch["stats"]["reprocessed_tokens"] == 0
    assert back["stats"]["reprocessed_tokens"] == 0
    assert back["stats"]["fallbacks"] == []
    assert back["stats"]["restored_tokens"] == first["stats"]["context_tokens"]

    # The same turns in one process on the same workers, never restoring.
    flags = [flag for worker in workers for flag in ("--worker", worker)]
    continuous = run_cli(
        tiny_model, tmp_path, *flags, module="tests.helpers.continuous"
    ).json
    assert continuous["offloaded_layers"] == 3
    assert continuous["profile"]["workers"]
    assert continuous["first_text"] == first["text"]
    assert continuous["second_digest"] == back["stats"]["logits_digest"]
    assert continuous["second_text"] == back["text"]


def test_checkpoints_made_under_another_placement_are_not_applied(
    workers, tiny_model, data_dir
):
    here = _arbor(data_dir, tiny_model)
    on_workers = _arbor(data_dir, tiny_model, *workers)
    # A run on this machine alone names no workers in its profile (so that
    # the checkpoints made before workers existed keep their profile).
    assert "workers" not in _json(here, "info")["profile"]

    root = _json(here, "new")["node"]
    first = _json(here, "send", root, "Tell me about trees.", *GREEDY)
    moved = _json(on_workers, "send", first["assistant_node"], "Why?", *GREEDY)
    # Made here, not applied on the workers: the path is decoded again there.
    assert moved["stats"]["restored_tokens"] == 0
    assert moved["stats"]["reprocessed_tokens"] == first["stats"]["context_tokens"]
    assert any("without workers" in f for f in moved["stats"]["fallbacks"])

    # And back: what the workers made is not applied here.
    back = _json(here, "send", moved["assistant_node"], "Why?", *GREEDY)
    assert back["stats"]["restored_tokens"] == first["stats"]["context_tokens"]
    assert back["stats"]["reprocessed_tokens"] > 0
    assert any("on workers" in f for f in back["stats"]["fallbacks"])


def test_models_loaded_together_in_one_process_share_the_workers(
    workers, tiny_model, data_dir
):
    # The benchmark holds two engines at once: the second finds the workers
    # connected to this process (a worker serves one client), and uses them.
    result = _arbor(data_dir, tiny_model, *workers)("bench", "--quick")
    assert result.returncode == 0, result.stderr
    assert "Cold resume" in result.stdout


def test_the_workers_setting_is_stored_and_read_back():
    settings = BackendSettings(
        workers=("10.0.0.2:050052", "gpu-box:50052"), worker_layers=(20, 11)
    )
    assert settings.workers == ("10.0.0.2:50052", "gpu-box:50052")
    # The preferences keep it as JSON, where a tuple is a list.
    stored = json.loads(json.dumps(settings.as_dict()))
    assert stored["worker_layers"] == [20, 11]
    assert BackendSettings.from_dict(stored) == settings


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"worker_layers": (3,)}, "1 count for 0 workers"),
        ({"workers": ("a:1", "b:2"), "worker_layers": (3,)}, "1 count for 2 workers"),
        ({"workers": ("a:1",), "worker_layers": (-1,)}, "between 0"),
        ({"workers": ("a:1",), "worker_layers": (True,)}, "whole number"),
        ({"workers": ("a:1", "b:2"), "worker_layers": (0, 0)}, "at least one worker"),
        ({"workers": ("a:1",), "worker_layers": 3}, "a list of counts"),
        (
            {"workers": ("a:1",), "worker_layers": (3,), "n_gpu_layers": 5},
            "or make them 3",
        ),
    ],
)
def test_a_split_by_hand_is_checked(given, says):
    with pytest.raises(InvalidSetting, match=says):
        BackendSettings(**given)


def test_a_split_by_hand_says_how_many_leave_this_computer():
    # n_gpu_layers left at auto, or the same count said twice.
    for n_gpu_layers in (AUTO_GPU_LAYERS, 4):
        settings = BackendSettings(
            workers=("a:1", "b:2"), worker_layers=[3, 1], n_gpu_layers=n_gpu_layers
        )
        assert settings.worker_layers == (3, 1)


def _one_line_error(result: CliResult, *expected: str) -> None:
    """The error line of a command that failed as it should: exit status 1
    (not an abort), one line on stderr, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("arbor: error: ")
    for text in expected:
        assert text in lines[0], lines[0]


def test_a_port_with_no_worker_is_a_one_line_error(tiny_model, data_dir):
    nobody = f"127.0.0.1:{free_port()}"
    result = _arbor(data_dir, tiny_model, nobody)("info")
    _one_line_error(result, f"Worker {nobody}: nothing listens there")


def test_a_busy_worker_is_a_one_line_error_not_a_hang(tiny_model, data_dir):
    address = f"127.0.0.1:{free_port()}"
    # Another client holds the worker (it serves one at a time): it said
    # hello, as llama.cpp's client does first, and was answered.
    with (
        running_worker(address),
        socket.create_connection(_host_port(address), timeout=5) as other,
    ):
        other.sendall(bytes([14]) + (24).to_bytes(8, "little") + bytes(24))
        assert other.recv(64)
        result = _arbor(data_dir, tiny_model, address)("info")
    _one_line_error(result, f"Worker {address}", "busy")


def test_a_worker_named_twice_is_refused(tiny_model, data_dir):
    address = f"127.0.0.1:{free_port()}"
    same = _arbor(data_dir, tiny_model, address, address)("info")
    assert same.returncode == 2
    assert "named twice" in same.stderr
    # Two names of one worker would connect twice: the second would wait.
    port = address.rsplit(":", 1)[1]
    with running_worker(address):
        twins = _arbor(data_dir, tiny_model, address, f"localhost:{port}")("info")
    _one_line_error(twins, "are the same worker")


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--worker", "[::1]:50052"), "IPv6"),
        (("--worker", "host"), "HOST:PORT"),
        (("--worker", "host:0"), "HOST:PORT"),
        (("--worker", "host:50052", "--n-gpu-layers", "0"), "at least one layer"),
        (("--worker", "h:1", "--worker-layers", "2,1"), "2 counts for 1 worker"),
        (("--worker-layers", "2"), "1 count for 0 workers"),
        (("--worker", "h:1", "--worker-layers", "2,x"), "separated by commas"),
        (("--worker", "h:1", "--worker-layers", "0"), "at least one worker"),
    ],
)
def test_a_bad_worker_flag_is_a_usage_error(flags, says):
    result = run_cli(*flags, "info")
    assert result.returncode == 2
    assert says in result.stderr
    assert "Traceback" not in result.stderr


def _host_port(address: str) -> tuple[str, int]:
    host, _colon, port = address.rpartition(":")
    return host, int(port)
