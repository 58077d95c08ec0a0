"""The HTTP side: OpenAI's ``/v1/models`` and ``/v1/chat/completions``, on
aiohttp (a maintained asyncio server and client in one package).

Every failure answers with OpenAI's error body, ``{"error": {"message",
"type", "param", "code"}}``, and the status a client library maps to its
exceptions; none shows a traceback. Work on the model goes to the
``EngineOwner``'s thread; this side only parses, waits and writes.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from aiohttp import web

from app.backend.errors import ContextFullError
from app.conversation.errors import USER_ERRORS
from app.conversation.results import Reply
from app.conversation.streams import Streams
from app.preferences import keep_checkpoints_within_budget
from app.server import client_chats, text_completions
from app.server.client_chats import ClientChat
from app.server.completion import Completion, complete
from app.server.engine_owner import Background, Busy, EngineJob, EngineOwner
from app.server.requests import BadRequest, ChatRequest, parse_chat_request
from storage.errors import NotFound, StorageUnavailable

log = logging.getLogger(__name__)

# The largest request body taken (a long agent conversation is well under).
MAX_BODY_BYTES = 8 * 1024 * 1024
CONVERSATION_HEADER = "X-Arbor-Conversation"
# Seconds a refused client is told to wait: a reply of a small local model.
_RETRY_BUSY_S = 2
_RETRY_LOADING_S = 5

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# What a reply cost, for the request log's line.
_NOTE = web.ResponseKey("arbor_note", str)


@dataclass(frozen=True)
class ServedModel:
    """The model the server answers with."""

    id: str  # what GET /v1/models lists
    names: frozenset[str]  # what a request's "model" may say
    created: int  # the model file's time, for /v1/models

    @classmethod
    def of_file(cls, path: Path) -> ServedModel:
        """The model in the GGUF file at ``path``, named by its file."""
        return cls(
            path.stem,
            frozenset({path.stem, path.name, str(path)}),
            int(path.stat().st_mtime),
        )


class NotServed(Enum):
    """Why no model is served now."""

    LOADING = "loading"  # one is being loaded: ask again shortly
    NO_MODEL = "no_model"  # none is loaded (the window has none open)


@dataclass(frozen=True)
class ServerConfig:
    """The server's options, and where it learns the model being served."""

    served: Callable[[], ServedModel | NotServed]
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()


def build_app(
    owner: EngineOwner,
    config: ServerConfig,
    log_request: Callable[[str], None],
) -> web.Application:
    """The aiohttp application; ``log_request`` gets one line per request."""
    app = web.Application(
        client_max_size=MAX_BODY_BYTES,
        middlewares=[
            _logged(log_request),
            _errors_as_json,
            _cors(config.cors_origins),
            _authorized(config.api_key),
        ],
    )
    api = _Api(owner, config)
    app.router.add_get("/v1/models", api.models)
    app.router.add_post("/v1/chat/completions", api.chat_completions)
    app.router.add_post("/v1/completions", api.completions)
    return app


@dataclass(frozen=True)
class ApiError:
    """An OpenAI-style error: its status, body and headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] | None = None

    def response(self) -> web.Response:
        """The error as a whole HTTP response."""
        return web.json_response(self.body, status=self.status, headers=self.headers)


def api_error(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> ApiError:
    """OpenAI's error body with ``status``."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return ApiError(status, body, headers)


