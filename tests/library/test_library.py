"""The model library through the real stack: ``arbor models …`` processes,
the real ``huggingface_hub`` client, and a Hub of our own on 127.0.0.1
(``tests/helpers/fake_hub.py``) serving real GGUF files.

Covered: search, pull (JSON with path and sha256, then ``arbor --model PATH
info``), ``kill -9`` mid-download and a second pull that fetches only the
rest, a file whose bytes do not match the advertised sha256 (refused and
removed), a gated repository (401 → one line naming HF_TOKEN; with the
token it downloads), a disk too small (refused before a byte is fetched),
list / add / rm, and the curated catalog's shape.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.library import names
from app.library.catalog import CatalogError, load_catalog
from app.library.download import NotEnoughSpace, pull
from app.library.fit import assess
from app.library.hub import check_repo_id
from app.platform.starter_model import starter_model_path
from tests.conftest import ROOT, CliResult
from tests.helpers.fake_hub import FakeFile, FakeHub, HubServer
from tests.helpers.fault_harness import mount_tmpfs, unmount

REPO = "arbor-test/Tiny-Chat-GGUF"
FILE = "Tiny-Chat-Q8_0.gguf"


@pytest.fixture
def hub(tiny_model: Path) -> Iterator[HubServer]:
    """A Hub serving the tiny model in two repositories, one of them gated."""
    fake = FakeHub()
    fake.add(REPO, {FILE: tiny_model, "README.md": tiny_model}, downloads=50)
    fake.add(
        "arbor-test/Tiny-Chat-Other-GGUF",
        {"Tiny-Chat-Q4_K_M.gguf": tiny_model, "Tiny-Chat-F16.gguf": tiny_model},
        downloads=10,
    )
    fake.add("arbor-test/Gated-GGUF", {"Gated-Q4_K_M.gguf": tiny_model}, gated=True)
    with HubServer(fake) as server:
        yield server


def models_cli(
    server_url: str, data_dir: Path, *args: str, env: dict[str, str] | None = None
) -> CliResult:
    """``arbor --data-dir DATA models ARGS`` with ``HF_ENDPOINT`` at the test Hub."""
    return CliResult(
        subprocess.run(
            [sys.executable, "-m", "app", "--data-dir", str(data_dir), "models", *args],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
            env=_env(server_url, env),
        )
    )


def _env(server_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HF_HOME")}
    env.update(HF_ENDPOINT=server_url, HF_HUB_DISABLE_TELEMETRY="1", **(extra or {}))
    return env


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(result: CliResult) -> str:
    """The one error line (download progress lines may come before it)."""
    assert result.returncode == 1, result.stdout
    assert "Traceback" not in result.stderr
    errors = [
        line for line in result.stderr.splitlines() if line.startswith("arbor: error:")
    ]
    assert len(errors) == 1, result.stderr
    assert result.stderr.rstrip().endswith(errors[0])
    return errors[0]


def test_search_lists_repositories_and_their_files(hub, data_dir):
    found = models_cli(hub.url, data_dir, "search", "tiny-chat").json
    repos = [r["repo"] for r in found["repositories"]]
    assert repos == [REPO, "arbor-test/Tiny-Chat-Other-GGUF"]  # most downloaded first
    first = found["repositories"][0]
    size = (hub.hub.repos[REPO].files[FILE]).size
    # Only the model files: the README is no GGUF.
    assert first["files"] == [
        {
            "file": FILE,
            "size": size,
            "quantization": "Q8_0",
            "sha256": hub.hub.repos[REPO].files[FILE].sha256,
            "parts": [FILE],
            "fit": first["files"][0]["fit"],
        }
    ]
    assert first["files"][0]["fit"]["verdict"] == "fits"
    other = found["repositories"][1]["files"]
    assert sorted(f["quantization"] for f in other) == ["F16", "Q4_K_M"]


def test_pull_prints_path_and_sha256_and_the_model_loads(hub, data_dir, tiny_model):
    pulled = models_cli(hub.url, data_dir, "pull", REPO, FILE).json
    path = Path(pulled["path"])
    assert path == data_dir / "models" / "arbor-test" / "Tiny-Chat-GGUF" / FILE
    assert pulled["sha256"] == _sha256(tiny_model) == _sha256(path)
    assert pulled["fetched_bytes"] == tiny_model.stat().st_size
    assert not list(path.parent.glob("*.part*"))

    command = [sys.executable, "-m", "app", "--data-dir", data_dir, "--model", path]
    info = subprocess.run(
        [*command, "info"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["model"]["path"] == str(path)

    listed = models_cli(hub.url, data_dir, "list").json["models"]
    mine = next(m for m in listed if m["path"] == str(path))
    assert mine["source"] == "downloaded"
    assert mine["sha256"] == pulled["sha256"]
    assert mine["repo"] == REPO

    # Pulling again fetches nothing.
    sent = hub.hub.bytes_sent
    again = models_cli(hub.url, data_dir, "pull", REPO, FILE).json
    assert again["fetched_bytes"] == 0
    assert hub.hub.bytes_sent == sent


def test_a_repository_with_one_model_file_needs_no_file_name(hub, data_dir):
    pulled = models_cli(hub.url, data_dir, "pull", REPO).json
    assert Path(pulled["path"]).name == FILE
    several = models_cli(hub.url, data_dir, "pull", "arbor-test/Tiny-Chat-Other-GGUF")
    line = _one_line(several)
    assert "several GGUF files" in line
    assert "Tiny-Chat-Q4_K_M.gguf" in line


def test_kill_9_mid_download_then_pull_fetches_only_the_rest(hub, data_dir):
    # A real model big enough to be caught mid-download: the starter (98 MB).
    model = starter_model_path()
    assert model is not None, "make test installs the starter model"
    hub.hub.add("arbor-test/Starter-GGUF", {model.name: model})
    size = model.stat().st_size
    hub.hub.rate = 25_000_000  # bytes/s: about 4 s for the whole file
    part = data_dir / "models" / "arbor-test" / "Starter-GGUF" / (model.name + ".part")
    command = ["pull", "arbor-test/Starter-GGUF", model.name]
    process = subprocess.Popen(
        [sys.executable, "-m", "app", "--data-dir", str(data_dir), "models", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=_env(hub.url),
    )
    try:
        deadline = time.monotonic() + 60
        while not (part.exists() and part.stat().st_size > size // 4):
            assert time.monotonic() < deadline, "the download did not start"
            assert process.poll() is None, process.communicate()
            time.sleep(0.02)
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
    kept = part.stat().st_size
    assert 0 < kept < size

    hub.hub.rate = 0
    pulled = models_cli(hub.url, data_dir, *command).json
    assert pulled["sha256"] == _sha256(model)
    assert pulled["fetched_bytes"] == size - kept
    resumed = hub.hub.downloads[-1]
    assert resumed.range == f"bytes={kept}-"
    assert resumed.sent == size - kept
    assert not part.exists()


def test_bytes_that_do_not_match_the_sha256_are_refused_and_removed(
    hub, data_dir, tiny_model
):
    files = hub.hub.repos[REPO].files
    files[FILE] = FakeFile(tiny_model, sha256="0" * 64)
    result = models_cli(hub.url, data_dir, "pull", REPO, FILE)
    assert "does not match its sha256" in _one_line(result)
    folder = data_dir / "models" / "arbor-test" / "Tiny-Chat-GGUF"
    assert list(folder.iterdir()) == []
    assert models_cli(hub.url, data_dir, "list").json["models"][:-1] == []


def test_a_gated_repository_says_to_set_hf_token(hub, data_dir):
    refused = models_cli(hub.url, data_dir, "pull", "arbor-test/Gated-GGUF")
    assert "HF_TOKEN" in _one_line(refused)
    pulled = models_cli(
        hub.url,
        data_dir,
        "pull",
        "arbor-test/Gated-GGUF",
        env={"HF_TOKEN": hub.hub.token},
    ).json
    assert Path(pulled["path"]).is_file()


def test_missing_repository_file_and_network_give_one_line(hub, data_dir):
    assert "no such repository" in _one_line(
        models_cli(hub.url, data_dir, "pull", "arbor-test/Nothing", "x.gguf")
    )
    assert "no such file" in _one_line(
        models_cli(hub.url, data_dir, "pull", REPO, "Nothing-Q4_0.gguf")
    )
    # A port nobody listens on: the network is down.
    assert "cannot reach the Hub" in _one_line(
        models_cli("http://127.0.0.1:9", data_dir, "pull", REPO, FILE)
    )


def test_a_disk_too_small_is_refused_before_the_download_starts(
    hub, tmp_path, tiny_model
):
    disk = tmp_path / "small-disk"
    reason = mount_tmpfs(disk, "256k")
    if reason is not None:
        pytest.skip(f"needs a small tmpfs: {reason}")
    try:
        with pytest.raises(NotEnoughSpace, match="not enough disk space"):
            pull(REPO, [FILE], disk / "models", endpoint=hub.url)
        assert hub.hub.bytes_sent == 0
        assert not list(disk.rglob("*.part"))
    finally:
        unmount(disk)


def test_add_by_path_and_remove(hub, data_dir, tiny_model):
    added = models_cli(hub.url, data_dir, "add", str(tiny_model)).json
    assert added["path"] == str(tiny_model)
    assert added["source"] == "added"
    # Forgotten, not deleted: the user's own file stays.
    removed = models_cli(hub.url, data_dir, "rm", str(tiny_model)).json
    assert removed == {"removed": str(tiny_model), "bytes_freed": 0}
    assert tiny_model.is_file()

    pulled = models_cli(hub.url, data_dir, "pull", REPO, FILE).json
    removed = models_cli(hub.url, data_dir, "rm", FILE).json
    assert removed["bytes_freed"] == tiny_model.stat().st_size
    assert not Path(pulled["path"]).exists()
    assert not (data_dir / "models" / "arbor-test").exists()
    assert "starter" in _one_line(
        models_cli(hub.url, data_dir, "rm", "SmolLM2 135M Instruct")
    ) or "no installed model" in _one_line(
        models_cli(hub.url, data_dir, "rm", "SmolLM2 135M Instruct")
    )


def test_the_catalog_is_well_formed():
    catalog = load_catalog()
    assert catalog.written
    time.strptime(catalog.written, "%Y-%m-%d")
    assert len(catalog.entries) >= 8
    families = {e.family for e in catalog.entries}
    assert {"Qwen3", "Llama 3", "Gemma 3", "Phi", "Mistral", "SmolLM3"} <= families
    for entry in catalog.entries:
        check_repo_id(entry.repo)
        assert names.is_gguf(entry.file), entry.id
        assert names.quantization(entry.file) == entry.quantization, entry.id
        assert entry.size_bytes > 100_000_000, entry.id
        assert 0 < entry.kv_bytes_per_token < 1_000_000, entry.id
        assert entry.context_length >= 4096, entry.id
        assert entry.license and entry.description and entry.parameters
    sizes = [e.size_bytes for e in catalog.entries]
    assert sizes == sorted(sizes)  # smallest first
    assert catalog.welcome_order()
    qwen = catalog.find("Qwen3-4B")
    assert qwen is not None
    assert catalog.for_file(qwen.repo, qwen.file) is qwen


def test_a_malformed_catalog_is_named(tmp_path):
    good = json.loads(Path(ROOT / "resources/models/catalog.json").read_text())
    broken = dict(good, models=[dict(good["models"][0], size_bytes="big")])
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(CatalogError, match="size_bytes"):
        load_catalog(path)
    missing = dict(
        good, models=[{k: v for k, v in good["models"][0].items() if k != "repo"}]
    )
    path.write_text(json.dumps(missing))
    with pytest.raises(CatalogError, match="lacks 'repo'"):
        load_catalog(path)


@pytest.mark.parametrize(
    ("filename", "quant", "name", "split"),
    [
        ("Qwen3-4B-Q4_K_M.gguf", "Q4_K_M", "Qwen3 4B", None),
        ("gemma-3-270m-q4_k_m.gguf", "Q4_K_M", "gemma 3 270m", None),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1", "SmolLM2 135M Instruct", None),
        (
            "Llama-3.3-70B-Instruct-IQ2_XXS.gguf",
            "IQ2_XXS",
            "Llama 3.3 70B Instruct",
            None,
        ),
        ("model-bf16-00002-of-00003.gguf", "BF16", "model", (2, 3)),
        ("Phi-4-mini-instruct-GGUF.gguf", None, "Phi 4 mini instruct", None),
    ],
)
def test_file_names_tell_quantization_name_and_parts(filename, quant, name, split):
    assert names.quantization(filename) == quant
    assert names.display_name(filename) == name
    assert names.split_part(filename) == split


def test_split_models_are_every_part():
    assert names.split_siblings("m-Q8_0-00001-of-00003.gguf") == [
        "m-Q8_0-00001-of-00003.gguf",
        "m-Q8_0-00002-of-00003.gguf",
        "m-Q8_0-00003-of-00003.gguf",
    ]


def test_fit_counts_the_file_and_the_kv_cache():
    gib = 1024**3
    small = assess(2 * gib, 4096, 128 * 1024, have_bytes=16 * gib)
    assert small.verdict == "fits" and not small.estimated
    assert small.need_bytes == 2 * gib + 4096 * 128 * 1024 + 512 * 1024**2
    assert assess(11 * gib, 4096, 128 * 1024, have_bytes=16 * gib).verdict == "tight"
    too_big = assess(20 * gib, 4096, None, have_bytes=16 * gib)
    assert too_big.verdict == "too big" and too_big.estimated
    assert not too_big.fits


def test_fit_counts_a_gpu_beside_the_memory():
    gib = 1024**3
    # 8 GiB of RAM alone: a 9 GiB model is too big.
    assert assess(9 * gib, 4096, 128 * 1024, have_bytes=8 * gib).verdict == "too big"
    # With a 24 GiB GPU (21.6 usable after the headroom) it fits there whole.
    on_gpu = assess(9 * gib, 4096, 128 * 1024, have_bytes=8 * gib, gpu_bytes=24 * gib)
    assert on_gpu.verdict == "fits" and on_gpu.gpu == "all"
    assert on_gpu.describe().endswith("; all on the GPU)")
    # With an 8 GiB GPU it is split between the GPU and the memory.
    split = assess(9 * gib, 4096, 128 * 1024, have_bytes=8 * gib, gpu_bytes=8 * gib)
    assert split.gpu == "part" and split.fits
    assert assess(1 * gib, 4096, None, have_bytes=8 * gib).gpu == ""


def test_the_cli_uses_the_models_folder_chosen_in_settings(hub, data_dir, tmp_path):
    from app.preferences import load_preferences, save_preferences
    from storage.db import open_database

    chosen = tmp_path / "chosen"
    db = open_database(data_dir / "arbor.sqlite3")
    save_preferences(db, replace(load_preferences(db), models_dir=str(chosen)))
    db.close()
    pulled = models_cli(hub.url, data_dir, "pull", REPO, FILE).json
    assert Path(pulled["path"]).is_relative_to(chosen)
    assert models_cli(hub.url, data_dir, "list").json["models_dir"] == str(chosen)
    # ARBOR_MODELS_DIR comes first, --models-dir before both.
    env = tmp_path / "from-env"
    listed = models_cli(hub.url, data_dir, "list", env={"ARBOR_MODELS_DIR": str(env)})
    assert listed.json["models_dir"] == str(env)
    flag = tmp_path / "from-flag"
    command = [sys.executable, "-m", "app", "--data-dir", data_dir, "models"]
    result = CliResult(
        subprocess.run(
            [*command, "--models-dir", flag, "list"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
            env=_env(hub.url, {"ARBOR_MODELS_DIR": str(env)}),
        )
    )
    assert result.json["models_dir"] == str(flag)
