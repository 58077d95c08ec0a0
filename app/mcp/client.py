"""Sessions with MCP servers, through the official ``mcp`` SDK, behind a
synchronous facade.

The SDK is async (anyio); Arbor's callers are not: the CLI runs on its main
thread, the window's jobs on the engine thread. ``McpClients`` therefore
runs one private asyncio event loop on a daemon thread of its own, holds one
session per server there, and answers its callers through futures they wait
on, a tenth of a second at a time, so that a caller's Stop is seen during a
call. No Qt here.

A session's life:

- it starts when a server is first needed (listing its tools, calling one):
  a stdio server is a child process (its own session and process group, so
  the SDK can end its whole tree), an HTTP server one ``httpx2`` client
  with the user's headers; each session is one task on the loop that
  enters the SDK's ``Client`` and waits to be told to close;
- a stdio server's stderr goes, line by line, to Arbor's log (logger
  ``app.mcp.servers``), read by a thread of its own from a pipe;
- a call that hangs past its timeout, a server that goes away, and a
  transport that fails end the session; the next use starts a new one. A
  call the user stops ends the session too: for a stdio server that ends
  the process, so the tool really stops;
- ``close`` (Arbor quitting, the CLI command ending) closes every session
  within a bound: the SDK closes a stdio server's stdin, waits two
  seconds, then terminates and kills its process group.

Whatever goes wrong in a call becomes a ``ToolOutcome`` (``app.mcp.results``)
that the model reads; nothing raises out of ``call``. Listing tools raises
``ToolsError``, for the user to read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from app.mcp.config import CALL_TIMEOUT_S, START_TIMEOUT_S, ServerConfig
from app.mcp.errors import ToolsError
from app.mcp.results import Outcome, ToolOutcome, failure, from_result

if TYPE_CHECKING:
    from mcp import Client

log = logging.getLogger(__name__)
server_log = logging.getLogger("app.mcp.servers")

_T = TypeVar("_T")

# How often a waiting caller looks at its Stop.
_POLL_S = 0.1
# What closing a session may take: the SDK's own bounds (flush, 2 s for the
# server to exit once its stdin closes, 2 s after SIGTERM, 2 s after
# SIGKILL) and some room.
_CLOSE_S = 10.0
# Pages of a tool listing read at most (a server that paginates forever).
_MAX_PAGES = 50
# A session unused for this long is pinged before its next use: a server
# that went away meanwhile is then started again, instead of failing a call.
_IDLE_S = 30.0
_PING_S = 5.0


@dataclass(frozen=True)
class ToolInfo:
    """A tool as its server lists it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]