def error_response(
    status: int,
    message: str,
    kind: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    """OpenAI's error body with ``status``, as a response."""
    return api_error(status, message, kind, param, code, headers).response()


# --- middlewares ---------------------------------------------------------------


def _logged(log_request: Callable[[str], None]) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        response = await handler(request)
        ms = (time.perf_counter() - started) * 1000
        note = response.get(_NOTE, "")
        log_request(
            f"{request.method} {request.path} {response.status} {ms:.0f} ms{note}"
        )
        return response

    return middleware


@web.middleware
async def _errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    # aiohttp's own refusals (unknown path, wrong method, body too large)
    # become OpenAI error bodies too; anything unexpected is a 500 that is
    # logged, never a traceback in the body.
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status == 413:
            return error_response(
                413,
                f"The request body is larger than {MAX_BODY_BYTES:,} bytes.",
                code="request_too_large",
            )
        if exc.status >= 400:
            return error_response(exc.status, exc.reason, code=None)
        raise
    except Exception:
        log.exception("the request failed")
        return error_response(500, "The server failed; see its log.", "server_error")


def _cors(origins: tuple[str, ...]) -> Any:
    allowed = set(origins)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        permitted = origin is not None and ("*" in allowed or origin in allowed)
        if request.method == "OPTIONS" and permitted:
            response: web.StreamResponse = web.Response(status=204)
        else:
            response = await handler(request)
        if permitted and not response.prepared:
            response.headers["Access-Control-Allow-Origin"] = (
                "*" if "*" in allowed else str(origin)
            )
            response.headers["Access-Control-Allow-Headers"] = ", ".join(
                (
                    "Authorization",
                    "Content-Type",
                    CONVERSATION_HEADER,
                    client_chats.CLIENT_HEADER,
                    client_chats.TASK_HEADER,
                    client_chats.OPEN_WEBUI_CHAT_HEADER,
                )
            )
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        return response

    return middleware


def _authorized(api_key: str | None) -> Any:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if api_key is not None and request.method != "OPTIONS":
            given = request.headers.get("Authorization", "")
            expected = f"Bearer {api_key}"
            if not hmac.compare_digest(given.encode(), expected.encode()):
                return error_response(
                    401,
                    "A valid API key is required (Authorization: Bearer KEY).",
                    code="invalid_api_key",
                )
        return await handler(request)

    return middleware


# --- the endpoints -------------------------------------------------------------


class _Api:
    def __init__(self, owner: EngineOwner, config: ServerConfig) -> None:
        self._owner = owner
        self._config = config

    async def models(self, _request: web.Request) -> web.Response:
        """``GET /v1/models``: the loaded model (none while it loads)."""
        served = self._config.served()
        models = [
            {
                "id": served.id,
                "object": "model",
                "created": served.created,
                "owned_by": "arbor",
            }
            for served in ([served] if isinstance(served, ServedModel) else [])
        ]
        return web.json_response({"object": "list", "data": models})

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``, streamed (SSE) or not."""
        try:
            body = await request.json(loads=_strict_loads)
        except (json.JSONDecodeError, UnicodeDecodeError, NestedTooDeep) as exc:
            return error_response(400, f"The body is not valid JSON: {exc}.")
        try:
            chat = parse_chat_request(body)
            conversation = _conversation_header(request)
        except BadRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        served = self._config.served()
        if not isinstance(served, ServedModel):
            return _not_served(served)
        # Clients send fixed names ("gpt-4o-mini", "local-model"): the loaded
        # model answers, as llama-server and LM Studio do; the log says so.
        asked = "" if chat.model in served.names else f" · asked for {chat.model!r}"
        # Who asks, and in which of its chats: headers and the prompt tell.
        asking = client_chats.with_request(
            client_chats.from_headers(request.headers), chat
        )
        if chat.stream:
            response = await self._streamed(
                request, chat, asking, conversation, served.id
            )
        else:
            response = await self._whole(chat, asking, conversation, served.id)
        if asked and response.status == 200:
            response[_NOTE] = response.get(_NOTE, "") + asked
        return response

    async def _whole(
        self,
        chat: ChatRequest,
        asking: ClientChat,
        conversation: int | None,
        model_id: str,
    ) -> web.Response:
        cancelled = threading.Event()
        try:
            done = await self._owner.run(
                _client_job(chat, asking, conversation, None, None, cancelled)
            )
        except Exception as exc:
            return _failure(exc).response()
        finally:
            cancelled.set()
        self._after_reply()
        response = web.json_response(_completion_body(model_id, done))
        response[_NOTE] = _note(done)
        return response

    async def _streamed(
        self,
        request: web.Request,
        chat: ChatRequest,
        asking: ClientChat,
        conversation: int | None,
        model_id: str,
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[tuple[int, str, str]] = asyncio.Queue()
        cancelled = threading.Event()
        started = time.perf_counter()

        def send(kind: str) -> Callable[[int, str], None]:
            # Called on the engine's thread: the piece crosses to this loop.
            def put(index: int, piece: str) -> None:
                loop.call_soon_threadsafe(pieces.put_nowait, (index, kind, piece))

            return put

        job = asyncio.ensure_future(
            self._owner.run(
                _client_job(
                    chat,
                    asking,
                    conversation,
                    send("content"),
                    send("reasoning_content"),
                    cancelled,
                )
            )
        )
        # The status is only known once the job has started without failing
        # at once (a full queue, a bad conversation id): wait for the first
        # piece or the end, then either answer with an error or open the
        # stream.
        first = await _first_of(pieces, job)
        first_ms = (time.perf_counter() - started) * 1000
        if first is None and job.done() and job.exception() is not None:
            return _failure(job.exception()).response()
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        stream_id = f"chatcmpl-{time.time_ns()}"
        try:
            await response.prepare(request)
            for index in range(chat.n):
                await _event(
                    response, _chunk(model_id, stream_id, {"role": "assistant"}, index)
                )
            while first is not None:
                index, kind, piece = first
                await _event(
                    response, _chunk(model_id, stream_id, {kind: piece}, index)
                )
                first = await _first_of(pieces, job)
            done = await job
        except asyncio.CancelledError:
            cancelled.set()  # the server is stopping: the reply ends early
            await asyncio.shield(_quietly(job))
            raise
        except ConnectionResetError:
            # The client went away: its reply ends early, what was generated
            # stays stored (as stopped), and its checkpoints are written.
            cancelled.set()
            await _quietly(job)
            self._after_reply()
            response[_NOTE] = " · the client went away"
            return response
        except Exception as exc:
            cancelled.set()
            await _event(response, _failure(exc).body)
            await response.write_eof()
            return response
        self._after_reply()
        for index, reply in enumerate(done.replies):
            if reply.tool_calls:
                # Each call whole, in one delta: clients join argument pieces,
                # and one piece is a valid stream of them.
                delta = {"tool_calls": _tool_calls(reply, streamed=True)}
                await _event(response, _chunk(model_id, stream_id, delta, index))
            final = _chunk(model_id, stream_id, {}, index, done.finish_reason_of(reply))
            if done.logprobs is not None:
                # Streamed text comes in pieces that are not tokens: the
                # tokens' logprobs come whole with the choice's last event.
                final["choices"][0]["logprobs"] = _logprobs(reply, done)
            if index == 0:
                final["arbor"] = _arbor_fields(done)
            await _event(response, final)
        if chat.include_usage:
            usage = _chunk(model_id, stream_id, None)
            usage["usage"] = _usage(done)
            await _event(response, usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        response[_NOTE] = f"{_note(done)}, first token at {first_ms:.0f} ms"
        return response

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions``: a raw prompt continued, streamed or not
        (``text_completions``); nothing is stored."""
        try:
            body = await request.json(loads=_strict_loads)
        except (json.JSONDecodeError, UnicodeDecodeError, NestedTooDeep) as exc:
            return error_response(400, f"The body is not valid JSON: {exc}.")
        try:
            text = text_completions.parse_text_request(body)
        except BadRequest as exc:
            return error_response(400, str(exc), param=exc.param)
        served = self._config.served()
        if not isinstance(served, ServedModel):
            return _not_served(served)
        loop = asyncio.get_running_loop()
        pieces: asyncio.Queue[tuple[int, str, str]] = asyncio.Queue()
        cancelled = threading.Event()

        def put(piece: str) -> None:
            # Called on the engine's thread: the piece crosses to this loop.
            loop.call_soon_threadsafe(pieces.put_nowait, (0, "text", piece))

        streams = Streams(put if text.stream else None, None, cancelled.is_set)
        job = asyncio.ensure_future(
            self._owner.run(
                lambda service: service.complete_prompt(
                    text.prompt, text.sampling, streams
                )
            )
        )
        completion_id = f"cmpl-{time.time_ns()}"
        if not text.stream:
            try:
                done = await job
            except Exception as exc:
                return _failure(exc).response()
            finally:
                cancelled.set()
            return web.json_response(
                {
                    **_text_head(completion_id, served.id),
                    "choices": [
                        text_completions.choice(
                            done.text, text_completions.finish_reason(done)
                        )
                    ],
                    "usage": text_completions.usage(done),
                }
            )
        first = await _first_of(pieces, job)
        if first is None and job.done() and job.exception() is not None:
            return _failure(job.exception()).response()
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        try:
            await response.prepare(request)
            while first is not None:
                await _event(
                    response,
                    {
                        **_text_head(completion_id, served.id),
                        "choices": [text_completions.choice(first[2], None)],
                    },
                )
                first = await _first_of(pieces, job)
            done = await job
        except (asyncio.CancelledError, ConnectionResetError):
            cancelled.set()
            await asyncio.shield(_quietly(job))
            raise
        last = {
            **_text_head(completion_id, served.id),
            "choices": [
                text_completions.choice("", text_completions.finish_reason(done))
            ],
        }
        if text.include_usage:
            last["usage"] = text_completions.usage(done)
        await _event(response, last)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _after_reply(self) -> None:
        # Checkpoints written out and the storage budget kept, behind the
        # reply rather than before it: the client has its answer already.
        def settle(service: Any) -> None:
            service.flush_checkpoints()
            keep_checkpoints_within_budget(service)

        self._owner.after(settle)


def _not_served(served: NotServed) -> web.Response:
    """503: the model loads (ask again shortly), or none is loaded."""
    if served is NotServed.LOADING:
        return error_response(
            503,
            "The model is still loading; try again shortly.",
            "server_error",
            code="model_loading",
            headers={"Retry-After": str(_RETRY_LOADING_S)},
        )
    return error_response(
        503,
        "No model is loaded in Arbor: open one in the window "
        "(Model menu), then try again.",
        "server_error",
        code="model_not_loaded",
    )


def _text_head(completion_id: str, model_id: str) -> dict[str, Any]:
    """What every ``text_completion`` object begins with."""
    return {
        "id": completion_id,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model_id,
    }


def _chunk(
    model_id: str,
    stream_id: str,
    delta: dict[str, Any] | None,
    index: int = 0,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """One streamed event of choice ``index``; ``delta`` None: the usage
    event, without choices."""
    choices = (
        []
        if delta is None
        else [{"index": index, "delta": delta, "finish_reason": finish_reason}]
    )
    return {
        "id": stream_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model_id,
        "choices": choices,
    }


async def _event(response: web.StreamResponse, data: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode())


def _completion_body(model_id: str, done: Completion) -> dict[str, Any]:
    choices = []
    for index, reply in enumerate(done.replies):
        content = done.content_of(reply)
        message: dict[str, Any] = {
            # OpenAI's reply that only calls has no content.
            "role": "assistant",
            "content": content if content or not reply.tool_calls else None,
        }
        if reply.thinking:
            message["reasoning_content"] = reply.thinking
        if reply.tool_calls:
            message["tool_calls"] = _tool_calls(reply, streamed=False)
        choices.append(
            {
                "index": index,
                "message": message,
                "finish_reason": done.finish_reason_of(reply),
                "logprobs": _logprobs(reply, done),
            }
        )
    return {
        "id": f"chatcmpl-{done.reply.assistant_node}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": choices,
        "usage": _usage(done),
        "arbor": _arbor_fields(done),
    }


def _logprobs(reply: Reply, done: Completion) -> dict[str, Any] | None:
    """OpenAI's ``logprobs`` of a choice (None: not asked for)."""
    if done.logprobs is None:
        return None
    return {"content": list(reply.logprobs), "refusal": None}


def _tool_calls(reply: Reply, streamed: bool) -> list[dict[str, Any]]:
    """A reply's calls in OpenAI's shape (a stream's deltas carry an index)."""
    return [
        {
            **({"index": index} if streamed else {}),
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]},
        }
        for index, call in enumerate(reply.tool_calls)
    ]


