"""Shared fixtures: tiny generated models, a fresh data folder per test, CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.backend.engine import LlamaEngine
from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from app.platform.paths import database_path
from storage.db import Database, open_database
from tests.helpers import gemma, real_vocab, template_corpus
from tests.helpers.presenter_session import Session
from tests.helpers.scripted import ScriptedEngine
from tests.helpers.tiny_model import (
    write_tiny_model,
    write_tiny_recurrent_model,
    write_tiny_swa_model,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of the tiny random-weight llama GGUF (generated once per session)."""
    return write_tiny_model(tmp_path_factory.mktemp("models") / "tiny.gguf")


@pytest.fixture(scope="session")
def qwen_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with Qwen 2.5's real chat template (read from the
    sdist): tools and calls in Hermes' ``<tool_call>`` syntax."""
    template = template_corpus.reference_templates()["Qwen-Qwen2.5-7B-Instruct"]
    return write_tiny_model(
        tmp_path_factory.mktemp("qwen") / "tiny-qwen.gguf", chat_template=template
    )


@pytest.fixture(scope="session")
def other_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second tiny model with different weights (same shapes and vocab)."""
    return write_tiny_model(
        tmp_path_factory.mktemp("models2") / "tiny-other.gguf", seed=99
    )


@pytest.fixture(scope="session")
def real_vocabs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """llama.cpp's vocab-only GGUFs and tokenizer tests, extracted once a session."""
    return real_vocab.extract_vocabs(tmp_path_factory.mktemp("real-vocabs"))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    """A fresh database file in ``tmp_path``, closed afterwards."""
    database = open_database(tmp_path / "arbor.sqlite3")
    yield database
    database.close()


@pytest.fixture
def open_service(tmp_path: Path):
    """Open services on one database in ``tmp_path``, on a ``ScriptedEngine``
    (or another engine class) at a 2,048-token context; closed afterwards."""
    opened = []

    def open_(model: Path, engine_class: type[LlamaEngine] = ScriptedEngine):
        db = open_database(tmp_path / "arbor.sqlite3")
        engine = engine_class(model, BackendSettings(n_ctx=2048, n_threads=1))
        opened.append((db, engine))
        return ConversationService(db, engine)

    yield open_
    for db, engine in opened:
        engine.close()
        db.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A fresh, empty data folder for one test."""
    folder = tmp_path / "data"
    folder.mkdir()
    return folder


class CliResult:
    """Exit status and output of one ``arbor`` process."""

    def __init__(self, completed: subprocess.CompletedProcess[str]) -> None:
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr

    @property
    def json(self) -> Any:
        """The JSON the command printed."""
        assert self.returncode == 0, self.stderr
        return json.loads(self.stdout)


def run_cli(
    *args: str | int | os.PathLike[str],
    timeout: float = 600,
    env: dict[str, str] | None = None,
    module: str = "app",
) -> CliResult:
    """Run ``python -m app ARGS`` in a new process, as a user would (in
    ``env`` where given; ``module`` runs another module the same way)."""
    completed = subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
    return CliResult(completed)


@pytest.fixture
def arbor(data_dir: Path, tiny_model: Path):
    """Run the CLI on the test's data folder and the tiny model; returns parsed JSON."""

    def call(
        *args: str | int, model: Path | None = None, extra: tuple[str, ...] = ()
    ) -> Any:
        result = run_cli(
            "--data-dir",
            data_dir,
            "--model",
            model or tiny_model,
            *extra,
            *map(str, args),
        )
        return result.json

    return call


@pytest.fixture(scope="session")
def tiny_swa_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sliding-window (Gemma-2 style) model; it gets per-node deltas too."""
    return write_tiny_swa_model(tmp_path_factory.mktemp("swa") / "tiny-swa.gguf")


@pytest.fixture(scope="session")
def tiny_recurrent_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Mamba model: recurrent state, kept as whole snapshots."""
    return write_tiny_recurrent_model(
        tmp_path_factory.mktemp("recurrent") / "tiny-mamba.gguf"
    )


@pytest.fixture(scope="session")
def gemma3_models() -> gemma.GemmaModels:
    """Gemma 3 270M base, and a copy with Gemma's chat template (both cached)."""
    base = gemma.base_model(gemma.cache_dir())
    template = template_corpus.reference_templates()[gemma.TEMPLATE_NAME]
    return gemma.GemmaModels(base=base, chat=gemma.chat_model(base, template))


@pytest.fixture
def open_session(data_dir: Path) -> Iterator[Callable[[], Session]]:
    """Open window presenters without a window on the test's database
    (``tests/helpers/presenter_session.py``); their models are freed afterwards."""
    opened: list[tuple[Session, Database]] = []

    def open_one() -> Session:
        db = open_database(database_path(data_dir))
        session = Session(db)
        opened.append((session, db))
        return session

    yield open_one
    for session, db in opened:
        session.engine.worker.close()
        db.close()
