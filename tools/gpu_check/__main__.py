"""Command line of the GPU check (see the package's docstring for the why).

    python -m tools.gpu_check prepare              # here, with the network
    python3 -m tools.gpu_check run --build --out $OUT   # on the GPU machine
    python -m tools.gpu_check run --backend cpu --out /tmp/check  # here
    python -m tools.gpu_check build --backend cpu  # here: the sources build

The orchestration imports the standard library only; the steps (processes
of their own) import Arbor and llama_cpp.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tools.gpu_check import build, plan, report, runner

ROOT = runner.ROOT
PREPARED = ROOT / ".gpu-check"
WORK = ROOT / ".gpu-check-build"
SDIST = Path.home() / ".cache/arbor/llama-sdist/llama_cpp_python-0.3.36.tar.gz"
# Seconds of a run kept for the checks when the build comes first: the
# exactness checks on the 1B shape fit in it.
CHECKS_AT_LEAST = 150
NOTE = (
    "This tool's GPU path (the CUDA build and every step with all layers on a "
    "GPU) was prepared and tested on the CPU and on lavapipe only; a run on a "
    "real GPU is its first."
)


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand; the exit status is 0 when every check passed."""
    args = _parser().parse_args(argv)
    if args.command == "prepare":
        return _prepare(args)
    if args.command == "build":
        built = build.build(
            PREPARED,
            args.work,
            build.BACKENDS[build.BACKENDS.index(args.backend) :],
            args.budget,
            args.jobs,
            args.work / "build.log",
        )
        print(asdict(built))
        return 0 if built.backend else 1
    return _run(args)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_check")
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="write .gpu-check/ (needs the network)")
    prep.add_argument("--dest", type=Path, default=PREPARED)
    prep.add_argument(
        "--sdist", type=Path, default=Path(os.environ.get("ARBOR_LLAMA_SDIST", SDIST))
    )
    prep.add_argument("--wheels", type=Path, help="a folder of wheels to use")
    make = sub.add_parser("build", help="build llama.cpp from .gpu-check/")
    make.add_argument("--backend", choices=build.BACKENDS, default="cuda")
    make.add_argument("--work", type=Path, default=WORK)
    make.add_argument("--budget", type=float, default=3600)
    make.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    run = sub.add_parser("run", help="build if asked, then check and measure")
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--backend", choices=build.BACKENDS, default="cuda")
    run.add_argument(
        "--build", action="store_true", help="build from .gpu-check/ (GPU machine)"
    )
    run.add_argument(
        "--lib-dir",
        type=Path,
        help="use .gpu-check/'s bindings with the libraries here (no build)",
    )
    run.add_argument(
        "--size", choices=sorted(plan.SIZES), help="default: gpu if --build"
    )
    run.add_argument("--deadline", type=float, default=560, help="seconds in all")
    run.add_argument("--work", type=Path, default=WORK)
    run.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    run.add_argument(
        "--cuda-fa",
        action="store_true",
        help="build CUDA with flash attention's kernels (a longer build) and "
        "measure capture and restore with flash attention on too",
    )
    run.add_argument("--llama-bench", default="", help="a llama-bench to compare with")
    run.add_argument(
        "--only",
        default="",
        help="comma-separated words: run only the steps whose names hold one "
        "(e.g. big,flash for a second run)",
    )
    return parser


def _prepare(args: argparse.Namespace) -> int:
    from tools.gpu_check.prepare import prepare

    patches = sorted((ROOT / "packaging" / "llama").glob("*.patch"))
    manifest = prepare(args.dest, args.sdist, patches, args.wheels)
    print(
        f"{args.dest}: {manifest['bytes'] / 2**20:.1f} MiB "
        f"(limit {manifest['limit_bytes'] / 2**20:.0f} MiB with the tree), "
        f"{manifest['source_files']} source files, {len(manifest['wheels'])} wheels"
    )
    return 0


def _run(args: argparse.Namespace) -> int:
    started = time.monotonic()
    deadline = started + args.deadline
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "tool": "tools/gpu_check",
        "status_note": NOTE,
        "backend": args.backend,
        "deadline_s": args.deadline,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": _machine(),
        "steps": [],
    }

    def save(rec: dict[str, Any]) -> None:
        rec["elapsed_s"] = time.monotonic() - started
        report.write(out, rec)

    sites: list[Path] = []
    llama_bench = args.llama_bench
    if args.build:
        budget = deadline - time.monotonic() - CHECKS_AT_LEAST
        built = build.build(
            PREPARED,
            args.work,
            build.BACKENDS[build.BACKENDS.index(args.backend) :],
            budget,
            args.jobs,
            out / "build.log",
            cuda_fa=args.cuda_fa,
        )
        record["build"] = asdict(built)
        if not built.backend:
            record["backend"] = "none"
            save(record)
            print(report.table(report.summarize(record)))
            return 1
        record["backend"] = built.backend
        llama_bench = built.llama_bench
        sites = [args.work / "site", PREPARED / "site"]
    elif args.lib_dir:
        sites = [
            build.stage_package(PREPARED, args.work, args.lib_dir),
            PREPARED / "site",
        ]
    backend = record["backend"]
    on_gpu = backend != "cpu"
    record["on_gpu"] = on_gpu
    extra = {}
    if backend == "vulkan" and not args.build:
        # lavapipe: llama.cpp skips CPU-type Vulkan devices unless named.
        extra["GGML_VK_VISIBLE_DEVICES"] = "0"
    cuda_libs = build.cuda_library_path() if backend == "cuda" else ""
    if cuda_libs:
        extra["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (cuda_libs, os.environ.get("LD_LIBRARY_PATH", "")) if p
        )
    env = runner.child_env(sites, extra)
    # Real models' shapes on a GPU build; a build that fell back to the CPU
    # alone could not run them in minutes.
    size = args.size or ("gpu" if args.build and on_gpu else "small")
    record["size"] = size
    # Flash attention runs wherever its kernels were built: the installed
    # wheel here, a CUDA build only when asked for.
    flash_kernels = args.cuda_fa if backend == "cuda" else True
    gpu_flags = ["--n-gpu-layers", "all" if on_gpu else "0"]
    steps = plan.plan(
        plan.SIZES[size],
        args.work,
        gpu_flags,
        ["--n-gpu-layers", "0"],
        on_gpu,
        flash_kernels,
        llama_bench,
    )
    steps = plan.only(steps, [w for w in args.only.split(",") if w])
    # "devices" first: without the GPU it was built for, the rest would
    # only measure the CPU, slowly, on the GPU machine's minutes.
    runner.run_steps(steps[:1], env, deadline, record, save)
    found = record["steps"][0].get("result", {}).get("devices", [])
    gpus = [d for d in found if d["kind"] != "cpu"]
    record["device"] = ", ".join(f"{d['name']} ({d['description']})" for d in gpus)
    if on_gpu and not gpus:
        record["stopped"] = (
            f"llama.cpp found no {backend} device "
            f"(backends loaded: {record['steps'][0].get('result', {}).get('backends')})"
        )
    else:
        runner.run_steps(steps[1:], env, deadline, record, save)
    save(record)
    summary = report.summarize(record)
    print(report.table(summary))
    return 0 if summary["passed"] else 1


def _machine() -> dict[str, Any]:
    gpu = ""
    if shutil.which("nvidia-smi"):
        try:
            gpu = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=name,driver_version,memory.total,compute_cap",
                    "--format=csv,noheader",
                ],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            gpu = "nvidia-smi did not answer"
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "gpu": gpu,
        "nvcc": shutil.which("nvcc") or "",
    }


if __name__ == "__main__":
    sys.exit(main())