class McpClients:
    """The sessions with a set of MCP servers, for synchronous callers.

    Parameters
    ----------
    servers
        The servers that may be used (``app.mcp.config``).
    start_timeout_s
        How long a server has to start and finish the MCP handshake.

    Thread-safe: any thread may list and call. Use as a context manager, or
    call ``close``; servers left open are closed when the object is
    collected or Python exits.
    """

    def __init__(
        self, servers: Iterable[ServerConfig], start_timeout_s: float = START_TIMEOUT_S
    ) -> None:
        self._servers = {server.name: server for server in servers}
        self._start_timeout_s = start_timeout_s
        self._runtime = _Runtime()
        # Closes what is left when this object goes, or at exit; holds no
        # reference to it.
        self._finalizer = weakref.finalize(self, self._runtime.close)

    def __enter__(self) -> McpClients:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def servers(self) -> list[ServerConfig]:
        """The servers these sessions are with."""
        return list(self._servers.values())

    def close(self) -> None:
        """Close every session and stop the loop (servers stop)."""
        self._finalizer()

    # --- listing --------------------------------------------------------------

    def list_tools(self, name: str) -> list[ToolInfo]:
        """The tools of server ``name``, starting it if needed.

        Raises ``ToolsError`` with the reason when it cannot be started,
        reached or listed.
        """
        return self._runtime.wait(self._list_tools(name), None)

    def list_all(self) -> dict[str, list[ToolInfo] | ToolsError]:
        """The tools of every server (started together), or why not."""

        async def all_of() -> dict[str, list[ToolInfo] | ToolsError]:
            names = list(self._servers)
            found = await asyncio.gather(
                *(self._list_tools(name) for name in names), return_exceptions=True
            )
            listed: dict[str, list[ToolInfo] | ToolsError] = {}
            for name, tools in zip(names, found, strict=True):
                if isinstance(tools, BaseException) and not isinstance(
                    tools, ToolsError
                ):
                    raise tools
                listed[name] = tools
            return listed

        return self._runtime.wait(all_of(), None)

    async def _list_tools(self, name: str) -> list[ToolInfo]:
        session = await self._session(name)
        try:
            tools: list[ToolInfo] = []
            cursor: str | None = None
            for _page in range(_MAX_PAGES):
                listed = await asyncio.wait_for(
                    session.client.list_tools(cursor=cursor), self._start_timeout_s
                )
                tools.extend(
                    ToolInfo(name, t.name, t.description or "", dict(t.input_schema))
                    for t in listed.tools
                )
                cursor = listed.next_cursor
                if cursor is None:
                    break
            return tools
        except Exception as exc:
            await self._drop(name, session)
            raise ToolsError(
                f"MCP server {name!r} did not list its tools: {_reason(exc)}"
            ) from None

    # --- calling --------------------------------------------------------------

    def call(
        self,
        server: str,
        tool: str,
        arguments: dict[str, Any],
        timeout_s: float = CALL_TIMEOUT_S,
        should_stop: Callable[[], bool] | None = None,
    ) -> ToolOutcome:
        """Call ``tool`` of ``server`` with ``arguments``; never raises.

        ``timeout_s`` bounds the call itself (starting the server has its
        own bound); ``should_stop``, polled while waiting, stops the call.
        """
        try:
            return self._runtime.wait(
                self._call(server, tool, arguments, timeout_s),
                should_stop,
                # A backstop: the call's own timeouts end it first.
                self._start_timeout_s + timeout_s + _CLOSE_S,
            )
        except _Stopped:
            return failure(Outcome.STOPPED, "the user stopped this call.")
        except TimeoutError:
            return failure(
                Outcome.TIMEOUT, f"the tool did not answer within {timeout_s:g} s."
            )
        except ToolsError as exc:
            return failure(Outcome.UNAVAILABLE, str(exc))
        except Exception as exc:  # a bug of ours or the SDK's: the model still reads
            log.exception("An MCP call failed in Arbor")
            return failure(Outcome.FAILED, f"the call failed in Arbor: {_reason(exc)}")

    async def _call(
        self, name: str, tool: str, arguments: dict[str, Any], timeout_s: float
    ) -> ToolOutcome:
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
        from pydantic import ValidationError

        session = await self._session(name)
        try:
            result = await asyncio.wait_for(
                session.client.call_tool(
                    tool, arguments, read_timeout_seconds=timeout_s
                ),
                # The SDK's read timeout ends it first; this, if that hangs.
                timeout_s + 1.0,
            )
        except asyncio.CancelledError:
            # Stopped: the session goes, so that a stdio tool really stops;
            # at once for the next call, its process in the background.
            self._forget(name, session)
            _spawn(session.close())
            raise
        except TimeoutError:
            await self._drop(name, session)
            return _timed_out(timeout_s)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                await self._drop(name, session)
                return _timed_out(timeout_s)
            if exc.code == CONNECTION_CLOSED:
                await self._drop(name, session)
                return failure(
                    Outcome.CRASHED,
                    f"the MCP server {name!r} went away during the call "
                    "(it is started again for the next one).",
                )
            # The server answered with a JSON-RPC error: it is still there.
            return failure(
                Outcome.FAILED, f"the MCP server {name!r} refused the call: {exc}"
            )
        except ValidationError as exc:
            return failure(
                Outcome.FAILED,
                f"the MCP server {name!r} returned a result that is not valid "
                f"MCP ({exc.error_count()} errors).",
            )
        except Exception as exc:
            await self._drop(name, session)
            return failure(
                Outcome.FAILED, f"the call to {name!r} failed: {_reason(exc)}"
            )
        return from_result(result)

    # --- sessions -------------------------------------------------------------

    async def _session(self, name: str) -> _Session:
        """The open session with ``name``, started now if there is none."""
        runtime = self._runtime
        server = self._servers.get(name)
        if server is None:
            raise ToolsError(f"There is no MCP server called {name!r}.")
        async with runtime.lock(name):
            session = runtime.sessions.get(name)
            if session is not None and session.alive:
                if await session.still_there():
                    return session
                await self._drop(name, session)
            session = _Session(server)
            runtime.sessions[name] = session
            try:
                await session.start(self._start_timeout_s)
            except BaseException:
                runtime.sessions.pop(name, None)
                raise
            return session

    async def _drop(self, name: str, session: _Session) -> None:
        """End ``session``; the next use of ``name`` starts a new one."""
        self._forget(name, session)
        await session.close()

    def _forget(self, name: str, session: _Session) -> None:
        session.alive = False
        if self._runtime.sessions.get(name) is session:
            del self._runtime.sessions[name]


