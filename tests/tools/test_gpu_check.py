"""``tools/gpu_check`` (issue 44), as far as it runs without a GPU.

The check's CPU mode runs every step the GPU run does except the placement
refusals (which need a device to refuse): the exactness verdicts must pass
and the JSON and table must hold every field the GPU run fills. Its device
path is tested in parts: the prepared folder (trimmed sources, bindings,
wheels) and the build flags. The lavapipe run and a bare Python 3.12 run on
the prepared folder are slower and were run by hand (the tool's docstring
says how).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tools.gpu_check import build, plan, prepare, report

ROOT = Path(__file__).resolve().parents[2]


def _run_check(tmp_path: Path, *flags: str) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.gpu_check",
            "run",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
            *flags,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    result = json.loads((out / report.RESULT_FILE).read_text())
    return done.returncode, result, (out / report.TABLE_FILE).read_text()


def test_cpu_mode_passes_every_check_and_writes_every_field(tmp_path):
    code, result, table = _run_check(tmp_path, "--backend", "cpu")
    failed = [s for s in result["steps"] if s["status"] != "ok"]
    assert failed == []
    assert code == 0
    assert result["passed"] is True
    names = {c["check"] for c in result["checks"]}
    for step in (
        "cold resume exact",
        "sliding window exact",
        "shared batch replay (message)",
        "shared batch replay (reply)",
    ):
        assert f"{step}: nothing reprocessed" in names or any(
            n.startswith(step) for n in names
        )
    assert "cold resume exact: logits equal" in names
    assert "sliding window exact: logits equal" in names
    assert all(c["passed"] is True for c in result["checks"])

    # The figures, with every field the table reads.
    lengths = [row["path_tokens"] for row in result["cold_resume"]]
    assert len(lengths) == 2 and lengths[0] < lengths[1]
    for row in result["cold_resume"]:
        assert row["restore_ms"] > 0 and row["reprocess_ms"] > 0
        assert row["speedup"] > 0 and row["bytes_read"] > 0
    # Two lengths, with flash attention off (Arbor's default) and on.
    flash = sorted(row["flash_attn"] for row in result["state_speed"])
    assert flash == [False, False, True, True]
    for row in result["state_speed"]:
        assert row["capture_gbps"] > 0 and row["restore_gbps"] > 0
        assert row["restored_logits_equal"] is True
    copy = result["copy"]
    assert copy["device_to_host_gbps"] > 0 and copy["host_to_device_gbps"] > 0
    assert copy["small_get_us"] > 0
    arbor = result["speed"]["main"]["arbor"]
    assert arbor["prompt_tps"] > 0 and arbor["gen_tps"] > 0
    assert result["status_note"].startswith("This tool's GPU path")
    for heading in ("| check |", "cold resume ms", "capture GB/s", "Copy rate"):
        assert heading in table
    assert "Arbor prompt tok/s" in table


def test_a_run_short_of_time_skips_steps_and_still_writes_its_report(tmp_path):
    # 10 s are kept for the report, a step needs 10 s to start: 22 s run
    # the first steps, then a step is killed at the deadline or skipped.
    code, result, table = _run_check(tmp_path, "--backend", "cpu", "--deadline", "22")
    statuses = {s["id"]: s["status"] for s in result["steps"]}
    assert statuses["devices"] == "ok"
    assert statuses["cold resume main 1024"] == "skipped"
    assert {"skipped", "timed out"} >= set(statuses.values()) - {"ok"}
    assert code == 1 and result["passed"] is False
    assert "not run" in table or "FAIL" in table


def test_build_flags_match_the_makefiles_build():
    cuda = build.backend_flags("cuda", "90")
    assert "-DGGML_BACKEND_DL=ON" in cuda and "-DBUILD_SHARED_LIBS=ON" in cuda
    assert "-DGGML_CUDA=ON" in cuda and "-DCMAKE_CUDA_ARCHITECTURES=90" in cuda
    assert "-DGGML_NATIVE=OFF" in cuda  # never a native build (AMX crashes)
    # Arbor's default, flash attention off, needs none of its kernels.
    assert "-DGGML_CUDA_FA=OFF" in cuda
    assert "-DGGML_CUDA_FA=ON" in build.backend_flags("cuda", "90", cuda_fa=True)
    cpu = build.backend_flags("cpu", "")
    assert "-DGGML_CUDA=OFF" in cpu and "-DGGML_VULKAN=OFF" in cpu
    assert "-DGGML_VULKAN=ON" in build.backend_flags("vulkan", "")


def _sdist() -> Path:
    default = Path.home() / ".cache/arbor/llama-sdist/llama_cpp_python-0.3.36.tar.gz"
    path = Path(os.environ.get("ARBOR_LLAMA_SDIST", default))
    if not path.exists():
        pytest.skip(f"no llama-cpp-python sdist at {path} (make setup fetches it)")
    return path


def test_prepare_packs_what_a_build_and_the_steps_need(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "demo-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("demo/__init__.py", "VALUE = 1\n")
    patches = sorted((ROOT / "packaging" / "llama").glob("*.patch"))
    dest = tmp_path / "prepared"
    manifest = prepare.prepare(dest, _sdist(), patches, wheels)

    with tarfile.open(dest / "llama-src.tar.gz") as tar:
        names = set(tar.getnames())
        cut = tar.extractfile("llama.cpp/tools/CMakeLists.txt")
        assert cut is not None
        tools_cmake = cut.read().decode()
        ggml_cmake = tar.extractfile("llama.cpp/ggml/src/CMakeLists.txt")
        assert ggml_cmake is not None
        patched = ggml_cmake.read().decode()
    for needed in (
        "CMakeLists.txt",
        "include/llama.h",
        "src/llama.cpp",
        "common/CMakeLists.txt",
        "vendor/CMakeLists.txt",
        "ggml/src/ggml-cuda/CMakeLists.txt",
        "ggml/src/ggml-cuda/ggml-cuda.cu",
        "ggml/src/ggml-vulkan/CMakeLists.txt",
        "ggml/src/ggml-cpu/CMakeLists.txt",
        "tools/llama-bench/llama-bench.cpp",
    ):
        assert f"llama.cpp/{needed}" in names, needed
    for left_out in (
        "docs/",
        "models/",
        "tests/",
        "ggml/src/ggml-metal/",
        "tools/server/",
    ):
        assert not any(n.startswith(f"llama.cpp/{left_out}") for n in names), left_out
    assert "add_subdirectory(llama-bench)" in tools_cmake
    assert "add_subdirectory(server)" not in tools_cmake
    assert "Arbor: no AMX variant" in patched  # the project's patches applied

    site = dest / "site"
    assert (site / "llama_cpp" / "llama_cpp.py").exists()
    assert not (site / "llama_cpp" / "lib").exists()  # the build links it
    assert (site / "demo" / "__init__.py").read_text() == "VALUE = 1\n"
    assert manifest["wheels"] == ["demo-1.0-py3-none-any.whl"]
    assert manifest["llama_cpp_python"] == "0.3.36"
    assert json.loads((dest / "manifest.json").read_text()) == manifest
    # The sources and bindings are small; the wheels add about 25 MiB, and
    # the working tree travels in the same 64 MiB.
    assert manifest["bytes"] < 8 << 20

    # The bindings are whole: they import, here with this machine's libraries
    # (the GPU machine's build links its own in).
    import llama_cpp

    env = os.environ | {
        "PYTHONPATH": str(site),
        "LLAMA_CPP_LIB_PATH": str(Path(llama_cpp.__file__).parent / "lib"),
    }
    done = subprocess.run(
        [sys.executable, "-c", "import llama_cpp; print(llama_cpp.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(site / "llama_cpp" / "__init__.py")


def test_the_wheels_cover_what_the_steps_import():
    script = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import tools.gpu_check.steps as s, tools.gpu_check.shapes, "
        "tools.gpu_check.copy_rate, tests.helpers.batch_replay, app.__main__\n"
        "import app.backend.engine, app.conversation.service, app.cli.commands\n"
        "import app.bench.cold_resume, app.bench.instrumented, app.bench.workload\n"
        "new = {m.split('.')[0] for m in sys.modules} - "
        "{m.split('.')[0] for m in before}\n"
        "print(' '.join(sorted(n for n in new if n not in sys.stdlib_module_names "
        "and not n.startswith('_'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    imported = set(done.stdout.split())
    provided = {
        "sqlalchemy",
        "typing_extensions",
        "jinja2",
        "markupsafe",
        "xxhash",
        "platformdirs",
        "diskcache",
        "gguf",
        "yaml",
        "tqdm",
    }
    assert len(provided) == len(prepare.WHEELS)
    # Ours, the machine's (numpy), the bindings, and compiled helpers.
    elsewhere = {"app", "storage", "tests", "tools", "numpy", "llama_cpp"}
    assert imported - provided - elsewhere <= {"cython_runtime"}


def test_a_second_run_can_take_only_some_steps_with_what_they_need(tmp_path):
    steps = plan.plan(
        plan.SIZES["gpu"],
        tmp_path,
        ["--n-gpu-layers", "all"],
        ["--n-gpu-layers", "0"],
        on_gpu=True,
        flash_attn_kernels=False,
        llama_bench="llama-bench",
    )
    ids = [s.id for s in steps]
    # The exactness checks first, the 8B shape's figures last.
    assert ids.index("placement refusals") < ids.index("cold resume main 2048")
    assert ids.index("llama-bench main") < ids.index("model big")
    big = [s.id for s in plan.only(steps, ["big"])]
    assert big[:2] == ["devices", "model big"]
    assert "cold resume big 32768" in big and "cold resume main 32768" not in big
    exact = [s.id for s in plan.only(steps, ["sliding window"])]
    assert exact == ["devices", "model swa", "sliding window exact"]


def test_a_gpu_run_without_the_gpu_stops_after_saying_so(tmp_path):
    # Asked for CUDA where llama.cpp finds no GPU (lavapipe is not used
    # unless named): the run stops after the devices step, not after
    # minutes of the 1B shape on the CPU.
    code, result, table = _run_check(tmp_path, "--backend", "cuda")
    assert code == 1
    assert [s["id"] for s in result["steps"]] == ["devices"]
    assert result["stopped"].startswith("llama.cpp found no cuda device")
    assert "STOPPED: llama.cpp found no cuda device" in table
