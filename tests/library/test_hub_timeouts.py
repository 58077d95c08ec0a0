"""A Hub that stalls a search or a file list (issue 43): one line within the
bound, never a command or a worker thread waiting for ever.

Real parts: ``arbor models search`` processes, ``hub.search`` and
``hub.list_files`` themselves, ``huggingface_hub``'s client, and the Hub
stand-in of ``tests/helpers/fake_hub.py`` on 127.0.0.1, silent, stopping halfway
through its JSON, or sending it a byte at a time. The bound is set short
here through ``HF_HUB_ETAG_TIMEOUT``, the variable a user would set; the
default is checked on its own.

Times: the lower bound is asserted exactly (a Hub is not given up on before
its bound); the upper one is generous, so that a loaded machine passes and
a request that hangs still fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.library import hub as hub_module
from app.library.hub import (
    TIMEOUT_ENV,
    TIMEOUT_S,
    HubError,
    check_settings,
    list_files,
    search,
)
from tests.helpers.fake_hub import API_STALLS, FakeHub, HubServer
from tests.helpers.fault_harness import run_cli

REPO = "arbor-test/Tiny-Chat-GGUF"
FILE = "Tiny-Chat-Q8_0.gguf"
# The bound of a Hub request in these tests (seconds).
BOUND = 2
# (huggingface_hub reads HF_HUB_ETAG_TIMEOUT as an integer: "1.5" stops its import.)
# Far above the bound, far below "for good": a request still waiting after
# this has hung.
HANG_S = 60


@pytest.fixture
def hub(tiny_model: Path) -> Iterator[HubServer]:
    """A Hub serving the tiny model as ``REPO``'s ``FILE``."""
    fake = FakeHub()
    fake.add(REPO, {FILE: tiny_model}, downloads=10)
    with HubServer(fake) as server:
        yield server


@pytest.fixture
def short_bound(monkeypatch: pytest.MonkeyPatch) -> float:
    """``BOUND`` as the bound of this process's Hub requests."""
    monkeypatch.setenv(TIMEOUT_ENV, f"{BOUND:g}")
    return BOUND


def hub_env(url: str, bound: float = BOUND) -> dict[str, str]:
    """A CLI's environment for the Hub at ``url``, with ``bound``."""
    return {
        "HF_ENDPOINT": url,
        "HF_HUB_DISABLE_TELEMETRY": "1",
        TIMEOUT_ENV: f"{bound:g}",
    }


@pytest.mark.parametrize("stall", API_STALLS)
def test_a_stalled_search_is_one_line_within_the_bound(hub, data_dir, stall):
    hub.hub.api_stall = stall
    result = run_cli(
        "models",
        "search",
        "tiny",
        data_dir=data_dir,
        env=hub_env(hub.url),
        timeout=HANG_S,
        check=True,  # one line, no traceback, not killed for hanging
    )
    assert result.rc == 1, result.describe()
    assert result.message.startswith(
        f"arbor: error: search for 'tiny': the Hub did not answer within {BOUND:g} s"
    ), result.describe()
    assert "Trying to resume" not in result.stderr
    # Not before the bound; one that hung was killed at HANG_S.
    assert result.seconds >= BOUND


@pytest.mark.parametrize("stall", API_STALLS)
def test_a_stalled_file_list_fails_within_the_bound(hub, short_bound, stall):
    hub.hub.api_stall = stall
    started = time.monotonic()
    with pytest.raises(HubError, match=f"did not answer within {BOUND:g} s"):
        list_files(REPO, endpoint=hub.url)
    assert BOUND <= time.monotonic() - started < HANG_S


def test_a_search_and_its_file_lists_share_one_bound(hub, short_bound):
    # The search is answered; the file list it goes on to ask for stalls.
    hub.hub.api_stall = "silent"
    hub.hub.api_stall_under = "/api/models/"
    started = time.monotonic()
    said = f"^{REPO}: the Hub did not answer within {BOUND:g} s "
    with pytest.raises(HubError, match=said):
        search("tiny", endpoint=hub.url, with_files=1)
    assert BOUND <= time.monotonic() - started < HANG_S
    assert hub.hub.api_requests[0] == "/api/models"


def test_a_hub_that_asks_to_try_again_is_asked_again_quietly(hub, short_bound):
    hub.hub.api_busy = 1
    found = search("tiny", endpoint=hub.url, with_files=1)
    assert [r.repo for r in found] == [REPO]
    assert [f.filename for f in found[0].files] == [FILE]
    # A 503, then the search and the file list.
    assert hub.hub.api_requests == ["/api/models"] * 2 + [f"/api/models/{REPO}"]


def test_a_hub_busy_past_the_bound_says_so(hub, short_bound):
    hub.hub.api_busy = 10**6
    with pytest.raises(HubError, match=r"within 2 s \(the Hub answered 503\)"):
        search("tiny", endpoint=hub.url)


def test_nobody_listening_is_said_at_once_not_after_the_bound(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "30")
    started = time.monotonic()
    with pytest.raises(HubError, match="cannot reach the Hub"):
        search("tiny", endpoint="http://127.0.0.1:9")
    assert time.monotonic() - started < 10


def test_a_search_reads_one_page_and_at_most_limit_repositories(hub, tiny_model):
    for n in range(5):
        hub.hub.add(f"arbor-test/Tiny-{n}-GGUF", {FILE: tiny_model}, downloads=n)
    found = search("tiny", endpoint=hub.url, limit=3)
    assert [r.repo for r in found] == [
        REPO,
        "arbor-test/Tiny-4-GGUF",
        "arbor-test/Tiny-3-GGUF",
    ]
    assert search("tiny", endpoint=hub.url, limit=0) == []
    assert hub.hub.api_requests == ["/api/models"]


def test_the_bound_is_10_s_unless_the_hub_setting_says(monkeypatch):
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert hub_module.timeout_seconds() == TIMEOUT_S == 10.0
    monkeypatch.setenv(TIMEOUT_ENV, "2.5")
    assert hub_module.timeout_seconds() == 2.5
    for unusable in ("", "soon", "0", "-3"):
        monkeypatch.setenv(TIMEOUT_ENV, unusable)
        assert hub_module.timeout_seconds() == TIMEOUT_S


@pytest.mark.parametrize("name", [TIMEOUT_ENV, "HF_HUB_DOWNLOAD_TIMEOUT"])
@pytest.mark.parametrize(
    "command", [("search", "tiny"), ("pull", "owner/repo", "m.gguf")]
)
def test_a_timeout_huggingface_hub_cannot_read_is_one_line(name, command, data_dir):
    # huggingface_hub reads both as whole numbers when it is imported; "2.5"
    # stopped the command with its ValueError's traceback.
    result = run_cli(
        "models",
        *command,
        data_dir=data_dir,
        env={"HF_ENDPOINT": "http://127.0.0.1:9", name: "2.5"},
        timeout=HANG_S,
    )
    assert result.rc == 1
    assert result.message == (
        f"arbor: error: {name}='2.5' is not a whole number of seconds "
        "(huggingface_hub reads it as one)"
    )


def test_whole_numbers_of_seconds_are_readable(monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, "7")
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "30")
    check_settings()
