"""A minimal interactive chat in the terminal, on top of the conversation service.

Commands: ``/regen`` (another reply to the last message), ``/new`` (a new
conversation), ``/quit``. Ctrl+C stops a reply in progress and keeps it, or a
long message being read (kept, unanswered; the chat goes on where it was). A
failed message (too long for the context, ...) is reported and the chat goes
on; end of input (Ctrl+D) ends it.
"""

from __future__ import annotations

import signal
import sys

from app.backend.errors import Interrupted
from app.backend.values import SamplingParams
from app.cli.interrupt import StopRequest
from app.conversation.errors import USER_ERRORS
from app.conversation.results import Reply
from app.conversation.service import ConversationService
from app.conversation.streams import Streams
from storage.values import Role

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
    # Ctrl+C also stops a long message being read, between its batches.
    service.engine.decode_watch = stop.watch_decode

    while True:
        line = _read_line()
        if line is None or line == "/quit":
            return 0
        if not line:
            continue
        if line == "/new":
            _conversation, node = service.new_conversation(system)
            print("(new conversation)")
            continue
        try:
            reply = _answer(service, node, line, params, stop)
        except Interrupted as exc:
            # Ctrl+C while the message was read: it stays stored, unanswered,
            # as after Stop in the window; the next line continues from here.
            print(f"\narbor: stopped: {exc} Nothing was answered.", file=sys.stderr)
            continue
        except USER_ERRORS as exc:
            # The conversation stays where it was: the next line continues it.
            print(f"\narbor: error: {exc}", file=sys.stderr)
            continue
        if reply is not None:
            node = reply.assistant_node
            _print_stats(reply)


def _read_line() -> str | None:
    """The next line typed, stripped; None at end of input or on Ctrl+C."""
    try:
        line = input("\nyou> ").strip()
    except (EOFError, KeyboardInterrupt):
        print()
        return None
    try:
        # Bytes that are not UTF-8 arrive as lone surrogates (the CLI reads
        # stdin with surrogateescape) and would fail in the tokenizer.
        line.encode("utf-8")
    except UnicodeEncodeError:
        print("arbor: error: the message is not valid UTF-8", file=sys.stderr)
        return ""
    return line


def _answer(
    service: ConversationService,
    node: int,
    line: str,
    params: SamplingParams,
    stop: StopRequest,
) -> Reply | None:
    """Reply to ``line`` after ``node`` (or regenerate); None if nothing to do."""
    previous = signal.signal(signal.SIGINT, stop.request)
    stop.requested = False
    print("arbor> ", end="", flush=True)
    try:
        streams = Streams(
            on_token=lambda piece: print(piece, end="", flush=True), should_stop=stop
        )
        if line == "/regen":
            if service.path(node)[-1].role != Role.ASSISTANT:
                print("(nothing to regenerate yet)")
                return None
            return service.regenerate(node, params, streams)
        return service.send(node, line, params, streams)
    finally:
        signal.signal(signal.SIGINT, previous)


def _print_stats(reply: Reply) -> None:
    s = reply.stats
    print(
        f"\n  [{s.generated_tokens} tokens, {s.tokens_per_second:.1f} tok/s, "
        f"context {s.context_tokens}/{s.n_ctx}, {s.stop_reason}]",
        file=sys.stderr,
    )
