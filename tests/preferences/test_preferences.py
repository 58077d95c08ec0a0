"""Preferences: one field and one default each, read and written whole in one
transaction, invalid stored values falling back to the defaults (issue 24)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from app.backend.errors import InvalidSetting
from app.backend.settings import BackendSettings
from app.preferences import (
    LocalServerPrefs,
    Preferences,
    WorkerPrefs,
    load_preferences,
    save_preferences,
)
from storage import setting_rows
from storage.db import Database, open_database


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(tmp_path / "arbor.sqlite3")
    yield database
    database.close()


def test_a_new_database_reads_the_defaults(db):
    assert load_preferences(db) == Preferences()


def test_saving_is_one_write_transaction_and_reads_back_the_same(db):
    changed = replace(
        Preferences(),
        model_path="/models/a.gguf",
        recent_models=("/models/a.gguf", "/models/b.gguf"),
        backend=BackendSettings(n_ctx=8192, n_threads=2),
        system_prompt="Be brief.",
        checkpoint_budget_mb=0,
        tree_view="graph",
        text_scale=125,
        local_server=LocalServerPrefs("0.0.0.0", 9000, True),
    )
    before = db.generation()
    save_preferences(db, changed)
    assert db.generation() == before + 1
    assert load_preferences(db) == changed
    # Each preference is the key of its field's name.
    assert setting_rows.get_setting(db, "tree_view") == "graph"
    assert setting_rows.get_setting(db, "backend")["n_ctx"] == 8192


def test_stored_values_that_do_not_read_back_fall_back_each_to_its_default(db):
    setting_rows.set_settings(
        db,
        {
            "tree_view": "cloud",
            "text_scale": 100.0,
            "checkpoint_budget_mb": "lots",
            "backend": "not a dict",
            "recent_models": 7,
            "system_prompt": "Kept.",
        },
    )
    prefs = load_preferences(db)
    assert prefs == replace(Preferences(), system_prompt="Kept.")


def test_the_workers_are_kept_with_use_workers_off_and_loaded_on_when_on(db):
    listed = ("10.0.0.2:50052", "gpu-box:50053")
    off = Preferences().with_workers(WorkerPrefs(listed, use=False))
    # Off: remembered, not used.
    assert off.backend.workers == ()
    save_preferences(db, off)
    assert load_preferences(db) == off
    assert setting_rows.get_setting(db, "workers") == {
        "addresses": list(listed),
        "use": False,
        "layers": [],
    }
    on = off.with_workers(WorkerPrefs(listed, use=True))
    assert on.backend.workers == listed
    save_preferences(db, on)
    assert load_preferences(db) == on
    assert load_preferences(db).backend.workers == listed


def test_stored_workers_that_are_no_workers_are_left_out(db):
    setting_rows.set_settings(
        db,
        {"workers": {"addresses": ["a:1", "[::1]:2", "no-port", "a:1", 7], "use": 1}},
    )
    # One valid address, once; "use" must be true itself.
    assert load_preferences(db).workers == WorkerPrefs(("a:1",), use=False)
    setting_rows.set_settings(db, {"workers": ["a:1"]})
    assert load_preferences(db).workers == WorkerPrefs()


def test_the_split_by_hand_is_kept_with_its_workers_and_loaded_with_them(db):
    listed = ("10.0.0.2:50052", "gpu-box:50053")
    on = Preferences().with_workers(WorkerPrefs(listed, use=True, layers=(20, 11)))
    assert on.backend.worker_layers == (20, 11)
    save_preferences(db, on)
    assert load_preferences(db) == on
    assert setting_rows.get_setting(db, "workers")["layers"] == [20, 11]
    # Use workers off: kept for later, not loaded with.
    off = on.with_workers(WorkerPrefs(listed, use=False, layers=(20, 11)))
    assert off.backend.worker_layers == ()
    save_preferences(db, off)
    assert load_preferences(db).workers.layers == (20, 11)
    # One count per worker, and a layer for one of them at least.
    for layers in [(20,), (0, 0)]:
        with pytest.raises(InvalidSetting):
            on.with_workers(WorkerPrefs(listed, use=True, layers=layers))


def test_a_stored_split_that_does_not_fit_its_workers_is_dropped(db):
    for stored in [
        {"addresses": ["a:1", "b:2"], "use": True, "layers": [3]},
        {"addresses": ["a:1", "b:2"], "use": True, "layers": [0, 0]},
        {"addresses": ["a:1", "b:2"], "use": True, "layers": [1, "x"]},
        {"addresses": ["a:1", "b:2"], "use": True, "layers": {"a:1": 1}},
    ]:
        setting_rows.set_settings(db, {"workers": stored})
        assert load_preferences(db).workers == WorkerPrefs(("a:1", "b:2"), use=True)
    # An address left out takes its split with it: the counts would shift.
    setting_rows.set_settings(
        db, {"workers": {"addresses": ["a:1", "[::1]:2"], "layers": [1, 2]}}
    )
    assert load_preferences(db).workers == WorkerPrefs(("a:1",))
    # The backend's own copy, edited to disagree: the default backend.
    setting_rows.set_settings(
        db, {"backend": {"workers": ["a:1"], "worker_layers": [1, 2]}}
    )
    assert load_preferences(db).backend == BackendSettings()
