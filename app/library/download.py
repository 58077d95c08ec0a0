"""Download a model file from the Hub: resumable, checked, and stoppable.

``huggingface_hub`` gives the file's metadata (size, LFS sha256, the commit,
the address after redirects) and streams it, with its own retries on a
flaky connection. It does not keep a partial file across processes, so the
bytes go to ``<file>.part`` beside the destination, and a later pull — after
Pause, a crash or ``kill -9`` — asks only for the rest (an HTTP range). A
``<file>.part.json`` remembers which version of the file the part belongs
to, so a file changed on the Hub meanwhile starts over instead of mixing two
versions. The sha256 is checked before the file takes its final name: a file
that does not match is removed, never used.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from app.library.hub import HubError, check_repo_id, hub_errors
from app.library.units import format_bytes

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# Room left on the disk beyond the file itself (the database grows too).
_DISK_MARGIN = 64 * 1024**2
# How often progress is reported, at most (seconds).
_PROGRESS_INTERVAL = 0.25
# The window over which speed is averaged (seconds).
_SPEED_WINDOW = 5.0
# What huggingface_hub reads before handing a chunk over (its default, 10 MiB,
# is progress every few seconds on a slow line, and that much lost to a crash).
_CHUNK = 1024 * 1024


class DownloadStopped(Exception):
    """The caller asked the download to stop; the part stays for a resume."""


class NotEnoughSpace(HubError):
    """The disk cannot hold what is left to download."""


class ChecksumMismatch(HubError):
    """The downloaded bytes are not the file the Hub advertised."""


@dataclass(frozen=True)
class Progress:
    """Where a download stands: bytes of all parts, speed, phase."""

    filename: str
    done: int
    total: int | None
    speed: float
    phase: str = "downloading"  # or "verifying"

    @property
    def eta_seconds(self) -> float | None:
        """Seconds left at the current speed, or None when unknown."""
        if self.total is None or self.speed <= 0:
            return None
        return max(self.total - self.done, 0) / self.speed


@dataclass(frozen=True)
class PulledFile:
    """A downloaded and verified model: the first part's path and sha256."""

    path: Path
    sha256: str
    size: int
    repo: str
    filename: str
    commit: str | None
    fetched_bytes: int


@dataclass(frozen=True)
class _Remote:
    part: str
    url: str
    size: int
    sha256: str
    commit: str | None


ProgressCallback = Callable[[Progress], None]


def destination(models_dir: Path, repo: str, filename: str) -> Path:
    """Where ``repo``'s ``filename`` is kept inside ``models_dir``."""
    check_repo_id(repo)
    if filename.startswith("/") or ".." in Path(filename).parts:
        raise HubError(f"{filename!r} is not a file name inside a repository")
    return models_dir.joinpath(*repo.split("/"), filename)


