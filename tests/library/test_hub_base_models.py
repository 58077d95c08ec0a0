"""Hub search tells base models apart, and Hub failures say whether trying
again can help (issue 41).

Real parts: ``hub.search``, ``hub.list_files`` and ``download.pull``, the
``arbor models search`` process, ``huggingface_hub``'s client, and the Hub
stand-in of ``tests/helpers/fake_hub.py`` on 127.0.0.1, which serves a repository's
GGUF metadata (``gguf``) as the Hub does: when ``expand`` asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.library.download import pull
from app.library.hub import (
    BASE_MODEL_NOTE,
    TIMEOUT_ENV,
    GatedRepository,
    HubError,
    list_files,
    search,
)
from tests.helpers.fake_hub import FakeHub, HubServer
from tests.library.test_library import models_cli

CHAT = "arbor-test/Tiny-Chat-GGUF"
BASE = "arbor-test/Tiny-Base-GGUF"
UNKNOWN = "arbor-test/Tiny-Unread-GGUF"
GATED = "arbor-test/Tiny-Gated-GGUF"
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"


@pytest.fixture
def hub(tiny_model: Path) -> Iterator[HubServer]:
    """A chat model (its GGUF has a template), a base model (none), one the
    Hub has no metadata of, and a gated one."""
    fake = FakeHub()
    fake.add(
        CHAT,
        {"Tiny-Chat-Q8_0.gguf": tiny_model},
        downloads=30,
        gguf={
            "total": 1000,
            "architecture": "llama",
            "context_length": 4096,
            "chat_template": TEMPLATE,
        },
    )
    fake.add(
        BASE,
        {"Tiny-Base-Q8_0.gguf": tiny_model},
        downloads=20,
        gguf={"total": 1000, "architecture": "gemma3", "context_length": 32768},
    )
    fake.add(UNKNOWN, {"Tiny-Unread-Q8_0.gguf": tiny_model}, downloads=10)
    fake.add(GATED, {"Tiny-Gated-Q8_0.gguf": tiny_model}, gated=True)
    with HubServer(fake) as server:
        yield server


def test_a_search_flags_repositories_without_a_chat_template(hub):
    found = {r.repo: r for r in search("tiny", endpoint=hub.url)}
    assert list(found) == [CHAT, BASE, UNKNOWN, GATED]  # most downloaded first
    chat, base, unknown = found[CHAT], found[BASE], found[UNKNOWN]
    assert (chat.chat_template, chat.base_model) == (True, False)
    assert (chat.architecture, chat.context_length) == ("llama", 4096)
    assert (base.chat_template, base.base_model) == (False, True)
    assert (base.architecture, base.context_length) == ("gemma3", 32768)
    # Nothing known is nothing flagged.
    assert (unknown.chat_template, unknown.base_model) == (None, False)
    # The rest of what a result shows still comes, in the one request.
    assert (chat.downloads, chat.gated, found[GATED].gated) == (30, False, True)
    assert chat.updated is not None
    assert hub.hub.api_requests == ["/api/models"]
    assert "gguf" in hub.hub.api_queries[0]["expand"]


def test_the_flag_costs_no_request_per_repository(hub):
    found = search("tiny", endpoint=hub.url, with_files=2)
    # One search, then the file lists asked for: no metadata request each.
    assert hub.hub.api_requests == [
        "/api/models",
        f"/api/models/{CHAT}",
        f"/api/models/{BASE}",
    ]
    assert found[1].base_model and found[1].files[0].filename == "Tiny-Base-Q8_0.gguf"


def test_a_hub_that_ignores_expand_leaves_the_flag_unknown(hub, monkeypatch):
    # A mirror that answers every field and no gguf (as the Hub without expand).
    monkeypatch.setattr("tests.helpers.fake_hub._expand", lambda _query: None)
    found = search("tiny", endpoint=hub.url)
    assert [r.chat_template for r in found] == [None] * 4
    assert not any(r.base_model for r in found)
    assert found[0].downloads == 30


def test_models_search_json_says_base_model(hub, data_dir):
    found = models_cli(hub.url, data_dir, "search", "tiny").json
    by_repo = {r["repo"]: r for r in found["repositories"]}
    assert by_repo[BASE]["base_model"] is True
    assert by_repo[BASE]["chat_template"] is False
    assert by_repo[BASE]["note"] == BASE_MODEL_NOTE == "base model: no chat template"
    assert by_repo[BASE]["architecture"] == "gemma3"
    assert by_repo[BASE]["context_length"] == 32768
    assert by_repo[CHAT]["base_model"] is False and by_repo[CHAT]["note"] is None
    assert by_repo[CHAT]["chat_template"] is True
    assert by_repo[UNKNOWN]["chat_template"] is None
    assert by_repo[UNKNOWN]["base_model"] is False


# --- failures: transient or not -----------------------------------------------------


def test_answers_that_will_not_change_are_not_transient(hub, tmp_path):
    with pytest.raises(HubError, match="no such repository") as caught:
        list_files("arbor-test/Nothing", endpoint=hub.url)
    assert caught.value.transient is False
    with pytest.raises(HubError, match="no such file") as caught:
        pull(CHAT, ["Nothing-Q4_0.gguf"], tmp_path, endpoint=hub.url)
    assert caught.value.transient is False
    with pytest.raises(HubError, match="not a Hub repository") as caught:
        list_files("no-owner", endpoint=hub.url)
    assert caught.value.transient is False


def test_the_network_a_busy_hub_and_a_gated_repository_are_transient(
    hub, tmp_path, monkeypatch
):
    with pytest.raises(HubError, match="cannot reach the Hub") as caught:
        search("tiny", endpoint="http://127.0.0.1:9")
    assert caught.value.transient is True
    monkeypatch.setenv(TIMEOUT_ENV, "1")
    hub.hub.api_busy = 1000
    with pytest.raises(HubError, match="did not answer within") as caught:
        search("tiny", endpoint=hub.url)
    assert caught.value.transient is True
    # Accept the licence (and save a token), and the same request works.
    with pytest.raises(GatedRepository) as gated:
        pull(GATED, ["Tiny-Gated-Q8_0.gguf"], tmp_path, endpoint=hub.url)
    assert gated.value.transient is True
