"""A Hugging Face Hub of our own on 127.0.0.1, for the download tests.

It speaks the parts of the Hub's HTTP API that ``huggingface_hub`` uses to
search, list and download model files, as the Hub does: ``/api/models``
(search), ``/api/models/{repo}[/revision/{rev}]`` (files with sizes and LFS
sha256 when ``blobs=true``), and ``/{repo}/resolve/{rev}/{file}`` (HEAD gives
the ETag, size and commit; GET honours ``Range``), with the Hub's
``X-Error-Code`` headers for gated repositories and missing ones. It serves
real files from disk, can slow itself down (to kill a client mid-download),
can advertise a wrong sha256 (to check that a client refuses the file),
can stall or cut a download (a Hub that stops sending, one that goes away,
one whose connections break every few bytes), can stall its API (a search or
a file list that never comes, or comes a byte at a time) and counts every
byte it sends and every API request. A repository's ``gguf`` is the metadata
the Hub reads from its GGUF (``architecture``, ``context_length``,
``chat_template``, ...), served as the Hub serves it: when a search or a
repository's info asks for it with ``expand``, which also limits the answer
to the fields named (and the id). A file changed on the Hub is a new
``FakeFile`` under the same name; a repository's earlier commits may keep
other files (``FakeHub.add_revision``), served at ``/resolve/<commit>/``
and ``/api/models/{repo}/revision/<commit>`` while ``main`` serves ``files``.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class FakeFile:
    """A file of a repository: its bytes on disk and the sha256 advertised."""

    path: Path
    sha256: str = ""

    def __post_init__(self) -> None:
        if not self.sha256:
            self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()

    @property
    def size(self) -> int:
        return self.path.stat().st_size


@dataclass
class FakeRepo:
    """A model repository; ``gated`` ones serve files only with the token.

    ``gguf``: the Hub's GGUF metadata of the repository (None: the Hub has
    none, and an ``expand`` for it gets no ``gguf`` field).
    """

    files: dict[str, FakeFile]
    gated: bool = False
    downloads: int = 0
    gguf: dict[str, object] | None = None
    # Earlier commits, by commit hash: the files each had.
    revisions: dict[str, dict[str, FakeFile]] = field(default_factory=dict)

    def at(self, revision: str | None) -> tuple[str, dict[str, FakeFile]]:
        """The commit ``revision`` names and its files: a kept commit's own,
        else (``main``, or any other name) the current ones."""
        if revision in self.revisions:
            return revision, self.revisions[revision]
        return COMMIT, self.files


@dataclass
class Download:
    """One GET of a file: the ``Range`` asked for and the bytes sent."""

    range: str | None
    sent: int = 0
    # The path asked for (``/{repo}/resolve/{revision}/{file}``).
    path: str = ""


@dataclass
class FakeHub:
    """The served repositories and what was sent; ``rate`` in bytes/s (0: full).

    Faults of a file's body (None: none): ``stall_at`` (a byte offset in
    the file): the body stops there and the connection stays open, silent,
    until ``release`` is set (a Hub that stalls mid-body); ``cut_at`` (an
    offset too): the connection closes there, and every later request for
    the rest is closed before an answer (a Hub gone mid-download);
    ``cut_every`` (bytes): each answer sends at most that many, then its
    connection closes (a flaky line that a client must resume). HEAD is
    never faulted.

    Faults of the API's answers (search and file lists), ``api_stall``:
    ``"silent"`` (the request is read, nothing is answered), ``"mid-body"``
    (the headers and half the JSON, then nothing), ``"trickle"`` (the JSON
    one byte every ``TRICKLE_S``: never silent for long, never whole in
    time). Each holds its connection open until ``release`` is set. Only
    paths that start with ``api_stall_under`` stall (``"/api/models/"``:
    the file lists, not the search). ``api_busy``: that many API requests
    are answered 503 first (a Hub that asks to try again).
    """

    repos: dict[str, FakeRepo] = field(default_factory=dict)
    token: str = "hf_test_token"
    rate: int = 0
    stall_at: int | None = None
    cut_at: int | None = None
    cut_every: int | None = None
    api_stall: str | None = None
    api_stall_under: str = "/api/"
    api_busy: int = 0
    # Set to let stalled answers end (the server sets it when it stops).
    release: threading.Event = field(default_factory=threading.Event)
    bytes_sent: int = 0
    # One entry per file download: its Range header and the bytes it got.
    downloads: list[Download] = field(default_factory=list)
    # The path of every API request (search, file list), in order.
    api_requests: list[str] = field(default_factory=list)
    # The query of every API request, parsed, in the same order.
    api_queries: list[dict[str, list[str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, repo: str, files: dict[str, Path], **kwargs: object) -> FakeRepo:
        """Serve ``files`` (name in the repo → file on disk) as ``repo``."""
        entry = FakeRepo({n: FakeFile(p) for n, p in files.items()}, **kwargs)  # type: ignore[arg-type]
        self.repos[repo] = entry
        return entry

    def add_revision(self, repo: str, commit: str, files: dict[str, Path]) -> None:
        """Keep ``files`` as ``repo``'s files at the earlier ``commit``."""
        self.repos[repo].revisions[commit] = {n: FakeFile(p) for n, p in files.items()}


