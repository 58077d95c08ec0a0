"""The MCP servers the user added, and what each tool may do without asking.

Kept as one JSON value in the database's settings table (key
``SERVERS_KEY``), so a database carries its user's tools with it, as it
carries the other preferences (``app.preferences``). A server is either a
command Arbor starts (stdio: the command, its arguments, environment
variables added to a minimal inherited one) or a URL it connects to
(Streamable HTTP, with headers). Nothing is added to what the user
entered: the command line stored is the one that runs.

Each tool has a permission: ``ask`` (the default: nothing runs without the
user's yes), ``always`` or ``never`` (the model is told it was denied).
A permission is the user's, not the conversation's: changing it changes no
start, so a conversation's history stays restorable.

Header values and environment variables are stored as entered, in the
database file, like the rest of a user's data.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from app.mcp.errors import ToolsError
from storage import setting_rows
from storage.db import Database

log = logging.getLogger(__name__)

SERVERS_KEY = "mcp.servers"

# Server names are short words: they name a server in the CLI
# (``NAME.TOOL``), in the log, and in the names of clashing tools.
_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# How long a server has to start and answer its handshake, and a call to
# return, in seconds; what of a result enters the context, in tokens of the
# model (a result is data the model reads: a 1 MB page would fill any
# context); how many rounds of calls one message may lead to.
START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 60.0
RESULT_TOKENS = 2_000
STEP_LIMIT = 8


class Permission(StrEnum):
    """What a tool may do when the model calls it."""

    ASK = "ask"  # run only with the user's yes (the default)
    ALWAYS = "always"  # run without asking
    NEVER = "never"  # never run: the model reads that it was denied


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server as the user added it.

    Attributes
    ----------
    name : str
        Its name (letters, digits, ``_`` and ``-``, at most 32).
    command : tuple of str
        A stdio server: the program and its arguments (empty for HTTP).
    env : dict
        Environment variables the program gets besides the few it inherits
        (``HOME``, ``PATH``, ...).
    url : str
        A Streamable HTTP server's endpoint ("" for stdio).
    headers : dict
        Headers sent with every HTTP request (an API key, say).
    enabled : bool
        Whether its tools are offered to the model.
    permissions : dict
        Tool name (as the server names it) -> permission; a tool not named
        here asks.
    """

    name: str
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    permissions: Mapping[str, Permission] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "http" if self.url else "stdio"

    def permission(self, tool: str) -> Permission:
        """The permission of the server's tool ``tool``."""
        return self.permissions.get(tool, Permission.ASK)

    def as_stored(self) -> dict[str, Any]:
        """The JSON value kept in the settings table."""
        stored: dict[str, Any] = {"name": self.name, "enabled": self.enabled}
        if self.url:
            stored.update(url=self.url, headers=dict(self.headers))
        else:
            stored.update(command=list(self.command), env=dict(self.env))
        stored["permissions"] = {t: str(p) for t, p in self.permissions.items()}
        return stored

    @classmethod
    def from_stored(cls, value: Any) -> ServerConfig | None:
        """A stored server, or None when the value is not one (logged)."""
        try:
            return _checked(
                cls(
                    name=value["name"],
                    command=tuple(value.get("command") or ()),
                    env=dict(value.get("env") or {}),
                    url=value.get("url") or "",
                    headers=dict(value.get("headers") or {}),
                    enabled=value.get("enabled", True) is not False,
                    permissions={
                        str(t): Permission(p)
                        for t, p in (value.get("permissions") or {}).items()
                    },
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError, ToolsError) as exc:
            log.warning("Ignoring a stored MCP server that is not valid: %s", exc)
            return None


def stdio_server(
    name: str, command: Iterable[str], env: Mapping[str, str] | None = None
) -> ServerConfig:
    """A server Arbor starts: ``command`` (program and arguments), checked.

    Raises ``ToolsError`` for a bad name, an empty command or a bad variable.
    """
    return _checked(ServerConfig(name, tuple(command), dict(env or {})))


def http_server(
    name: str, url: str, headers: Mapping[str, str] | None = None
) -> ServerConfig:
    """A Streamable HTTP server at ``url``, checked (see ``stdio_server``)."""
    return _checked(ServerConfig(name, url=url, headers=dict(headers or {})))


def _checked(server: ServerConfig) -> ServerConfig:
    if not isinstance(server.name, str) or not _SERVER_NAME.match(server.name):
        raise ToolsError(
            f"A server's name is 1 to 32 letters, digits, '_' or '-', not "
            f"{server.name!r}."
        )
    if server.url:
        if server.command:
            raise ToolsError("A server has a command or a URL, not both.")
        if not re.match(r"^https?://[^/\s]+", server.url):
            raise ToolsError(f"{server.url!r} is no http:// or https:// URL.")
        for key, value in server.headers.items():
            if not _HEADER_NAME.match(key) or "\n" in value or "\r" in value:
                raise ToolsError(f"{key!r} is no valid HTTP header.")
    else:
        if not server.command or not server.command[0].strip():
            raise ToolsError(
                f"Server {server.name!r} needs a command to start it, or a URL."
            )
        for key in server.env:
            if not _ENV_NAME.match(key):
                raise ToolsError(f"{key!r} is no environment variable name.")
    if not all(isinstance(v, str) for v in (*server.command, *server.env.values())):
        raise ToolsError("A command's arguments and variables are text.")
    return server


def load_servers(db: Database) -> list[ServerConfig]:
    """The servers the user added, in the order added."""
    stored = setting_rows.get_setting(db, SERVERS_KEY, [])
    servers = [ServerConfig.from_stored(v) for v in stored or []]
    return [server for server in servers if server is not None]


def save_servers(db: Database, servers: Iterable[ServerConfig]) -> None:
    """Store ``servers`` as the user's (replacing those stored)."""
    setting_rows.set_setting(db, SERVERS_KEY, [s.as_stored() for s in servers])


def find_server(servers: Iterable[ServerConfig], name: str) -> ServerConfig:
    """The server called ``name``; ``ToolsError`` when there is none."""
    for server in servers:
        if server.name == name:
            return server
    raise ToolsError(
        f"There is no MCP server called {name!r} (see `arbor tools list`)."
    )


def add_server(db: Database, server: ServerConfig) -> None:
    """Add ``server``; ``ToolsError`` if its name is taken."""
    servers = load_servers(db)
    if any(s.name == server.name for s in servers):
        raise ToolsError(
            f"There is already a server called {server.name!r}: remove it first."
        )
    save_servers(db, [*servers, server])


def remove_server(db: Database, name: str) -> ServerConfig:
    """Remove the server called ``name`` and return it."""
    servers = load_servers(db)
    gone = find_server(servers, name)
    save_servers(db, [s for s in servers if s.name != name])
    return gone


def set_enabled(db: Database, name: str, enabled: bool) -> None:
    """Offer the tools of server ``name`` to the model, or stop offering them."""
    _change(db, name, lambda s: replace(s, enabled=enabled))


def set_permission(db: Database, name: str, tool: str, permission: Permission) -> None:
    """Set the permission of server ``name``'s tool ``tool``."""
    if not tool:
        raise ToolsError("Name the tool: SERVER.TOOL.")

    def change(server: ServerConfig) -> ServerConfig:
        permissions = dict(server.permissions)
        if permission == Permission.ASK:
            permissions.pop(tool, None)  # the default, stored as nothing
        else:
            permissions[tool] = permission
        return replace(server, permissions=permissions)

    _change(db, name, change)


def _change(
    db: Database, name: str, change: Callable[[ServerConfig], ServerConfig]
) -> None:
    servers = load_servers(db)
    find_server(servers, name)
    save_servers(db, [change(s) if s.name == name else s for s in servers])
