"""``tools/pin_catalog.py`` against the Hub stand-in (issue 41): it pins each
catalog file to the Hub's current commit, sha256 and size, says what it
changed, and leaves the rest of the catalog as it was.

Real parts: the tool's ``main``, ``huggingface_hub``'s ``HfApi.model_info``
and the API route of ``tests/helpers/fake_hub.py`` on 127.0.0.1; the pinned catalog
is then read by ``load_catalog`` and used by ``download.pull``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from app.library.catalog import load_catalog
from app.library.download import pull
from tests.helpers.fake_hub import COMMIT, FakeHub, HubServer
from tests.library.test_catalog_pins import FILE, REPO, _changed, _entry
from tools import pin_catalog


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _catalog(tmp_path: Path) -> Path:
    entry = _entry({})
    entry["provenance"] = {
        "checked": "not pinned",
        "source": None,
        "on": "2026-12-01",
        "how": "written offline",
    }
    path = tmp_path / "catalog.json"
    path.write_text(
        json.dumps({"written": "2026-12-01", "models": [entry]}, indent=2) + "\n",
        encoding="utf-8",
    )
    return path


def test_the_tool_pins_each_file_and_says_what_changed(
    tmp_path, tiny_model, capsys: pytest.CaptureFixture[str]
):
    path = _catalog(tmp_path)
    fake = FakeHub()
    fake.add(REPO, {FILE: tiny_model})
    args = ["--catalog", str(path), "--today", "2026-12-07"]
    with HubServer(fake) as hub:
        assert pin_catalog.main([*args, "--endpoint", hub.url]) == 0
        first = capsys.readouterr().out
        entry = load_catalog(path).entries[0]
        assert f"{FILE}: pinned at {COMMIT[:12]}" in first
        pin = load_catalog(path).pins_for(entry.repo, [FILE]).get(FILE)
        assert pin is not None
        assert (pin.revision, pin.sha256, pin.size) == (
            COMMIT,
            _sha256(tiny_model),
            tiny_model.stat().st_size,
        )
        provenance = entry.provenance
        assert provenance is not None
        assert provenance.on == "2026-12-07"
        assert provenance.source == (
            f"{hub.url}/api/models/{REPO}/revision/{COMMIT}?blobs=true"
        )
        # The rest of the entry is as it was.
        assert (entry.name, entry.size_bytes, entry.file) == ("Tiny Pinned", 1, FILE)

        # Nothing new on the Hub: nothing changes.
        before = path.read_text(encoding="utf-8")
        assert pin_catalog.main([*args, "--endpoint", hub.url]) == 0
        assert f"{FILE}: unchanged" in capsys.readouterr().out
        assert path.read_text(encoding="utf-8") == before

        # The pinned catalog's file downloads as pinned.
        catalog = load_catalog(path)
        pulled = pull(
            REPO,
            [FILE],
            tmp_path / "models",
            endpoint=hub.url,
            pins=catalog.pins_for(REPO, [FILE]),
        )
        assert (pulled.sha256, pulled.commit) == (_sha256(tiny_model), COMMIT)

        # A re-upload: the new sha256 is said (a dry run writes nothing).
        changed = _changed(tiny_model, tmp_path / "reuploaded.gguf")
        fake.add(REPO, {FILE: changed})
        assert pin_catalog.main([*args, "--endpoint", hub.url, "--dry-run"]) == 0
        said = capsys.readouterr().out
        assert f"sha256 {_sha256(tiny_model)} -> {_sha256(changed)}" in said
        assert path.read_text(encoding="utf-8") == before


def test_a_file_the_hub_does_not_list_is_said_and_left_unpinned(
    tmp_path, tiny_model, capsys: pytest.CaptureFixture[str]
):
    path = _catalog(tmp_path)
    fake = FakeHub()
    fake.add(REPO, {"Other-Q4_0.gguf": tiny_model})
    with HubServer(fake) as hub:
        assert pin_catalog.main(["--catalog", str(path), "--endpoint", hub.url]) == 1
    assert f"{FILE}: not pinned" in capsys.readouterr().out
    assert load_catalog(path).entries[0].pins == ()