def pull(
    repo: str,
    parts: list[str],
    models_dir: Path,
    *,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    on_progress: ProgressCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> PulledFile:
    """Download ``parts`` of ``repo`` (one file, or every part of a split
    model) into ``models_dir``, resuming what an earlier pull left.

    Raises
    ------
    HubError
        With a one-line reason: network, 401/403/404, ``NotEnoughSpace``
        (checked before anything is fetched), ``ChecksumMismatch``.
    DownloadStopped
        When ``should_stop`` returned True; the parts stay for a resume.
    """
    remotes = [_remote(repo, part, revision, endpoint, token) for part in parts]
    paths = [destination(models_dir, repo, r.part) for r in remotes]
    _check_space(remotes, paths)
    total = sum(r.size for r in remotes)
    meter = _Meter(parts[0], total, on_progress, should_stop)
    fetched = 0
    from filelock import FileLock, Timeout

    for remote, path in zip(remotes, paths, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise HubError(
                f"{remote.part} is being downloaded by another Arbor already"
            ) from None
        try:
            fetched += _fetch(remote, path, token, meter)
        finally:
            lock.release()
            Path(lock.lock_file).unlink(missing_ok=True)
    meter.report(force=True)
    first = remotes[0]
    return PulledFile(
        path=paths[0],
        sha256=first.sha256,
        size=total,
        repo=repo,
        filename=parts[0],
        commit=first.commit,
        fetched_bytes=fetched,
    )


def discard_partial(models_dir: Path, repo: str, parts: list[str]) -> int:
    """Delete what a stopped download left (Cancel); return the bytes freed."""
    freed = 0
    for part in parts:
        path = destination(models_dir, repo, part)
        for leftover in _part_files(path):
            with contextlib.suppress(FileNotFoundError):
                freed += leftover.stat().st_size
                leftover.unlink()
    return freed


def partial_bytes(models_dir: Path, repo: str, parts: list[str]) -> int:
    """Bytes already downloaded of an unfinished pull (0 if none)."""
    total = 0
    for part in parts:
        part_path = _part_files(destination(models_dir, repo, part))[0]
        with contextlib.suppress(FileNotFoundError):
            total += part_path.stat().st_size
    return total


def _part_files(path: Path) -> tuple[Path, Path]:
    return path.with_name(path.name + ".part"), path.with_name(path.name + ".part.json")


def _remote(
    repo: str, part: str, revision: str | None, endpoint: str | None, token: str | None
) -> _Remote:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo, part, revision=revision, endpoint=endpoint)
    with hub_errors(f"{repo}/{part}"):
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
    # For files in LFS (every model file on the Hub) the ETag is the sha256.
    etag = (meta.etag or "").strip('"').lower()
    if not _SHA256.match(etag):
        raise HubError(
            f"{repo}/{part}: the server gives no sha256 for the file, so it "
            "cannot be checked; not downloading it"
        )
    if meta.size is None:
        raise HubError(f"{repo}/{part}: the server gives no size for the file")
    return _Remote(part, meta.location, meta.size, etag, meta.commit_hash)


def _check_space(remotes: list[_Remote], paths: list[Path]) -> None:
    left = 0
    for remote, path in zip(remotes, paths, strict=True):
        if _is_complete(path, remote):
            continue
        part, _ = _part_files(path)
        have = (
            part.stat().st_size if part.exists() and _same_version(path, remote) else 0
        )
        left += remote.size - have
    if left == 0:
        return
    folder = paths[0].parent
    while not folder.exists():
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if free < left + _DISK_MARGIN:
        raise NotEnoughSpace(
            f"not enough disk space in {folder}: {format_bytes(left)} to download, "
            f"{format_bytes(free)} free"
        )


def _is_complete(path: Path, remote: _Remote) -> bool:
    # A finished file of the right size was verified before it was renamed.
    return path.is_file() and path.stat().st_size == remote.size


def _same_version(path: Path, remote: _Remote) -> bool:
    _part, note = _part_files(path)
    try:
        recorded = json.loads(note.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(recorded.get("sha256") == remote.sha256)


def _fetch(remote: _Remote, path: Path, token: str | None, meter: _Meter) -> int:
    """Bring ``path`` to the complete, verified file; return the bytes fetched."""
    if _is_complete(path, remote):
        meter.add_done(remote.size)
        return 0
    part, note = _part_files(path)
    if not _same_version(path, remote):
        part.unlink(missing_ok=True)
        note.write_text(
            json.dumps({"sha256": remote.sha256, "size": remote.size}), encoding="utf-8"
        )
    have = part.stat().st_size if part.exists() else 0
    if have > remote.size:
        part.unlink()
        have = 0
    meter.add_done(have)
    fetched = 0
    if have < remote.size:
        fetched = _stream(remote, part, have, token, meter)
    meter.phase = "verifying"
    meter.report(force=True)
    digest = _sha256_of(part, meter)
    if digest != remote.sha256:
        part.unlink(missing_ok=True)
        note.unlink(missing_ok=True)
        raise ChecksumMismatch(
            f"{remote.part}: the downloaded file does not match its sha256 "
            f"(expected {remote.sha256[:12]}…, got {digest[:12]}…); it was removed"
        )
    os.replace(part, path)
    note.unlink(missing_ok=True)
    meter.phase = "downloading"
    return fetched


def _stream(
    remote: _Remote, part: Path, have: int, token: str | None, meter: _Meter
) -> int:
    from huggingface_hub import constants
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers, silent_tqdm

    # Read by http_get at each call; nothing else in Arbor downloads.
    constants.DOWNLOAD_CHUNK_SIZE = _CHUNK
    with part.open("ab") as handle, _disk_errors(remote.part):
        writer = _CountingWriter(handle, meter)
        with hub_errors(f"download of {remote.part}"):
            http_get(
                remote.url,
                writer,  # type: ignore[arg-type]
                resume_size=have,
                headers=build_hf_headers(token=token),
                expected_size=remote.size,
                displayed_filename=remote.part,
                tqdm_class=silent_tqdm,
            )
        return writer.written


@contextlib.contextmanager
def _disk_errors(name: str) -> Iterator[None]:
    try:
        yield
    except DownloadStopped:
        raise
    except HubError:
        raise
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise NotEnoughSpace(
                f"the disk filled up while downloading {name}; what was downloaded "
                "is kept: free some space and pull again"
            ) from exc
        raise HubError(f"download of {name} failed: {exc}") from exc


def _sha256_of(path: Path, meter: _Meter) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(8 * 1024 * 1024):
            digest.update(chunk)
            meter.check_stop()
    return digest.hexdigest()


class _Meter:
    """Counts bytes, reports progress at a bounded rate, and stops on request."""

    def __init__(
        self,
        filename: str,
        total: int,
        on_progress: ProgressCallback | None,
        should_stop: Callable[[], bool] | None,
    ) -> None:
        self.filename = filename
        self.total = total
        self.done = 0
        self.phase = "downloading"
        self._on_progress = on_progress
        self._should_stop = should_stop
        self._samples: deque[tuple[float, int]] = deque()
        self._last_report = 0.0

    def add_done(self, count: int) -> None:
        self.done += count

    def add(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        self._samples.append((now, self.done))
        while self._samples and now - self._samples[0][0] > _SPEED_WINDOW:
            self._samples.popleft()
        self.check_stop()
        self.report()

    def check_stop(self) -> None:
        if self._should_stop is not None and self._should_stop():
            raise DownloadStopped(self.filename)

    def speed(self) -> float:
        if len(self._samples) < 2:
            return 0.0
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else 0.0

    def report(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._on_progress is None or (
            not force and now - self._last_report < _PROGRESS_INTERVAL
        ):
            return
        self._last_report = now
        self._on_progress(
            Progress(self.filename, self.done, self.total, self.speed(), self.phase)
        )


class _CountingWriter:
    """The file ``http_get`` writes to: counts each chunk for the meter.

    ``http_get`` also seeks and truncates when a server ignores the range
    and sends the whole file again; those go to the real file.
    """

    def __init__(self, handle: BinaryIO, meter: _Meter) -> None:
        self._handle = handle
        self._meter = meter
        self.written = 0

    def write(self, chunk: bytes) -> int:
        count = self._handle.write(chunk)
        self.written += count
        self._meter.add(count)
        return count

    def tell(self) -> int:
        return self._handle.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._handle.seek(offset, whence)

    def truncate(self, size: int | None = None) -> int:
        return self._handle.truncate(size)

    def flush(self) -> None:
        self._handle.flush()
