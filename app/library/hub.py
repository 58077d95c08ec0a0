"""The Hugging Face Hub, through ``huggingface_hub``: find GGUF repositories and
list their model files with sizes and sha256.

``HF_ENDPOINT`` (a mirror) and ``HF_TOKEN`` (gated repositories) work as in
every Hub tool, because ``huggingface_hub`` reads them; ``endpoint`` and
``token`` override them. Every failure leaves here as a ``HubError`` with a
one-line message a person can act on, and ``huggingface_hub``'s own log
lines (its retries' warnings) go to Arbor's log, not to stderr.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from app.library import names

# A Hub repository id: owner/name.
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}$")
# Seconds a request for a repository's files may wait for the Hub: without
# one, huggingface_hub's client waits for ever on a Hub that stalls.
REQUEST_TIMEOUT_S = 30.0


class HubError(Exception):
    """A Hub request failed; the message says why in one line."""


class GatedRepository(HubError):
    """The repository needs an accepted licence and a token (HF_TOKEN)."""


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
    """A repository found by a search, with its GGUF files when listed."""

    repo: str
    downloads: int | None
    likes: int | None
    gated: bool
    updated: str | None
    files: tuple[RemoteFile, ...] = ()


def check_repo_id(repo: str) -> str:
    """``repo`` if it looks like ``owner/name``; else a ``HubError``."""
    if not _REPO_ID.match(repo):
        raise HubError(f"{repo!r} is not a Hub repository (owner/name)")
    return repo


def search(
    query: str,
    limit: int = 20,
    endpoint: str | None = None,
    token: str | None = None,
    with_files: int = 0,
) -> list[RemoteRepository]:
    """Repositories with GGUF files matching ``query``, most downloaded first.

    The first ``with_files`` repositories also get their files listed (one
    request each: the Hub lists sizes only per repository).
    """
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    with hub_errors(f"search for {query!r}"):
        found = list(
            api.list_models(search=query, filter="gguf", sort="downloads", limit=limit)
        )
    repositories = []
    for index, info in enumerate(found):
        repository = RemoteRepository(
            repo=info.id,
            downloads=info.downloads,
            likes=info.likes,
            gated=bool(info.gated),
            updated=info.last_modified.isoformat() if info.last_modified else None,
        )
        if index < with_files:
            files = list_files(info.id, endpoint=endpoint, token=token)
            repository = replace(repository, files=tuple(files))
        repositories.append(repository)
    return repositories


def list_files(
    repo: str,
    revision: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
) -> list[RemoteFile]:
    """The GGUF model files of ``repo``, split models as one file, by size."""
    from huggingface_hub import HfApi

    check_repo_id(repo)
    api = HfApi(endpoint=endpoint, token=token)
    with hub_errors(repo):
        info = api.model_info(
            repo, revision=revision, files_metadata=True, timeout=REQUEST_TIMEOUT_S
        )
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
            raise HubError(f"{what}: the token (HF_TOKEN) has no access") from exc
        raise HubError(
            f"{what}: no such repository on the Hub (a private one needs HF_TOKEN)"
        ) from exc
    except errors.RevisionNotFoundError as exc:
        raise HubError(f"{what}: no such revision") from exc
    except errors.RemoteEntryNotFoundError as exc:
        raise HubError(f"{what}: no such file in the repository") from exc
    except errors.OfflineModeIsEnabled as exc:
        raise HubError(f"{what}: HF_HUB_OFFLINE is set, so the Hub is off") from exc
    except errors.HfHubHTTPError as exc:
        status = _status(exc)
        if status in (401, 403):
            raise HubError(f"{what}: not allowed ({status}); check HF_TOKEN") from exc
        raise HubError(f"{what}: the Hub answered {status or 'an error'}") from exc
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
