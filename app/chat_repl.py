"""A minimal interactive chat in the terminal, on top of the conversation service.

Commands: ``/regen`` (another reply to the last message), ``/new`` (a new
conversation), ``/quit``. Ctrl+C stops a reply in progress and keeps it.
"""

from __future__ import annotations

import signal
import sys

from app.backend.sampling import SamplingParams
from app.conversation.service import ConversationService
from app.interrupt import StopRequest

HELP = "Type a message. /regen: another reply, /new: new conversation, /quit: exit."


def chat_loop(
    service: ConversationService, params: SamplingParams, system: str | None
) -> int:
    """Chat until end of input or ``/quit``; return the exit status."""
    assert service.engine is not None
    info = service.engine.info
    print(f"Arbor — {info.name} ({info.n_ctx} tokens of context). {HELP}")
    _conversation, node = service.new_conversation(system)
    stop = StopRequest()

    while True:
        try:
            line = input("\nyou> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            return 0
        if not line:
            continue
        if line == "/quit":
            return 0
        if line == "/new":
            _conversation, node = service.new_conversation(system)
            print("(new conversation)")
            continue
        previous = signal.signal(signal.SIGINT, stop.request)
        stop.requested = False
        print("arbor> ", end="", flush=True)
        try:
            on_token = lambda piece: print(piece, end="", flush=True)  # noqa: E731
            if line == "/regen":
                if service.path(node)[-1].role != "assistant":
                    print("(nothing to regenerate yet)")
                    continue
                reply = service.regenerate(node, params, on_token, stop)
            else:
                reply = service.send(node, line, params, on_token, stop)
        finally:
            signal.signal(signal.SIGINT, previous)
        node = reply.assistant_node
        s = reply.stats
        print(
            f"\n  [{s.generated_tokens} tokens, {s.tokens_per_second:.1f} tok/s, "
            f"context {s.context_tokens}/{s.n_ctx}, {s.stop_reason}]",
            file=sys.stderr,
        )