class NestedTooDeep(ValueError):
    """A body nested deeper than Python's parser recurses."""


def _strict_loads(text: str) -> Any:
    # NaN and Infinity are not JSON; Python's parser takes them by default.
    def refuse(constant: str) -> Any:
        raise json.JSONDecodeError(f"{constant} is not JSON", text, 0)

    try:
        return json.loads(text, parse_constant=refuse)
    except RecursionError:
        # "[[[[…]]]]" thousands deep: a client's error, not a server's.
        raise NestedTooDeep("it is nested too deeply") from None


def _conversation_header(request: web.Request) -> int | None:
    value = request.headers.get(CONVERSATION_HEADER)
    if value is None:
        return None
    if not value.isdigit() or not 0 < int(value) < 2**63:
        raise BadRequest(
            f"{CONVERSATION_HEADER} must be a conversation id (see `arbor list`).",
            CONVERSATION_HEADER,
        )
    return int(value)


async def _first_of(
    pieces: asyncio.Queue[tuple[int, str, str]], job: asyncio.Future[Any]
) -> tuple[int, str, str] | None:
    """The next streamed piece, or None once the job has ended and every
    piece was taken."""
    while True:
        if not pieces.empty():
            return pieces.get_nowait()
        if job.done():
            # Pieces the engine thread sent just before it ended are queued
            # by call_soon_threadsafe; one more turn of the loop delivers them.
            await asyncio.sleep(0)
            return pieces.get_nowait() if not pieces.empty() else None
        getter = asyncio.ensure_future(pieces.get())
        finished, _pending = await asyncio.wait(
            {getter, job}, return_when=asyncio.FIRST_COMPLETED
        )
        if getter in finished:
            return getter.result()
        getter.cancel()