def _timed_out(timeout_s: float) -> ToolOutcome:
    return failure(
        Outcome.TIMEOUT,
        f"the tool did not answer within {timeout_s:g} s (its server is "
        "started again for the next call).",
    )


class _Stopped(Exception):
    """The caller stopped what it waited for."""


class _Runtime:
    """The event loop thread and the sessions on it; what ``McpClients``
    closes. Apart from it so that closing needs no reference to it."""

    def __init__(self) -> None:
        self.sessions: dict[str, _Session] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._guard = threading.Lock()
        self._closed = False

    def lock(self, name: str) -> asyncio.Lock:
        """The lock of server ``name``'s session (on the loop)."""
        return self._locks.setdefault(name, asyncio.Lock())

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self._closed:
                raise ToolsError("The MCP servers were closed.")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="mcp-client", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def wait(
        self,
        work: Coroutine[Any, Any, _T],
        should_stop: Callable[[], bool] | None,
        timeout_s: float | None = None,
    ) -> _T:
        """Run ``work`` on the loop and wait for it; ``should_stop`` (polled)
        cancels it and raises ``_Stopped``; past ``timeout_s``, cancelled
        and ``TimeoutError``."""
        try:
            loop = self._running_loop()
        except BaseException:
            work.close()
            raise
        future = asyncio.run_coroutine_threadsafe(work, loop)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                return future.result(_POLL_S)
            except concurrent.futures.TimeoutError:
                if should_stop is not None and should_stop():
                    future.cancel()
                    raise _Stopped from None
                if deadline is not None and time.monotonic() > deadline:
                    future.cancel()
                    raise TimeoutError from None

    def close(self) -> None:
        """Close every session, then stop the loop and its thread."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return

        async def close_all() -> None:
            sessions = list(self.sessions.values())
            self.sessions.clear()
            # With the sessions a Stop ended, whose closing may still run.
            closing = [t for t in _background if t.get_loop() is loop]
            await asyncio.gather(*(s.close() for s in sessions), *closing)

        try:
            asyncio.run_coroutine_threadsafe(close_all(), loop).result(_CLOSE_S + 2)
        except Exception:
            log.warning("MCP servers did not all close in time", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(_CLOSE_S)
        if not thread.is_alive():
            loop.close()


_background: set[asyncio.Task[Any]] = set()


def _spawn(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` on the loop without waiting (a reference is kept until
    it ends, as asyncio asks)."""
    task = asyncio.ensure_future(work)
    _background.add(task)
    task.add_done_callback(_background.discard)


