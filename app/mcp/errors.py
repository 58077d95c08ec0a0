"""The tools' failures a person can act on (a server that does not start,
a name that is taken): one line in the CLI, a dialog in the window."""

from __future__ import annotations

from app.conversation.errors import ServiceError


class ToolsError(ServiceError):
    """A request about MCP servers or their tools that cannot be done as
    asked; the message is written for a person.

    A subclass of ``ServiceError``, so the CLI and the window already show
    it as a user error. A tool *call* that fails never raises this: it
    becomes a result the model reads (``app.mcp.results``).
    """