async def _quietly(job: asyncio.Future[Any]) -> None:
    try:
        await job
    except Exception:
        log.debug("a cancelled reply ended with an error", exc_info=True)


def _failure(exc: BaseException | None) -> ApiError:
    """The error response for a job that raised ``exc``."""
    if isinstance(exc, Busy):
        return api_error(
            429,
            "The server is busy with other requests; try again shortly.",
            "rate_limit_error",
            code="busy",
            headers={"Retry-After": str(_RETRY_BUSY_S)},
        )
    if isinstance(exc, ContextFullError):
        return api_error(
            400, str(exc), param="messages", code="context_length_exceeded"
        )
    if isinstance(exc, NotFound):
        return api_error(404, str(exc), param=CONVERSATION_HEADER, code="not_found")
    if isinstance(exc, StorageUnavailable):
        return api_error(503, str(exc), "server_error", code="storage_unavailable")
    if isinstance(exc, USER_ERRORS):
        return api_error(500, str(exc), "server_error")
    log.error("a reply failed", exc_info=exc)
    return api_error(500, "The server failed; see its log.", "server_error")


def _usage(done: Completion) -> dict[str, Any]:
    completion = sum(reply.stats.generated_tokens for reply in done.replies)
    return {
        "prompt_tokens": done.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": done.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": done.cached_tokens},
    }


