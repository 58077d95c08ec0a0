"""Pinned catalog downloads (issue 41): a catalog file that carries a pin
(a commit, a sha256, an exact size) is fetched from that commit and checked
against the pin, whatever the Hub serves under the same name today.

Real parts: ``download.pull``, the real ``huggingface_hub`` client, a catalog
read from JSON by ``load_catalog``, and the Hub stand-in of
``tests/helpers/fake_hub.py`` on 127.0.0.1 serving real GGUF files at ``main`` and
at an earlier commit. Only the shipped catalog is swapped for one that pins
the test repository, as the shipped one pins real ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.library import catalog as catalog_module
from app.library import names
from app.library.catalog import CatalogError, FilePin, load_catalog, shipped_catalog
from app.library.download import ChecksumMismatch, PinMismatch, pull
from tests.helpers.fake_hub import COMMIT, FakeFile, FakeHub, HubServer

REPO = "arbor-test/Tiny-Pinned-GGUF"
FILE = "Tiny-Pinned-Q8_0.gguf"
# The commit the catalog pins: an earlier one than main's (COMMIT).
PINNED = "fedcba9876543210fedcba9876543210fedcba98"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _changed(source: Path, target: Path) -> Path:
    """``source`` re-uploaded: the same size, one byte different."""
    data = bytearray(source.read_bytes())
    data[-1] ^= 0xFF
    target.write_bytes(bytes(data))
    return target


def _entry(pins: dict[str, object]) -> dict[str, object]:
    return {
        "id": "tiny-pinned",
        "name": "Tiny Pinned",
        "family": "Tiny",
        "parameters": "1M",
        "repo": REPO,
        "file": FILE,
        "quantization": "Q8_0",
        "size_bytes": 1,
        "context_length": 256,
        "kv_bytes_per_token": 1,
        "license": "MIT",
        "reasoning": False,
        "welcome_rank": None,
        "tools": "unknown",
        "tools_template": None,
        "recommended_for_tools": False,
        "vision": False,
        "description": "A test model.",
        "pins": pins,
        "provenance": {
            "checked": "revision, sha256 and size",
            "source": "http://127.0.0.1/api/models/arbor-test/Tiny-Pinned-GGUF",
            "on": "2026-12-07",
            "how": "the test's own stand-in Hub",
        },
    }


def _pin_json(path: Path, revision: str = PINNED) -> dict[str, object]:
    return {
        FILE: {
            "revision": revision,
            "sha256": _sha256(path),
            "size": path.stat().st_size,
        }
    }


@pytest.fixture
def pinned_bytes(tiny_model: Path) -> Path:
    """The bytes the catalog pins: the tiny model."""
    return tiny_model


@pytest.fixture
def hub(tiny_model: Path, tmp_path: Path) -> Iterator[HubServer]:
    """``main`` serves a re-upload of the tiny model (one byte changed);
    the pinned commit serves the tiny model itself."""
    fake = FakeHub()
    fake.add(REPO, {FILE: _changed(tiny_model, tmp_path / "reuploaded.gguf")})
    fake.add_revision(REPO, PINNED, {FILE: tiny_model})
    with HubServer(fake) as server:
        yield server


@pytest.fixture
def shipped(
    tmp_path: Path, pinned_bytes: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """The shipped catalog, swapped for one that pins ``FILE`` to the tiny
    model at ``PINNED``; returns its file (to rewrite it)."""
    path = tmp_path / "catalog.json"
    _write_catalog(path, _pin_json(pinned_bytes))
    monkeypatch.setattr(catalog_module, "shipped_catalog", lambda: load_catalog(path))
    return path


def _write_catalog(path: Path, pins: dict[str, object]) -> None:
    data = {"written": "2026-12-07", "models": [_entry(pins)]}
    path.write_text(json.dumps(data), encoding="utf-8")


def _destination(models: Path) -> Path:
    return models / "arbor-test" / "Tiny-Pinned-GGUF" / FILE


def test_a_pinned_file_comes_from_its_commit_and_is_checked_against_the_pin(
    hub, tmp_path, tiny_model
):
    pin = FilePin(FILE, PINNED, _sha256(tiny_model), tiny_model.stat().st_size)
    pulled = pull(REPO, [FILE], tmp_path / "models", endpoint=hub.url, pins={FILE: pin})
    assert _sha256(pulled.path) == pin.sha256 == pulled.sha256
    assert (pulled.commit, pulled.size) == (PINNED, pin.size)
    # Asked for at the commit, not at main: /resolve/<commit>/<file>.
    assert [d.path for d in hub.hub.downloads] == [f"/{REPO}/resolve/{PINNED}/{FILE}"]


def test_a_catalog_model_gets_its_pinned_bytes_though_main_changed(
    hub, shipped, tmp_path, tiny_model
):
    # No pins given: the (shipped) catalog's are used.
    pulled = pull(REPO, [FILE], tmp_path / "models", endpoint=hub.url)
    assert _sha256(pulled.path) == _sha256(tiny_model)
    assert _sha256(pulled.path) != hub.hub.repos[REPO].files[FILE].sha256


def test_installed_means_the_pinned_bytes_for_a_catalog_model(
    hub, shipped, tmp_path, tiny_model
):
    models = tmp_path / "models"
    path = _destination(models)
    path.parent.mkdir(parents=True)
    # main's bytes are there: not the catalog's model, fetched again.
    path.write_bytes(hub.hub.repos[REPO].files[FILE].path.read_bytes())
    again = pull(REPO, [FILE], models, endpoint=hub.url)
    assert again.fetched_bytes == tiny_model.stat().st_size
    assert _sha256(path) == _sha256(tiny_model)
    # The pinned bytes are there: nothing to fetch.
    assert pull(REPO, [FILE], models, endpoint=hub.url).fetched_bytes == 0


def test_a_pin_the_hub_does_not_match_fails_in_one_line_and_keeps_the_old_file(
    hub, shipped, tmp_path, tiny_model, other_tiny_model
):
    models = tmp_path / "models"
    old = _destination(models)
    old.parent.mkdir(parents=True)
    old.write_bytes(b"the model the user had")
    # The catalog pins other bytes than the commit holds (a wrong pin, or a
    # Hub that rewrote history).
    _write_catalog(shipped, _pin_json(other_tiny_model))
    with pytest.raises(PinMismatch) as caught:
        pull(REPO, [FILE], models, endpoint=hub.url)
    line = str(caught.value)
    assert "\n" not in line
    assert f"{FILE}: the Hub's file at commit {PINNED[:12]} is not the one" in line
    assert f"pinned {_sha256(other_tiny_model)[:12]}" in line
    assert "nothing was downloaded" in line
    # For good: the dialog offers what it offers any permanent failure.
    assert caught.value.transient is False
    assert old.read_bytes() == b"the model the user had"
    assert hub.hub.downloads == []
    assert sorted(p.name for p in old.parent.iterdir()) == [FILE]


def test_bytes_that_are_not_the_pinned_ones_are_refused_and_the_old_file_stays(
    tmp_path, tiny_model, other_tiny_model
):
    # The Hub claims the pinned sha256 for the commit but sends other bytes
    # of the same size: caught when the download is verified.
    wrong = _changed(tiny_model, tmp_path / "wrong.gguf")
    fake = FakeHub()
    fake.add(REPO, {FILE: other_tiny_model})
    fake.repos[REPO].revisions[PINNED] = {
        FILE: FakeFile(wrong, sha256=_sha256(tiny_model))
    }
    models = tmp_path / "models"
    old = _destination(models)
    old.parent.mkdir(parents=True)
    old.write_bytes(b"the model the user had")
    pin = FilePin(FILE, PINNED, _sha256(tiny_model), tiny_model.stat().st_size)
    with HubServer(fake) as server, pytest.raises(ChecksumMismatch) as caught:
        pull(REPO, [FILE], models, endpoint=server.url, pins={FILE: pin})
    assert "does not match the sha256 the catalog pins" in str(caught.value)
    assert old.read_bytes() == b"the model the user had"
    assert sorted(p.name for p in old.parent.iterdir()) == [FILE]


def test_another_revision_asked_for_by_name_is_not_pinned(
    hub, shipped, tmp_path, tiny_model
):
    pulled = pull(REPO, [FILE], tmp_path / "models", revision="main", endpoint=hub.url)
    assert pulled.sha256 == hub.hub.repos[REPO].files[FILE].sha256
    assert pulled.commit == COMMIT


def test_a_file_no_entry_pins_is_fetched_as_the_hub_serves_it_today(
    hub, tmp_path, tiny_model
):
    pulled = pull(REPO, [FILE], tmp_path / "models", endpoint=hub.url, pins={})
    assert pulled.sha256 == hub.hub.repos[REPO].files[FILE].sha256
    assert [d.path for d in hub.hub.downloads] == [f"/{REPO}/resolve/main/{FILE}"]


@pytest.mark.parametrize(
    ("pin", "complaint"),
    [
        ({"revision": "main", "sha256": "a" * 64, "size": 1}, "40-hex commit"),
        ({"revision": "a" * 40, "sha256": "A" * 64, "size": 1}, "sha256"),
        ({"revision": "a" * 40, "sha256": "a" * 64, "size": 0}, "size"),
        ({"revision": "a" * 40, "sha256": "a" * 64}, "exactly"),
    ],
)
def test_a_malformed_pin_does_not_load(tmp_path, pin, complaint):
    path = tmp_path / "catalog.json"
    _write_catalog(path, {FILE: pin})
    with pytest.raises(CatalogError, match=complaint):
        load_catalog(path)


def test_the_shipped_entries_say_where_their_figures_come_from():
    shipped_entries = shipped_catalog().entries
    assert shipped_entries
    for entry in shipped_entries:
        provenance = entry.provenance
        assert provenance is not None, entry.id
        assert provenance.checked and provenance.how, entry.id
        if entry.pins:
            # A pin is read from a source, on a day; it names the source.
            assert provenance.source, entry.id
            parts = set(names.split_siblings(entry.file))
            assert {p.file for p in entry.pins} <= parts, entry.id
        else:
            assert "not pinned" in provenance.checked, entry.id
