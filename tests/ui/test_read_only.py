"""A database on read-only media: the window reads it and says it cannot write."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from app.platform.paths import database_path
from app.qt.gui import build_window
from storage import conversation_rows, node_rows
from storage.db import open_database
from tests.ui.conftest import wait_idle


def _mount(mount: Path, *options: str) -> bool:
    result = subprocess.run(
        ["mount", *options, str(mount)], capture_output=True, text=True
    )
    return result.returncode == 0


@pytest.fixture
def read_only_data(tmp_path: Path):
    """A data folder with one conversation, on a tmpfs remounted read-only."""
    mount = tmp_path / "media"
    mount.mkdir()
    if os.geteuid() != 0 or not _mount(mount, "-t", "tmpfs", "-o", "size=8m", "tmpfs"):
        pytest.skip("mounting a tmpfs needs root")
    try:
        db = open_database(database_path(mount))
        _conversation, root = conversation_rows.create_conversation(
            db, "Trip notes", None
        )
        user = node_rows.add_node(db, root.id, "user", "Where to go?")
        node_rows.add_node(db, user.id, "assistant", "The mountains.")
        db.close()
        assert _mount(mount, "-o", "remount,ro")
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_the_window_reads_and_says_it_cannot_write(qtbot, read_only_data, tiny_model):
    db = open_database(database_path(read_only_data))
    assert db.read_only
    window = build_window(db, tiny_model, gpu_supported=False)
    qtbot.addWidget(window)
    window.show()
    wait_idle(qtbot, window)
    try:
        assert window.read_only_banner.isVisible()
        assert "you can read, not write" in window.read_only_banner.text()
        assert "read-only file system" in window.read_only_banner.text()
        assert [c.text for c in window.transcript.cards] == [
            "Where to go?",
            "The mountains.",
        ]
        assert window.composer.edit.isReadOnly()
        assert not window.composer.send_button.isEnabled()
        assert "Read-only" in window.composer.edit.placeholderText()
        for action in (window.new_action, window.rename_action, window.settings_action):
            assert not action.isEnabled()
        assert window.model_info is None  # no model: nothing could be written
        card = window.transcript.cards[-1]
        assert card.copy_button.isEnabled() and not card.regenerate_button.isEnabled()

        root = window.tree_model.snapshot.root_id
        window.activate(root)  # browsing the tree still works, and saves nothing
        wait_idle(qtbot, window)
        assert window.active_id == root
        assert not [
            w
            for w in QApplication.topLevelWidgets()
            if isinstance(w, QMessageBox) and w.isVisible()
        ]
    finally:
        window.close()
        db.close()
