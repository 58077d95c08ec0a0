"""A conversation service on the real backend and a real SQLite file, opened
and closed around a block: for tests that open the same file more than once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from storage.db import open_database


@contextmanager
def opened_service(
    path: Path, model: Path, settings: BackendSettings
) -> Iterator[ConversationService]:
    """A service on the database at ``path`` with ``model`` loaded; its
    checkpoints written, the model and the database closed after."""
    db = open_database(path)
    try:
        with (
            LlamaEngine(model, settings) as engine,
            ConversationService(db, engine) as service,
        ):
            yield service
    finally:
        db.close()