# Seconds between two bytes of a trickling API answer.
TRICKLE_S = 0.2
API_STALLS = ("silent", "mid-body", "trickle")

_INFO = re.compile(r"^/api/models/([^/]+/[^/]+?)(?:/revision/([^/]+))?$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")


def _expand(query: dict[str, list[str]]) -> list[str] | None:
    """The fields an API request names with ``expand`` (or ``expand[]``, as
    the Hub takes it too); None when it names none."""
    fields = query.get("expand", []) + query.get("expand[]", [])
    return fields or None


def _expanded(
    answer: dict[str, object], entry: FakeRepo, expand: list[str] | None
) -> dict[str, object]:
    """``answer`` as the Hub gives it for ``expand``: everything when nothing
    is named, else the id and the fields named, ``gguf`` among them."""
    if expand is None:
        return answer
    full = {**answer, "gguf": entry.gguf}
    kept = {"id": answer["id"], "_id": answer["_id"]}
    kept.update({k: full[k] for k in expand if full.get(k) is not None})
    return kept


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    # Whether this request's path is one whose answer ``api_stall`` stalls.
    _stalls = False

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the tests read the counters instead

    def do_GET(self) -> None:
        self._route(send_body=True)

    def do_HEAD(self) -> None:
        self._route(send_body=False)

    def _route(self, send_body: bool) -> None:
        url = urlparse(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        if path.startswith("/api/"):
            with self.hub.lock:
                self.hub.api_requests.append(path)
                self.hub.api_queries.append(query)
                busy = self.hub.api_busy > 0
                if busy:
                    self.hub.api_busy -= 1
            if busy:
                self._error(503, "Busy", "Service unavailable, try again")
                return
        self._stalls = path.startswith(self.hub.api_stall_under)
        if path == "/api/models":
            self._search(query)
        elif match := _INFO.match(path):
            self._info(match.group(1), match.group(2), "blobs" in query, _expand(query))
        elif match := _RESOLVE.match(path):
            self._resolve(
                match.group(1), match.group(2), match.group(3), send_body, path
            )
        else:
            self._error(404, "RepoNotFound", "Not found")

    def _search(self, query: dict[str, list[str]]) -> None:
        words = query.get("search", [""])[0].lower()
        limit = int(query.get("limit", ["1000"])[0])
        expand = _expand(query)
        found = [
            _expanded(
                {
                    "id": repo,
                    "_id": repo,
                    "author": repo.split("/")[0],
                    "downloads": entry.downloads,
                    "likes": 0,
                    "gated": "manual" if entry.gated else False,
                    "private": False,
                    "lastModified": "2026-11-30T12:00:00.000Z",
                    "tags": ["gguf"],
                },
                entry,
                expand,
            )
            for repo, entry in sorted(
                self.hub.repos.items(), key=lambda kv: -kv[1].downloads
            )
            if words in repo.lower()
        ][:limit]
        self._json(found)

    def _info(
        self, repo: str, revision: str | None, blobs: bool, expand: list[str] | None
    ) -> None:
        entry = self.hub.repos.get(repo)
        if entry is None:
            self._error(401, "RepoNotFound", "Repository not found")
            return
        commit, files = entry.at(revision)
        siblings = []
        for name, file in files.items():
            sibling: dict[str, object] = {"rfilename": name}
            if blobs:
                sibling.update(
                    size=file.size,
                    blobId="b" * 40,
                    lfs={"sha256": file.sha256, "size": file.size, "pointerSize": 134},
                )
            siblings.append(sibling)
        if blobs and expand is not None:
            # As the Hub: files' metadata and a chosen set of fields exclude
            # each other (huggingface_hub refuses to ask for both).
            self._error(400, "BadRequest", "expand cannot be used with blobs")
            return
        self._json(
            _expanded(
                {
                    "id": repo,
                    "_id": repo,
                    "author": repo.split("/")[0],
                    "sha": commit,
                    "gated": "manual" if entry.gated else False,
                    "private": False,
                    "downloads": entry.downloads,
                    "likes": 0,
                    "tags": ["gguf"],
                    "lastModified": "2026-11-30T12:00:00.000Z",
                    "siblings": siblings,
                },
                entry,
                expand,
            )
        )

    def _resolve(
        self, repo: str, revision: str, name: str, send_body: bool, path: str
    ) -> None:
        entry = self.hub.repos.get(repo)
        if entry is None:
            self._error(401, "RepoNotFound", "Repository not found")
            return
        if entry.gated and self.headers.get("Authorization") != (
            f"Bearer {self.hub.token}"
        ):
            self._error(
                401,
                "GatedRepo",
                "Access to model is restricted. You must have access to it and "
                "be authenticated to access it. Please log in.",
            )
            return
        commit, files = entry.at(revision)
        file = files.get(name)
        if file is None:
            self._error(404, "EntryNotFound", "Entry not found")
            return
        size = file.size
        start = 0
        range_header = self.headers.get("Range")
        if range_header and (m := re.match(r"bytes=(\d+)-", range_header)):
            start = int(m.group(1))
        if send_body and self.hub.cut_at is not None and start >= self.hub.cut_at:
            # Gone: the connection closes before any answer.
            self.close_connection = True
            return
        status = 206 if start else 200
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{file.sha256}"')
        self.send_header("X-Linked-Etag", f'"{file.sha256}"')
        self.send_header("X-Linked-Size", str(size))
        self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Length", str(size - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.end_headers()
        if send_body:
            record = Download(range_header, path=path)
            with self.hub.lock:
                self.hub.downloads.append(record)
            self._send_file(file.path, start, record)

    def _send_file(self, path: Path, start: int, record: Download) -> None:
        # Fifty writes a second when slowed down.
        chunk = max(4096, self.hub.rate // 50) if self.hub.rate else 1 << 20
        hub = self.hub
        # Where this answer ends early, if it does: a stall, a cut, or the
        # cut of a flaky line.
        limits = [
            max(offset, start)
            for offset in (hub.stall_at, hub.cut_at)
            if offset is not None
        ]
        if hub.cut_every is not None:
            limits.append(start + hub.cut_every)
        end = min(limits, default=None)
        position = start
        with path.open("rb") as handle:
            handle.seek(start)
            while True:
                want = chunk if end is None else min(chunk, end - position)
                data = handle.read(want) if want > 0 else b""
                if not data:
                    break
                try:
                    self.wfile.write(data)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    return
                position += len(data)
                with hub.lock:
                    hub.bytes_sent += len(data)
                    record.sent += len(data)
                if hub.rate:
                    time.sleep(len(data) / hub.rate)
        if hub.stall_at is not None and position >= hub.stall_at:
            # Silent, the connection open: the client's reads must time out.
            hub.release.wait(timeout=120)
        self.close_connection = True

    def _json(self, data: object) -> None:
        body = json.dumps(data).encode()
        stall = self.hub.api_stall if self._stalls else None
        assert stall in (None, *API_STALLS), stall
        if stall == "silent":
            self._hold()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if stall is None:
            self.wfile.write(body)
            return
        try:
            if stall == "mid-body":
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self._hold()
                return
            # A byte at a time, but never the last one: the answer is never
            # whole, however long the client waits.
            for byte in body[:-1]:
                if self.hub.release.wait(TRICKLE_S):
                    break
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            return  # the client gave up: what it should do
        self.close_connection = True

    def _hold(self) -> None:
        """Silent, the connection open, until released (or two minutes)."""
        self.hub.release.wait(timeout=120)
        self.close_connection = True

    def _error(self, status: int, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class HubServer:
    """``FakeHub`` served on 127.0.0.1 from a thread; ``url`` is its endpoint."""

    def __init__(self, hub: FakeHub) -> None:
        handler = type("Handler", (_Handler,), {"hub": hub})
        self.hub = hub
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.hub.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
