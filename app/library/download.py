"""Download a model file from the Hub: resumable, checked, bounded and stoppable.

``huggingface_hub`` gives the file's metadata (size, LFS sha256, the commit,
the address after redirects) and the HTTP client; the transfer itself is
ours. Its bytes go to ``<file>.part`` beside the destination, and a later
pull — after Pause, a crash, ``kill -9`` or a failure — asks only for the
rest (an HTTP range). A ``<file>.part.json`` remembers which version of the
file the part belongs to, so a file changed on the Hub meanwhile starts
over instead of mixing two versions. The sha256 is checked before the file
takes its final name: a file that does not match is removed, never used.

**A catalog file may be pinned** (``catalog.FilePin``: a commit, a sha256,
a size). It is then asked for at that commit (``/resolve/<commit>/<file>``)
and checked against the pin, not against what the Hub serves under the name
today: a file re-uploaded on the Hub changes nothing. If the Hub's answer
for the pinned commit is not the pinned file, nothing is downloaded and
nothing the user has is touched; the failure (``PinMismatch``) says in one
line what differs and is for good (the same request gets the same answer).
A pull asks the shipped catalog for the pins of the files it fetches unless
told which (``pins``); files no entry pins, and any file asked for at
another revision than its pin's, are fetched as before.

A file is there already only when its bytes are the version the Hub gives
now, or the pin fixes: same size *and* same sha256 (``file_hashes``
remembers the sha256 of each file by size and modification time, so a model
is hashed once, not at every pull). A file of another version is fetched
again into its part and replaced only once the new bytes verify; until then
the old one stays.

**A stall has a bound.** A download fails once no byte has come for
``STALL_S`` seconds (30; ``HF_HUB_DOWNLOAD_TIMEOUT`` sets another), whatever
happened meanwhile: until then a connection that is cut, refused, answered
with a 5xx or silent for ``_READ_S`` is made again, quietly, and the
download goes on where it stopped. ``huggingface_hub``'s own transfer
(``http_get``) waits 10 s per read and tries 6 times, again after any byte,
logging each try on stderr: over a minute for a Hub that stalls, and a
dozen lines where Arbor promises one. Its logger no longer reaches stderr
(``hub.hub_errors``); the failure is one ``HubError`` line, and the part
stays for the next pull.
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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from app.library import catalog
from app.library.catalog import SHA256_HEX, FilePin
from app.library.file_hashes import HashCache, stamp_of
from app.library.hub import (
    HubError,
    check_repo_id,
    check_settings,
    hub_errors,
    retried_errors,
)
from app.text.quantities import format_bytes

if TYPE_CHECKING:
    import httpx2

# Room left on the disk beyond the file itself (the database grows too).
_DISK_MARGIN = 64 * 1024**2
# How often progress is reported, at most (seconds).
_PROGRESS_INTERVAL = 0.25
# The window over which speed is averaged (seconds).
_SPEED_WINDOW = 5.0
# Seconds without a byte before a download fails (see the module's docstring).
# Long enough for a network to come back (Wi-Fi roaming, a router's restart),
# short enough that a Hub that stopped sending is said within half a minute.
STALL_S = 30.0
# huggingface_hub's own setting for how long a download waits for bytes; set,
# it replaces STALL_S, so one variable means the same in every Hub tool.
STALL_ENV = "HF_HUB_DOWNLOAD_TIMEOUT"
# The longest one read waits before its connection is made again: a Pause is
# seen within this even while nothing comes (reads look at Stop between chunks).
_READ_S = 5.0
# Seconds between two tries, so that a Hub that refuses is not hammered.
_RETRY_PAUSE_S = 1.0
# Answers that mean "try again later", as huggingface_hub's own retries take them.
_TRY_AGAIN = frozenset({408, 429, 500, 502, 503, 504})


class DownloadStopped(Exception):
    """The caller asked the download to stop; the part stays for a resume."""


class NotEnoughSpace(HubError):
    """The disk cannot hold what is left to download."""


class ChecksumMismatch(HubError):
    """The downloaded bytes are not the file the Hub advertised (or the
    catalog pins)."""


class PinMismatch(HubError):
    """The Hub's file at a pinned commit is not the file the catalog pins:
    nothing was downloaded. For good: the same commit gives the same answer."""

    transient = False


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
    pinned: bool = False


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
    stall_s: float | None = None,
    pins: Mapping[str, FilePin] | None = None,
) -> PulledFile:
    """Download ``parts`` of ``repo`` (one file, or every part of a split
    model) into ``models_dir``, resuming what an earlier pull left.

    ``stall_s``: seconds without a byte before the download fails (None:
    ``stall_seconds()``). ``pins``: the pinned parts, by file name (None: the
    shipped catalog's pins of these files; a part asked for at another
    ``revision`` than its pin's is not pinned).

    Raises
    ------
    HubError
        With a one-line reason: network, 401/403/404, a stall, ``NotEnoughSpace``
        (checked before anything is fetched), ``ChecksumMismatch``,
        ``PinMismatch`` (before anything is fetched).
    DownloadStopped
        When ``should_stop`` returned True; the parts stay for a resume.
    """
    check_settings()  # before huggingface_hub is imported (it reads them then)
    stall = stall_seconds() if stall_s is None else stall_s
    if pins is None:
        pins = catalog.shipped_catalog().pins_for(repo, parts)
    remotes = [
        _remote(repo, part, revision, endpoint, token, _pin(pins, part, revision))
        for part in parts
    ]
    paths = [destination(models_dir, repo, r.part) for r in remotes]
    total = sum(r.size for r in remotes)
    meter = _Meter(parts[0], total, on_progress, should_stop)
    hashes = HashCache(models_dir)
    complete = [
        _is_complete(path, remote, hashes, meter)
        for remote, path in zip(remotes, paths, strict=True)
    ]
    _check_space(remotes, paths, complete)
    fetched = 0
    from filelock import FileLock, Timeout

    for remote, path, done in zip(remotes, paths, complete, strict=True):
        if done:
            meter.add_done(remote.size)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise HubError(
                f"{remote.part} is being downloaded by another Arbor already"
            ) from None
        try:
            fetched += _fetch(remote, path, token, meter, stall, hashes)
        finally:
            lock.release()
            Path(lock.lock_file).unlink(missing_ok=True)
    meter.report(force=True)
    first = remotes[0]
    return PulledFile(
        path=paths[0],
        sha256=first.sha256,  # the bytes on disk: verified or checked above
        size=total,
        repo=repo,
        filename=parts[0],
        commit=first.commit,
        fetched_bytes=fetched,
    )


def stall_seconds() -> float:
    """Seconds without a byte before a download fails: ``STALL_ENV`` when
    it holds a positive number, else ``STALL_S``."""
    try:
        seconds = float(os.environ.get(STALL_ENV, ""))
    except ValueError:
        return STALL_S
    return seconds if seconds > 0 else STALL_S


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


def _pin(
    pins: Mapping[str, FilePin], part: str, revision: str | None
) -> FilePin | None:
    pin = pins.get(part)
    # Another revision asked for by name is another file: the pin says nothing.
    if pin is None or revision not in (None, pin.revision):
        return None
    return pin


def _remote(
    repo: str,
    part: str,
    revision: str | None,
    endpoint: str | None,
    token: str | None,
    pin: FilePin | None = None,
) -> _Remote:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    if pin is not None:
        revision = pin.revision
    url = hf_hub_url(repo, part, revision=revision, endpoint=endpoint)
    with hub_errors(f"{repo}/{part}"):
        meta = get_hf_file_metadata(url, token=token, endpoint=endpoint)
    # For files in LFS (every model file on the Hub) the ETag is the sha256.
    etag = (meta.etag or "").strip('"').lower()
    if pin is not None:
        _check_pin(part, pin, etag, meta.size)
        return _Remote(part, meta.location, pin.size, pin.sha256, pin.revision, True)
    if not SHA256_HEX.match(etag):
        raise HubError(
            f"{repo}/{part}: the server gives no sha256 for the file, so it "
            "cannot be checked; not downloading it"
        )
    if meta.size is None:
        raise HubError(f"{repo}/{part}: the server gives no size for the file")
    return _Remote(part, meta.location, meta.size, etag, meta.commit_hash)


def _check_pin(part: str, pin: FilePin, etag: str, size: int | None) -> None:
    """Refuse, before a byte is fetched, a pinned file that the Hub
    describes otherwise at the pinned commit (what it says of the sha256
    only where it gives one: the bytes are checked against the pin anyway)."""
    differs = []
    if size is not None and size != pin.size:
        differs.append(f"size {size:,} bytes, pinned {pin.size:,}")
    if SHA256_HEX.match(etag) and etag != pin.sha256:
        differs.append(f"sha256 {etag[:12]}…, pinned {pin.sha256[:12]}…")
    if differs:
        raise PinMismatch(
            f"{part}: the Hub's file at commit {pin.revision[:12]} is not the one "
            f"the catalog pins ({'; '.join(differs)}); nothing was downloaded and "
            "the files you have are untouched"
        )


def _check_space(
    remotes: list[_Remote], paths: list[Path], complete: list[bool]
) -> None:
    left = 0
    for remote, path, done in zip(remotes, paths, complete, strict=True):
        if done:
            continue
        part, _ = _part_files(path)
        have = (
            part.stat().st_size if part.exists() and _same_version(path, remote) else 0
        )
        # An old version of the file stays until the new one verifies, so
        # the whole of what is left needs room beside it.
        left += remote.size - min(have, remote.size)
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


def _is_complete(path: Path, remote: _Remote, hashes: HashCache, meter: _Meter) -> bool:
    """Whether ``path`` holds the version of the file the Hub gives now.

    The size alone does not say it: a file changed on the Hub can keep its
    size. The sha256 is the one remembered for the file's size and mtime,
    else it is read (and remembered).
    """
    stamp = stamp_of(path) if path.is_file() else None
    if stamp is None or stamp[0] != remote.size:
        return False
    digest = hashes.known(path)
    if digest is None:
        meter.phase = "verifying"
        meter.report(force=True)
        digest = _sha256_of(path, meter)
        meter.phase = "downloading"
        hashes.remember(path, digest, stamp)
    return digest == remote.sha256


def _same_version(path: Path, remote: _Remote) -> bool:
    _part, note = _part_files(path)
    try:
        recorded = json.loads(note.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(recorded.get("sha256") == remote.sha256)


def _fetch(
    remote: _Remote,
    path: Path,
    token: str | None,
    meter: _Meter,
    stall_s: float,
    hashes: HashCache,
) -> int:
    """Bring ``path`` to the verified file the Hub gives now; return the
    bytes fetched. A file of another version at ``path`` stays until then."""
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
        fetched = _stream(remote, part, have, token, meter, stall_s)
    meter.phase = "verifying"
    meter.report(force=True)
    stamp = stamp_of(part)
    digest = _sha256_of(part, meter)
    if digest != remote.sha256:
        part.unlink(missing_ok=True)
        note.unlink(missing_ok=True)
        whose = "the sha256 the catalog pins" if remote.pinned else "its sha256"
        raise ChecksumMismatch(
            f"{remote.part}: the downloaded file does not match {whose} "
            f"(expected {remote.sha256[:12]}…, got {digest[:12]}…); the download "
            "was removed, the files you had are untouched"
        )
    os.replace(part, path)
    note.unlink(missing_ok=True)
    if stamp is not None:  # a rename keeps the size and mtime
        hashes.remember(path, digest, stamp)
    meter.phase = "downloading"
    return fetched


def _stream(
    remote: _Remote,
    part: Path,
    have: int,
    token: str | None,
    meter: _Meter,
    stall_s: float,
) -> int:
    """Append the rest of ``remote`` to ``part`` (``have`` bytes there);
    return the bytes written. A ``HubError`` once nothing came for
    ``stall_s`` seconds; what was written stays."""
    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session

    headers = {**build_hf_headers(token=token), "Accept-Encoding": "identity"}
    written = 0
    last_byte = time.monotonic()
    why = "no answer"
    with (
        part.open("ab") as handle,
        _disk_errors(remote.part),
        hub_errors(f"download of {remote.part}"),
    ):
        while have < remote.size:
            left = stall_s - (time.monotonic() - last_byte)
            if left <= 0:
                raise HubError(
                    f"download of {remote.part} stalled: nothing came for "
                    f"{stall_s:g} s ({why}); what was downloaded is kept: pull "
                    "again to resume"
                )
            timeout = httpx2.Timeout(min(left, _READ_S))
            asked = {**headers, "Range": f"bytes={have}-"} if have else headers
            try:
                with get_session().stream(
                    "GET", remote.url, headers=asked, timeout=timeout
                ) as response:
                    if response.status_code in _TRY_AGAIN:
                        why = f"the Hub answered {response.status_code}"
                    else:
                        have = _start_at(response, handle, have, meter)
                        # As they come, not gathered into bigger chunks: what
                        # came before a stall or a crash is on disk.
                        for chunk in response.iter_bytes():
                            if have + len(chunk) > remote.size:
                                raise HubError(
                                    f"download of {remote.part}: the Hub sent more "
                                    f"than the file's {remote.size} bytes"
                                )
                            handle.write(chunk)
                            have += len(chunk)
                            written += len(chunk)
                            last_byte = time.monotonic()
                            meter.add(len(chunk))
                        why = "the connection ended early"
            except retried_errors() as exc:
                # Cut, refused or silent: tried again until the bound.
                why = type(exc).__name__
            meter.check_stop()
            rest = stall_s - (time.monotonic() - last_byte)
            if have < remote.size and rest > 0:
                # Half of what is left at most: a line that breaks often but
                # still brings bytes is not declared stalled by the pauses.
                time.sleep(min(_RETRY_PAUSE_S, rest / 2))
        return written


def _start_at(
    response: httpx2.Response, handle: BinaryIO, have: int, meter: _Meter
) -> int:
    """Where ``response``'s body starts in the file: ``have`` for the range
    asked for, 0 when the server ignored it and sends the whole file (the
    part is emptied then). Errors of the Hub raise (``hub_errors`` says them).
    """
    from huggingface_hub.utils import hf_raise_for_status

    hf_raise_for_status(response)
    if not have:
        return 0
    if response.status_code == 200:
        handle.truncate(0)
        meter.add_done(-have)
        return 0
    sent_from = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    if sent_from is None or int(sent_from.group(1)) != have:
        raise HubError(
            f"the Hub sent another part of the file than asked for (from byte {have})"
        )
    return have


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