def _arbor_fields(done: Completion) -> dict[str, Any]:
    return {
        "conversation": done.conversation_id,
        "user_node": done.reply.user_node,
        "assistant_node": done.reply.assistant_node,
        "assistant_nodes": [reply.assistant_node for reply in done.replies],
        "matched_turns": done.matched_turns,
        "stats": done.reply.stats.as_dict(),
    }


def _note(done: Completion) -> str:
    stats = done.reply.stats
    return (
        f" · conversation {done.conversation_id}, {done.cached_tokens} cached, "
        f"{stats.reprocessed_tokens + stats.prompt_tokens} decoded, "
        f"{stats.generated_tokens} generated"
    )


# --- who asks -------------------------------------------------------------------


def _client_job(
    chat: ChatRequest,
    asking: ClientChat,
    conversation: int | None,
    on_text: Callable[[int, str], None] | None,
    on_thinking: Callable[[int, str], None] | None,
    cancelled: threading.Event,
) -> EngineJob:
    """The engine job that answers ``chat`` for the client ``asking``.

    A background task (a title, tags: ``tasks``) not sent to a named
    conversation is a ``Background`` job, which gives way to people's
    requests: its ``cancelled`` event stops it then, and one not streamed is
    answered again after them (nothing of it was sent yet).
    """

    def job(service: Any) -> Completion:
        return complete(
            service, chat, conversation, on_text, on_thinking, cancelled, asking
        )

    if asking.task is None or conversation is not None:
        return job
    return Background(job, cancelled, again=not chat.stream)