class _Session:
    """One server's session: a task on the loop that enters the SDK's
    ``Client`` and holds it until ``close``."""

    def __init__(self, server: ServerConfig) -> None:
        self.server = server
        self._client: Client | None = None
        self._closing = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.alive = False
        self._used = time.monotonic()

    @property
    def client(self) -> Client:
        """The SDK's client, once started."""
        assert self._client is not None
        return self._client

    async def still_there(self) -> bool:
        """Whether the server still answers: asked with a ping when the
        session has been idle a while."""
        now = time.monotonic()
        if now - self._used < _IDLE_S:
            self._used = now
            return True
        try:
            await asyncio.wait_for(self.client.send_ping(), _PING_S)
        except Exception as exc:
            log.info(
                "MCP server %r no longer answers: %s", self.server.name, _reason(exc)
            )
            return False
        self._used = time.monotonic()
        return True

    async def start(self, timeout_s: float) -> None:
        """Start the server and finish the handshake within ``timeout_s``;
        ``ToolsError`` with the reason otherwise."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._hold(ready, timeout_s))
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout_s)
        except TimeoutError:
            await self.close()
            raise ToolsError(
                f"MCP server {self.server.name!r} did not start within {timeout_s:g} s."
            ) from None
        except asyncio.CancelledError:
            await self.close()
            raise
        except Exception as exc:
            await self.close()
            raise ToolsError(
                f"MCP server {self.server.name!r} could not be started: {_reason(exc)}"
            ) from None

    async def _hold(self, ready: asyncio.Future[None], timeout_s: float) -> None:
        from mcp import Client
        from mcp_types import Implementation

        from app.platform.version import __version__

        name = self.server.name
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await _transport(self.server, stack)
                client = Client(
                    transport,
                    read_timeout_seconds=timeout_s,
                    client_info=Implementation(name="arbor", version=__version__),
                )
                await stack.enter_async_context(client)
                self._client, self.alive = client, True
                log.info("MCP server %r started", name)
                ready.set_result(None)
                await self._closing.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.info("MCP server %r ended: %s", name, _reason(exc))
        finally:
            self.alive = False
            if not ready.done():
                ready.cancel()

    async def close(self) -> None:
        """End the session (the server stops); bounded."""
        self.alive = False
        self._closing.set()
        task = self._task
        if task is None or task.done():
            return
        if self._client is None:
            # Still starting (the handshake hangs): nothing to close politely;
            # the SDK's shutdown still ends the process, shielded.
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), _CLOSE_S)
        except TimeoutError:
            log.warning("MCP server %r did not close in time", self.server.name)
            task.cancel()
        except asyncio.CancelledError:
            # The session's task was cancelled (above), not this one.
            current = asyncio.current_task()
            if not task.cancelled() or (current is not None and current.cancelling()):
                raise
        except Exception:
            log.debug("closing MCP server %r", self.server.name, exc_info=True)


async def _transport(server: ServerConfig, stack: contextlib.AsyncExitStack) -> Any:
    """The SDK transport for ``server``, its resources on ``stack``."""
    if server.url:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        # The SDK's own defaults (30 s to connect, 300 s between events of a
        # stream), with the user's headers.
        http = httpx2.AsyncClient(
            headers=dict(server.headers), timeout=httpx2.Timeout(30.0, read=300.0)
        )
        await stack.enter_async_context(http)
        return streamable_http_client(server.url, http_client=http)
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    errlog = _stderr_to_log(server.name)
    stack.callback(errlog.close)
    program, *arguments = server.command
    parameters = StdioServerParameters(
        command=program, args=arguments, env=dict(server.env) or None
    )
    return stdio_client(parameters, errlog=errlog)


def _stderr_to_log(name: str) -> TextIO:
    """A file to give a server as its stderr; each line it writes goes to
    the log. The reading thread ends when the server and Arbor's end of
    the pipe are both closed."""
    read_end, write_end = os.pipe()

    def read() -> None:
        with open(read_end, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                server_log.info("[%s] %s", name, line.rstrip())

    threading.Thread(target=read, name=f"mcp-stderr-{name}", daemon=True).start()
    # Closed by the session's exit stack, once the server has its copy.
    return open(write_end, "w", encoding="utf-8")


def _reason(exc: BaseException) -> str:
    """A failure in one line: the innermost exceptions of a group, named."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(inner) for inner in exc.exceptions)
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
