"""Running the server: ``arbor serve`` in the foreground, or a
``LocalServer`` on a thread of its own beside the window.

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
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

from app.platform.ports import DEFAULT_PORT
from app.server.engine_owner import EngineOwner, ServeEngineThread, Submit
from app.server.http_api import NotServed, ServedModel, ServerConfig, build_app

if TYPE_CHECKING:
    from app.backend.settings import BackendSettings
    from app.conversation.service import ConversationService

API_KEY_VARIABLE = "ARBOR_API_KEY"


class ServeError(Exception):
    """The server cannot start as asked (a message for a person)."""


@dataclass(frozen=True)
class Listen:
    """Where to listen, and who may call."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    queue_limit: int = 8


@dataclass(frozen=True)
class ServeOptions:
    """How ``arbor serve`` was asked to run."""

    model: Path
    database: Path
    settings: BackendSettings
    listen: Listen


def is_loopback(host: str) -> bool:
    """Whether ``host`` is an address of this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(listen: Listen) -> tuple[socket.socket, str | None]:
    """The listening socket and the API key in force (the option's, else
    ``ARBOR_API_KEY``); ``ServeError`` where that may not or cannot be."""
    api_key = listen.api_key or os.environ.get(API_KEY_VARIABLE) or None
    if not is_loopback(listen.host) and api_key is None:
        raise ServeError(
            f"{listen.host} can be reached from other machines: give an API key "
            f"(--api-key or {API_KEY_VARIABLE}), or serve on 127.0.0.1."
        )
    try:
        return socket.create_server((listen.host, listen.port)), api_key
    except OSError as exc:
        raise ServeError(
            f"Cannot listen on {listen.host}:{listen.port}: {exc.strerror or exc}."
        ) from exc


def base_url(sock: socket.socket) -> str:
    """The API's base URL on ``sock``."""
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}/v1"


async def _start_site(
    sock: socket.socket,
    owner: EngineOwner,
    config: ServerConfig,
    log_request: Callable[[str], None],
) -> web.AppRunner:
    runner = web.AppRunner(
        build_app(owner, config, log_request), access_log=None, handle_signals=False
    )
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


def serve(options: ServeOptions, say: Callable[[str], None]) -> None:
    """Serve until SIGINT or SIGTERM; ``say`` prints what a person reads
    (where it listens, when the model is ready); one line per request goes
    to stderr."""
    sock, api_key = bind(options.listen)
    asyncio.run(_serve(options, api_key, sock, say))


async def _serve(
    options: ServeOptions,
    api_key: str | None,
    sock: socket.socket,
    say: Callable[[str], None],
) -> None:
    engine = ServeEngineThread(lambda: _open_service(options))
    served: list[ServedModel] = []  # set once the model has loaded
    config = ServerConfig(
        lambda: served[0] if served else NotServed.LOADING,
        api_key,
        options.listen.cors_origins,
    )
    owner = EngineOwner(engine.submit, options.listen.queue_limit)
    runner = await _start_site(
        sock, owner, config, lambda line: print(line, file=sys.stderr, flush=True)
    )
    say(f"Listening on {base_url(sock)} (OpenAI-compatible); loading the model…")
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    try:
        try:
            await asyncio.wrap_future(engine.load())
        except Exception as exc:
            raise ServeError(f"The model could not be loaded: {exc}") from exc
        served.append(ServedModel.of_file(options.model))
        say(f"Ready: {served[0].id}")
        await stopping.wait()
        say("Stopping…")
    finally:
        await runner.cleanup()
        owner.close()
        await asyncio.to_thread(engine.close)


def _open_service(options: ServeOptions) -> ConversationService:
    # On the engine's thread: the model, the database and their service.
    from app.backend.engine import LlamaEngine
    from app.conversation.checkpoint_writer import CheckpointWriter
    from app.conversation.service import ConversationService
    from storage import node_rows
    from storage.db import open_database

    db = open_database(options.database)
    try:
        node_rows.mark_interrupted_generations(db)
        engine = LlamaEngine(options.model, options.settings)
    except BaseException:
        db.close()
        raise
    return ConversationService(db, engine, CheckpointWriter(db))


# How long ``LocalServer.start`` waits for its site to serve.
_START_S = 10.0


class LocalServer:
    """The server on a thread of its own, its jobs run by someone else's
    engine thread (the window's): ``start`` binds and serves, ``stop`` ends.

    ``served`` tells which model is loaded (or why none is); ``log_request`` is
    called on the server's thread with one line per request.
    """

    def __init__(
        self,
        submit: Submit,
        served: Callable[[], ServedModel | NotServed],
        log_request: Callable[[str], None],
    ) -> None:
        self._submit = submit
        self._served = served
        self._log_request = log_request
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self.url: str | None = None

    def start(self, listen: Listen) -> str:
        """Bind and begin serving; return the base URL. ``ServeError`` if
        the address cannot be used."""
        if self._thread is not None:
            raise ServeError("The local server is running already.")
        sock, api_key = bind(listen)
        config = ServerConfig(self._served, api_key, listen.cors_origins)
        owner = EngineOwner(self._submit, listen.queue_limit)
        started = threading.Event()
        failed: list[BaseException] = []
        self._loop = asyncio.new_event_loop()

        async def run() -> None:
            self._stopping = asyncio.Event()
            try:
                runner = await _start_site(sock, owner, config, self._log_request)
            except Exception as exc:  # said by ``start``, on the caller's thread
                failed.append(exc)
                sock.close()
                return
            finally:
                started.set()
            try:
                await self._stopping.wait()
            finally:
                await runner.cleanup()
                owner.close()

        self._thread = threading.Thread(
            target=self._loop.run_until_complete,
            args=(run(),),
            name="arbor-local-server",
            daemon=True,
        )
        self._thread.start()
        if not started.wait(_START_S) or failed:
            self.stop()
            sock.close()
            reason = f": {failed[0]}" if failed else f" within {_START_S:.0f} s"
            raise ServeError(f"The local server did not start{reason}.")
        self.url = base_url(sock)
        return self.url

    def stop(self) -> None:
        """Stop serving (a request running ends with its reply) and wait."""
        if self._thread is None or self._loop is None or self._stopping is None:
            return
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(30)
        self._loop.close()
        self._thread = self._loop = self._stopping = None
        self.url = None
