"""The Hugging Face Hub, through ``huggingface_hub``: find GGUF repositories and
list their model files with sizes and sha256.

``HF_ENDPOINT`` (a mirror) and ``HF_TOKEN`` (gated repositories) work as in
every Hub tool, because ``huggingface_hub`` reads them; ``endpoint`` and
``token`` override them. Every failure leaves here as a ``HubError`` with a
one-line message a person can act on, and ``huggingface_hub``'s own log
lines (its retries' warnings) go to Arbor's log, not to stderr.

**Every request has a bound.** A search, or a repository's file list, is
answered whole within ``TIMEOUT_S`` seconds (10; ``HF_HUB_ETAG_TIMEOUT``,
``huggingface_hub``'s own setting for its metadata requests, sets another)
or fails with one line; a search that lists files too has the bound for all
its requests together. ``huggingface_hub`` has none to give here:
``HfApi.list_models`` takes no timeout (its client has none, so a Hub that
stalls keeps it waiting for ever) and retries a timeout five times, and
``model_info``'s timeout bounds each wait for bytes, not the answer, which a
Hub that sends a byte a second never finishes. So the request is made here,
through ``huggingface_hub``'s own client, headers and errors: each wait
(to connect, for the next bytes) may last what is left of the bound; a
connection cut or answered with "try again" is made again, quietly, while
time is left (a refused one is not: nobody is there to wait for); the
answer is read in chunks, the clock looked at between them (so a Hub that
sends a byte now and then fails at the bound too; one that sends until just
before it and then nothing, at the latest twice the bound after the start,
since a wait cannot be shortened once begun). Ten seconds, because the
window's library thread, which runs these, is given 15 to end when the
window closes.

**A search tells base models apart.** It asks the Hub for each
repository's GGUF metadata in the same request (``expand``, which the search
takes as ``model_info`` does; a mirror that ignores it just says nothing),
so a repository whose GGUF has no chat template, a base model that goes on
with a text rather than answering it, is known before anything is
downloaded (``RemoteRepository.base_model``). The Hub reads that metadata
from one file of the repository; the others are the same model.

**Failures say whether to try again.** ``HubError.transient`` is True where
asking again later may work (the network, a busy or silent Hub, a stall),
False where the answer will not change by itself (no such repository,
revision or file, no access, a setting to fix), so that the window offers
Resume only where it can help. A gated repository is transient: the user
accepts its licence, and the same request works.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from app.library import names

if TYPE_CHECKING:
    import httpx2

# A Hub repository id: owner/name.
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
# Seconds a request to the Hub's API may take, whole (see the module's docstring).
TIMEOUT_S = 10.0
# huggingface_hub's own setting for how long a metadata request waits; set,
# it replaces TIMEOUT_S, so one variable means the same in every Hub tool.
TIMEOUT_ENV = "HF_HUB_ETAG_TIMEOUT"
# Seconds between two tries, so that a Hub that refuses is not hammered.
_RETRY_PAUSE_S = 0.5
# Answers that mean "try again later", as huggingface_hub's own retries take them.
_TRY_AGAIN = frozenset({408, 429, 500, 502, 503, 504})
# The most an answer may hold: a search of a hundred repositories is some
# 50 kB (with the GGUF metadata, chat templates included, some 200 kB),
# the file list of a repository of a thousand files under 1 MB.
_MAX_ANSWER = 32 * 1024**2
# What a search asks the Hub for (``expand``): what the results show, and the
# GGUF metadata. Naming fields means only those come (and the id).
_SEARCH_FIELDS = ("downloads", "likes", "gated", "lastModified", "gguf")


class HubError(Exception):
    """A Hub request failed; the message says why in one line.

    Attributes
    ----------
    transient
        Whether the same request may work later by itself (see the module's
        docstring); a subclass or ``transient=`` says False.
    """

    transient = True

    def __init__(self, message: str = "", *, transient: bool | None = None) -> None:
        super().__init__(message)
        if transient is not None:
            self.transient = transient


class GatedRepository(HubError):
    """The repository needs an accepted licence and a token (HF_TOKEN).

    Transient all the same, unlike other 401s: once the licence is accepted
    on the Hub's page (and a token saved, ``hf auth login``, which
    ``huggingface_hub`` reads at each request), the same request works,
    without a restart.
    """


@dataclass(frozen=True)
class RemoteFile:
    """One GGUF file of a repository (for a split model: its first part).

    ``size`` is the whole model's (all parts); ``parts`` lists every file
    to download, first part first.
    """

    repo: str
    filename: str
    size: int | None
    sha256: str | None
    quantization: str | None
    parts: tuple[str, ...]


@dataclass(frozen=True)
class RemoteRepository:
    """A repository found by a search, with its GGUF files when listed.

    ``chat_template``, ``architecture`` and ``context_length`` are what the
    Hub read from the repository's GGUF (None: the Hub said nothing);
    ``chat_template`` is True when the GGUF has one.
    """

    repo: str
    downloads: int | None
    likes: int | None
    gated: bool
    updated: str | None
    files: tuple[RemoteFile, ...] = ()
    chat_template: bool | None = None
    architecture: str | None = None
    context_length: int | None = None

    @property
    def base_model(self) -> bool:
        """True when the Hub says the GGUF has no chat template: a base model,
        which goes on with a text instead of answering (False when it has one,
        or when nothing is known)."""
        return self.chat_template is False


BASE_MODEL_NOTE = "base model: no chat template"


def check_repo_id(repo: str) -> str:
    """``repo`` if it looks like ``owner/name``; else a ``HubError``."""
    if not _REPO_ID.match(repo):
        raise HubError(
            f"{repo!r} is not a Hub repository (owner/name)", transient=False
        )
    return repo


def timeout_seconds() -> float:
    """The bound of a Hub request: ``TIMEOUT_ENV`` when it holds a positive
    number, else ``TIMEOUT_S``."""
    try:
        seconds = float(os.environ.get(TIMEOUT_ENV, ""))
    except ValueError:
        return TIMEOUT_S
    return seconds if seconds > 0 else TIMEOUT_S


def check_settings() -> None:
    """A ``HubError`` for a Hub timeout variable that ``huggingface_hub``
    cannot read: it reads them as whole numbers as it is imported, and a
    value such as ``2.5`` stops the import with a ``ValueError``."""
    for name in (TIMEOUT_ENV, "HF_HUB_DOWNLOAD_TIMEOUT"):
        value = os.environ.get(name)
        if value is None:
            continue
        try:
            int(value)
        except ValueError:
            raise HubError(
                f"{name}={value!r} is not a whole number of seconds "
                "(huggingface_hub reads it as one)",
                transient=False,
            ) from None


def search(
    query: str,
    limit: int = 20,
    endpoint: str | None = None,
    token: str | None = None,
    with_files: int = 0,
) -> list[RemoteRepository]:
    """Repositories with GGUF files matching ``query``, most downloaded first.

    The first ``with_files`` repositories also get their files listed (one
    request each: the Hub lists sizes only per repository). One page of the
    Hub's answer, ``limit`` repositories at most; all of it within one
    ``timeout_seconds()``. Each repository says what the Hub read from its
    GGUF (whether it has a chat template: ``RemoteRepository.base_model``),
    asked for in the same request.
    """
    check_settings()
    from huggingface_hub import ModelInfo, constants

    if limit <= 0:
        return []
    bound = _Bound(timeout_seconds())
    base = (endpoint or constants.ENDPOINT).rstrip("/")
    params = {
        "search": query,
        "filter": "gguf",
        "sort": "downloads",
        "limit": limit,
        # Sent as expand=downloads&expand=likes..., as huggingface_hub's
        # list_models sends it.
        "expand": list(_SEARCH_FIELDS),
    }
    what = f"search for {query!r}"
    found = _get_json(what, f"{base}/api/models", params, token, bound)
    if not isinstance(found, list):
        raise HubError(f"{what}: the Hub's answer is not a list of repositories")
    repositories = []
    # A Hub (or a mirror) that ignores the limit does not get more requests.
    for index, item in enumerate(found[:limit]):
        with _answer_errors(what):
            # ModelInfo has no type hints; what it is given is checked here.
            info = ModelInfo(**{"siblings": None, **item})  # type: ignore[no-untyped-call]
        repository = RemoteRepository(
            repo=info.id,
            downloads=info.downloads,
            likes=info.likes,
            gated=bool(info.gated),
            updated=info.last_modified.isoformat() if info.last_modified else None,
            **_gguf_facts(info.gguf),
        )
        if index < with_files:
            files = list_files(info.id, endpoint=endpoint, token=token, bound=bound)
            repository = replace(repository, files=tuple(files))
        repositories.append(repository)
    return repositories


def list_files(
    repo: str,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    bound: _Bound | None = None,
) -> list[RemoteFile]:
    """The GGUF model files of ``repo``, split models as one file, by size.

    Within ``timeout_seconds()``, or what is left of ``bound`` (a search's).
    """
    check_settings()
    from huggingface_hub import ModelInfo, constants

    check_repo_id(repo)
    base = (endpoint or constants.ENDPOINT).rstrip("/")
    url = f"{base}/api/models/{repo}"
    if revision is not None:
        url += f"/revision/{quote(revision, safe='')}"
    # blobs: the sizes and LFS sha256 of the files (files_metadata=True).
    data = _get_json(
        repo, url, {"blobs": True}, token, bound or _Bound(timeout_seconds())
    )
    with _answer_errors(repo):
        info = ModelInfo(**data)  # type: ignore[no-untyped-call]
    siblings = {s.rfilename: s for s in info.siblings or []}
    files = []
    for filename, sibling in siblings.items():
        part = names.split_part(filename)
        if not names.is_gguf(filename) or (part is not None and part[0] != 1):
            continue
        # Projector files of vision models are no chat models on their own.
        if "mmproj" in filename.lower():
            continue
        parts = tuple(names.split_siblings(filename))
        sizes = [siblings[p].size if p in siblings else None for p in parts]
        files.append(
            RemoteFile(
                repo=repo,
                filename=filename,
                size=None if None in sizes else sum(s or 0 for s in sizes),
                sha256=sibling.lfs.sha256 if sibling.lfs else None,
                quantization=names.quantization(filename),
                parts=parts,
            )
        )
    return sorted(files, key=lambda f: (f.size is None, f.size or 0, f.filename))


def _gguf_facts(gguf: object) -> dict[str, Any]:
    """``RemoteRepository``'s GGUF fields from the Hub's ``gguf`` metadata
    (``chat_template``, ``architecture``, ``context_length``); nothing is
    known without it, and a field of the wrong type is not known either."""
    if not isinstance(gguf, dict):
        return {}
    template = gguf.get("chat_template")
    architecture = gguf.get("architecture")
    context = gguf.get("context_length")
    return {
        # Metadata without a template (or with an empty one): a base model.
        "chat_template": isinstance(template, str) and bool(template.strip()),
        "architecture": architecture if isinstance(architecture, str) else None,
        "context_length": (
            context
            if isinstance(context, int) and not isinstance(context, bool)
            else None
        ),
    }


class _Bound:
    """The time a request, or a search's requests together, may take."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left; 0 or less once the bound has passed."""
        return self._until - time.monotonic()


def retried_errors() -> tuple[type[Exception], ...]:
    """The transfer errors worth asking again for, while time is left: a
    Hub that is silent, or a connection cut (a search's answer here, a
    file's bytes in ``download``)."""
    import httpx2

    return (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError)


def _get_json(
    what: str, url: str, params: dict[str, Any], token: str | None, bound: _Bound
) -> Any:
    """GET ``url``'s JSON within ``bound`` (see the module's docstring), or a
    ``HubError`` that says why not; errors of the Hub as ``hub_errors`` says
    them."""
    import httpx2
    from huggingface_hub.utils import build_hf_headers, get_session

    headers = build_hf_headers(token=token)
    why = "no answer"
    with hub_errors(what):
        while (left := bound.left()) > 0:
            # Each wait (to connect, for the next bytes) may last what is left.
            timeout = httpx2.Timeout(left)
            try:
                with get_session().stream(
                    "GET", url, params=params, headers=headers, timeout=timeout
                ) as response:
                    if response.status_code in _TRY_AGAIN:
                        why = f"the Hub answered {response.status_code}"
                    else:
                        return _read_json(what, response, bound)
            except httpx2.ConnectError:
                # Refused, or no such host: nobody to wait for (hub_errors
                # says "cannot reach the Hub").
                raise
            except (httpx2.DecodingError, httpx2.TooManyRedirects) as exc:
                # No network error (hub_errors would not take them): an
                # answer that no retry makes readable.
                raise HubError(
                    f"{what}: the Hub's answer cannot be read ({type(exc).__name__})"
                ) from exc
            except retried_errors() as exc:
                # Silent, or cut: asked again while there is time.
                why = type(exc).__name__
            time.sleep(max(0.0, min(_RETRY_PAUSE_S, bound.left())))
    raise HubError(
        f"{what}: the Hub did not answer within {bound.seconds:g} s ({why}); "
        "try again later, or check the network connection (or HF_ENDPOINT)"
    )


def _read_json(what: str, response: httpx2.Response, bound: _Bound) -> Any:
    """The JSON of ``response``: whole before the bound, and not too big."""
    from huggingface_hub.utils import hf_raise_for_status

    hf_raise_for_status(response)
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > _MAX_ANSWER:
            raise HubError(f"{what}: the Hub's answer is too large; not reading it")
        if bound.left() <= 0:
            # Never silent for long, never done: a stall all the same.
            raise HubError(
                f"{what}: the Hub did not answer within {bound.seconds:g} s (its "
                "answer came too slowly); try again later, or check the network "
                "connection (or HF_ENDPOINT)"
            )
    with _answer_errors(what):
        return json.loads(body)


@contextlib.contextmanager
def _answer_errors(what: str) -> Iterator[None]:
    """An answer that is not what the Hub's API gives: one line, not a bug."""
    try:
        yield
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise HubError(f"{what}: the Hub's answer cannot be read ({exc})") from exc


@contextlib.contextmanager
def hub_errors(what: str) -> Iterator[None]:
    """Turn ``huggingface_hub`` and network failures into one-line ``HubError``s.

    The order matters: the gated error is a kind of not-found error, and
    every HTTP error is an ``OSError``.
    """
    import httpx2
    from huggingface_hub import errors

    _hub_log_to_ours()
    try:
        yield
    except errors.GatedRepoError as exc:
        raise GatedRepository(
            f"{what}: the repository is gated; accept its licence on the Hub and "
            "set HF_TOKEN to a token of your account"
        ) from exc
    except errors.RepositoryNotFoundError as exc:
        # The Hub answers 401 for a repository that does not exist as for a
        # private one, so as not to tell which.
        if _status(exc) == 403:
            raise HubError(
                f"{what}: the token (HF_TOKEN) has no access", transient=False
            ) from exc
        raise HubError(
            f"{what}: no such repository on the Hub (a private one needs HF_TOKEN)",
            transient=False,
        ) from exc
    except errors.RevisionNotFoundError as exc:
        raise HubError(f"{what}: no such revision", transient=False) from exc
    except errors.RemoteEntryNotFoundError as exc:
        raise HubError(
            f"{what}: no such file in the repository", transient=False
        ) from exc
    except errors.OfflineModeIsEnabled as exc:
        raise HubError(
            f"{what}: HF_HUB_OFFLINE is set, so the Hub is off", transient=False
        ) from exc
    except errors.HfHubHTTPError as exc:
        status = _status(exc)
        if status in (401, 403):
            raise HubError(
                f"{what}: not allowed ({status}); check HF_TOKEN", transient=False
            ) from exc
        raise HubError(
            f"{what}: the Hub answered {status or 'an error'}",
            # A refusal (4xx) stays one; "try again" answers and server
            # errors may pass.
            transient=status is None or status >= 500 or status in _TRY_AGAIN,
        ) from exc
    except httpx2.TransportError as exc:
        raise HubError(
            f"{what}: cannot reach the Hub ({type(exc).__name__}); check the "
            "network connection (or HF_ENDPOINT)"
        ) from exc


def _hub_log_to_ours() -> None:
    """Take away the handler ``huggingface_hub`` gives its logger, which
    prints on stderr whatever the application does ("Error while downloading
    … Trying to resume", "Retrying in 1s"): its records still reach the
    root logger, so they land in Arbor's log (the window's file, the CLI's
    ``--verbose``), and stderr keeps one line per failure."""
    hub_logger = logging.getLogger("huggingface_hub")
    for handler in list(hub_logger.handlers):
        # Only a plain StreamHandler, the kind it adds: one that an
        # application embedding Arbor set (a FileHandler, say) stays.
        if type(handler) is logging.StreamHandler:
            hub_logger.removeHandler(handler)


def _status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)
