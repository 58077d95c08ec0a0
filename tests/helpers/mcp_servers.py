"""Real MCP servers for the tests, made with the official SDK at test time.

``write_server`` writes one Python file that serves a few tools, over stdio
or, with ``--http PORT``, over Streamable HTTP on 127.0.0.1 (the SDK's
``MCPServer``, which was ``FastMCP`` before mcp 2):

- ``weather(city)``: city is "Paris" or "Oslo" (an enum: a grammar-shaped
  call of the tiny model always names one); answers "Sunny in CITY";
- ``crash()``: the process dies mid-call (``os._exit``);
- ``hang()``: never answers;
- ``big()``: returns 1 MB of text;
- ``fail()``: raises (the SDK answers with an isError result);
- ``secret(ctx)``: over HTTP, the ``X-Arbor-Test`` header it was sent;
- ``pid()``: the server's process id.

``--tools a,b`` keeps only those tools.

``mcp-server-time`` (PyPI) is the real third-party server:
``TIME_SERVER`` runs it over stdio.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

TIME_SERVER = (sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC")

_SERVER = '''
import os, sys, time
from typing import Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer

mcp = MCPServer("arbor-test")


@mcp.tool()
def weather(city: Literal["Paris", "Oslo"]) -> str:
    """The weather in a city."""
    print(f"weather asked for {city}", file=sys.stderr, flush=True)
    return f"Sunny in {city}"


@mcp.tool()
def crash() -> str:
    """Dies."""
    print("crashing now", file=sys.stderr, flush=True)
    os._exit(3)


@mcp.tool()
async def hang() -> str:
    """Never answers."""
    await anyio.sleep(3600)
    return "never"


@mcp.tool()
def big() -> str:
    """A megabyte of text."""
    return "0123456789abcdef" * 65536


@mcp.tool()
def fail() -> str:
    """Fails."""
    raise ValueError("the tool broke")


@mcp.tool()
def secret(ctx: Context) -> str:
    """The test header this request came with."""
    request = ctx.request_context.request
    return request.headers.get("x-arbor-test", "none") if request else "no http"


@mcp.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


arguments = sys.argv[1:]
if "--tools" in arguments:
    # Only these tools (a grammar-shaped call of the tiny model then names
    # one of them).
    kept = arguments[arguments.index("--tools") + 1].split(",")
    for tool in ("weather", "crash", "hang", "big", "fail", "secret", "pid"):
        if tool not in kept:
            mcp.remove_tool(tool)
if "--http" in arguments:
    port = int(arguments[arguments.index("--http") + 1])
    mcp.run("streamable-http", host="127.0.0.1", port=port)
else:
    mcp.run()
'''


# A server written without the SDK, that speaks the handshake and then
# answers every call with garbage: a line that is not JSON-RPC, then a
# result that is not a CallToolResult.
_GARBAGE = """
import json, sys

def answer(request, result=None, error=None):
    message = {"jsonrpc": "2.0", "id": request["id"]}
    message.update({"error": error} if error else {"result": result})
    print(json.dumps(message), flush=True)

for line in sys.stdin:
    request = json.loads(line)
    method = request.get("method")
    if "id" not in request:
        continue
    if method == "initialize":
        answer(request, {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "garbage", "version": "1"},
        })
    elif method == "tools/list":
        tool = {"name": "garbage", "inputSchema": {"type": "object"}}
        answer(request, {"tools": [tool]})
    elif method == "tools/call":
        print("this is not JSON-RPC", flush=True)
        answer(request, {"content": "not a list of blocks", "isError": "perhaps"})
    elif method == "ping":
        answer(request, {})
    else:
        answer(request, error={"code": -32601, "message": "no such method"})
"""


def write_garbage_server(folder: Path) -> Path:
    """Write the garbage server's script into ``folder``; return its path."""
    path = folder / "arbor_garbage_server.py"
    path.write_text(_GARBAGE, encoding="utf-8")
    return path


def write_server(folder: Path) -> Path:
    """Write the test server's script into ``folder``; return its path."""
    path = folder / "arbor_test_server.py"
    path.write_text(_SERVER, encoding="utf-8")
    return path


def stdio_command(script: Path, tools: str | None = None) -> list[str]:
    """The command line that serves ``script`` over stdio (only ``tools``,
    comma-separated, where given)."""
    return [sys.executable, str(script), *(["--tools", tools] if tools else [])]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def http_server(script: Path) -> Iterator[str]:
    """Serve ``script`` over Streamable HTTP on 127.0.0.1 in a subprocess;
    yield its endpoint's URL; stop it afterwards."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", port), timeout=0.2),
            ):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the test's HTTP MCP server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
