"""The first visit of an imported path: a path that cannot fit the context is
refused before any span is rendered or any row written (real tiny model, real
SQLite file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backend.engine import LlamaEngine
from app.backend.errors import ContextFullError
from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from storage import node_rows
from storage.db import open_database
from tools.scale_first_visit import imported_path


def test_a_path_that_cannot_fit_is_refused_before_any_work(
    tmp_path: Path, tiny_model: Path
):
    db = open_database(tmp_path / "arbor.sqlite3")
    settings = BackendSettings(n_ctx=2048, n_threads=1)
    try:
        with LlamaEngine(tiny_model, settings) as engine:
            service = ConversationService(db, engine)
            last = imported_path(db, 3001)
            with pytest.raises(ContextFullError, match="context holds 2,048"):
                service.restore(last)
            # Nothing was rendered on the way: every span is still unmade.
            path = node_rows.get_path(db, last)
            assert all(n.vocab_id is None and not n.tokens for n in path)
            # A short branch of the same conversation still opens.
            stats = service.restore(path[4].id)
            assert stats.reprocessed_tokens > 0
            service.close()
    finally:
        db.close()
