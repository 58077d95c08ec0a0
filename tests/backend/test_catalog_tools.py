"""The catalog's tools marks, checked the way they were made, and the loaded
model's ``tool_format``.

Each entry's ``tools`` mark says what Arbor's own tool-syntax learning makes of
llama.cpp's reference template for the entry's family (``tools_template``,
read from the llama-cpp-python sdist). The test renders that template again
through the learning, so a mark that disagrees fails here. The models' own
files are not read (the Hub is out of reach); where llama.cpp has no template
of a family, the mark is "unknown" and the test proves there is still none.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from app.backend.chat_format import ChatFormat
from app.backend.engine import LlamaEngine
from app.backend.fallback_formats import FALLBACKS
from app.backend.settings import BackendSettings
from app.library.catalog import (
    TOOLS_MARKS,
    CatalogEntry,
    CatalogError,
    load_catalog,
    shipped_catalog,
)
from tests.helpers.template_corpus import reference_templates

ROOT = Path(__file__).resolve().parents[2]
CATALOG = shipped_catalog()
CHECKED = [e for e in CATALOG.entries if e.tools_template is not None]

# The entries marked "unknown", each with what a reference template of its
# family would be called: none may exist, or the mark should be learned.
NO_REFERENCE = {
    "gemma-3-1b-it": "gemma-3",
    "gemma-3-4b-it": "gemma-3",
    "phi-4-mini-instruct": "phi-4",
    "mistral-7b-instruct-v0.3": "mistral-7b",
}


def _learned(template_name: str) -> str:
    """What Arbor learns from a reference template, as the engine does it."""
    source = reference_templates()[template_name]
    return ChatFormat(source, "<s>", "</s>").tool_syntax.kind


@pytest.mark.parametrize("entry", CHECKED, ids=[e.id for e in CHECKED])
def test_each_mark_is_what_arbor_learns_from_the_familys_reference_template(
    entry: CatalogEntry,
):
    assert entry.tools_template is not None
    assert entry.tools == _learned(entry.tools_template)


def test_the_marks_cover_every_entry_and_unknown_means_no_template_exists():
    assert {e.tools for e in CATALOG.entries} <= set(TOOLS_MARKS)
    unknown = {e.id for e in CATALOG.entries if e.tools == "unknown"}
    assert unknown == set(NO_REFERENCE)
    names = [name.lower() for name in reference_templates()]
    for entry_id, family in NO_REFERENCE.items():
        found = [name for name in names if family in name]
        assert not found, f"{entry_id}: check its tools against {found}"
    # Both kinds occur in the catalog, so the dialog's two marks are real.
    assert {e.tools for e in CHECKED} == {"native", "generic"}


def test_one_native_entry_is_recommended_for_tools():
    recommended = [e for e in CATALOG.entries if e.recommended_for_tools]
    assert len(recommended) == 1
    assert CATALOG.recommended_for_tools() is recommended[0]
    assert recommended[0].tools == "native"


def test_the_provenance_says_what_was_checked_and_how():
    assert CATALOG.written == "2026-12-01"
    lines = {line.split(":", 1)[0]: line for line in CATALOG.provenance}
    assert set(lines) == {
        "entries",
        "tools",
        "recommended_for_tools",
        "vision",
        "pins",
    }
    assert "without access to the Hub" in lines["entries"]
    assert "did not repeat that check" in lines["entries"]
    # No entry pinned where no pin was read: the line says so, truly.
    pinned = [e.id for e in CATALOG.entries if e.pins]
    assert ("no entry is pinned yet" in lines["pins"]) == (not pinned)
    tools = lines["tools"]
    assert "checked 2026-12-07" in tools
    assert "llama.cpp's models/templates" in tools
    assert "The models' own files were not read" in tools
    assert "not measured" in lines["recommended_for_tools"]
    text = (ROOT / "resources/models/catalog.json").read_text(encoding="utf-8")
    for claim in ('"reviewed"', "the Hub's listing", "review against"):
        assert claim not in text, claim
    assert [e.id for e in CATALOG.entries if e.vision] == ["gemma-3-4b-it"]


def test_learning_never_fails_a_load_on_any_reference_template():
    # The engine learns the syntax at every load now: no template may raise,
    # nor a fallback format (a model without a template of its own).
    kinds = {name: _learned(name) for name in reference_templates()}
    assert set(kinds.values()) == {"native", "generic"}
    for fallback in FALLBACKS:
        chat_format = ChatFormat(fallback.template, "<s>", "</s>", fallback.kind)
        assert chat_format.tool_syntax.kind == "generic", fallback.name


# --- malformed marks are named -------------------------------------------------


def _write(tmp_path: Path, change: dict[str, Any], index: int = 0) -> Path:
    data = json.loads((ROOT / "resources/models/catalog.json").read_text())
    data["models"][index] = {**data["models"][index], **change}
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tools": "maybe"}, "tools should be one of native, generic, unknown"),
        ({"tools": "native", "tools_template": None}, 'only "unknown" has none'),
        ({"tools": "unknown"}, 'only "unknown" has none'),
        ({"tools_template": 3}, "tools_template should be str | None"),
        ({"vision": "yes"}, "vision should be bool"),
    ],
)
def test_a_malformed_tools_mark_is_named(tmp_path, change, message):
    with pytest.raises(CatalogError, match=message.replace("|", r"\|")):
        load_catalog(_write(tmp_path, change))


def test_two_recommendations_or_a_generic_one_are_refused(tmp_path):
    # Entry 0 is Qwen2.5 0.5B (native), and Qwen3 4B is already recommended.
    with pytest.raises(CatalogError, match="more than one model for tools"):
        load_catalog(_write(tmp_path, {"recommended_for_tools": True}))
    smol = [e.id for e in CATALOG.entries].index("smollm3-3b")
    with pytest.raises(CatalogError, match="its template's tool calls are 'generic'"):
        load_catalog(_write(tmp_path, {"recommended_for_tools": True}, smol))


# --- the loaded model ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"), [("tiny_model", "generic"), ("qwen_model", "native")]
)
def test_the_loaded_models_info_says_its_tool_format(request, fixture, expected):
    # The tiny model carries ChatML (no tools); the Qwen copy Qwen 2.5's template.
    path = request.getfixturevalue(fixture)
    with LlamaEngine(path, BackendSettings(n_ctx=512, n_batch=64)) as engine:
        info = engine.info
        assert info.tool_format == expected
        assert info.tool_format == engine.chat_format.tool_syntax.kind
    # It crosses to the window and the child engine as any ModelInfo does.
    assert pickle.loads(pickle.dumps(info)) == info
