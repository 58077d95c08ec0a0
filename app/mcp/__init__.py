"""Tools from MCP servers: the model calls them, Arbor runs them.

Qt-free, and nothing here loads llama.cpp:

- ``config``: the servers the user added and each tool's permission, kept
  in the database's settings table;
- ``client``: the sessions with those servers (the official ``mcp`` SDK on
  a private event loop thread), behind a synchronous facade that the CLI
  and the engine thread call;
- ``results``: what a tool's result becomes in the context (text, capped);
- ``toolbox``: the tools offered to the model, named so that two servers'
  tools never clash, and the runner the tool loop
  (``app.conversation.tool_loop``) calls.

The SDK (and pydantic, starlette, httpx2 with it) is imported only by
``client``, when a server is first needed.
"""
