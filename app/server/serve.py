"""``arbor serve``: bind, load the model, answer until interrupted.

The socket is bound before the model loads, so that a client can connect at
once (and hear 503 until it has loaded), and a port already taken fails
before minutes of loading. Only a loopback address is served without an
API key: another address reaches other machines.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from app.backend.settings import BackendSettings
from app.conversation.service import ConversationService
from app.server import DEFAULT_PORT
from app.server.engine_owner import EngineOwner
from app.server.http_api import ServerConfig, build_app

API_KEY_VARIABLE = "ARBOR_API_KEY"


class ServeError(Exception):
    """The server cannot start as asked (a message for a person)."""


@dataclass(frozen=True)
class ServeOptions:
    """How ``arbor serve`` was asked to run."""

    model: Path
    database: Path
    settings: BackendSettings
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    queue_limit: int = 8


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address of this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(options: ServeOptions, say: Callable[[str], None]) -> None:
    """Serve until SIGINT or SIGTERM; ``say`` prints what a person reads
    (where it listens, when the model is ready, one line per request)."""
    api_key = options.api_key or os.environ.get(API_KEY_VARIABLE) or None
    if not is_loopback(options.host) and api_key is None:
        raise ServeError(
            f"{options.host} can be reached from other machines: give an API key "
            f"(--api-key or {API_KEY_VARIABLE}), or serve on 127.0.0.1."
        )
    try:
        sock = socket.create_server((options.host, options.port))
    except OSError as exc:
        raise ServeError(
            f"Cannot listen on {options.host}:{options.port}: {exc.strerror or exc}."
        ) from exc
    asyncio.run(_serve(options, api_key, sock, say))


async def _serve(
    options: ServeOptions,
    api_key: str | None,
    sock: socket.socket,
    say: Callable[[str], None],
) -> None:
    owner = EngineOwner(lambda: _open_service(options), options.queue_limit)
    config = ServerConfig(
        model_id=options.model.stem,
        model_names=frozenset(
            {options.model.stem, options.model.name, str(options.model)}
        ),
        created=int(options.model.stat().st_mtime),
        api_key=api_key,
        cors_origins=options.cors_origins,
    )
    runner = web.AppRunner(
        build_app(owner, config, lambda line: print(line, file=sys.stderr, flush=True)),
        access_log=None,
        handle_signals=False,
    )
    await runner.setup()
    site = web.SockSite(runner, sock)
    await site.start()
    host, port = sock.getsockname()[:2]
    say(f"Listening on http://{host}:{port}/v1 (OpenAI-compatible); loading the model…")
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    try:
        try:
            await owner.start()
        except Exception as exc:
            raise ServeError(f"The model could not be loaded: {exc}") from exc
        say(f"Ready: {config.model_id}")
        await stopping.wait()
        say("Stopping…")
    finally:
        await runner.cleanup()
        await asyncio.to_thread(owner.close)


def _open_service(options: ServeOptions) -> ConversationService:
    # On the engine's thread: the model, the database and their service.
    from app.backend.engine import LlamaEngine
    from app.conversation.checkpoint_writer import CheckpointWriter
    from storage import repository
    from storage.db import open_database

    db = open_database(options.database)
    try:
        repository.mark_interrupted_generations(db)
        engine = LlamaEngine(options.model, options.settings)
    except BaseException:
        db.close()
        raise
    return ConversationService(db, engine, CheckpointWriter(db))
