"""A scripted OpenAI-compatible HTTP server: a test double, for tests only.

It is a real HTTP server (uvicorn on 127.0.0.1, an OS-chosen port, in a
background thread) so the model client is tested over real sockets, with
concurrency, SSE streaming and client disconnects.  What it answers is
scripted by a *responder*, called (in a worker thread) with each chat
request's JSON::

    def responder(request: dict) -> dict:
        return {"content": "Hello", "tool_calls": [{"name": "f", "arguments": {"x": 1}}]}

    with ScriptedOpenAIServer(responder) as srv:
        ModelConfig(base_url=srv.base_url, model="m")   # "http://127.0.0.1:PORT/v1"
        ...
        srv.requests      # every chat request body, in arrival order
        srv.disconnects   # clients that left before their answer was complete
        srv.hints         # every ``POST /v1/agentspec/hints`` body (answered ``delivered`` while the
                          # request it names, by ``agentspec_request_id``, is being answered)

A responder returns either a full ``chat.completion`` body (with
``"choices"``) or a shorthand the server wraps into one (ids, usage, and
logprobs when the request asks for them)::

    {"content": str | None,
     "tool_calls": [{"name": str, "arguments": dict | str, "id": str (optional)}],
     "finish_reason": str, "reasoning_content": str, "logprobs": [...], "cached_tokens": int}

``{"raw_body": str}`` is sent verbatim as a 200 JSON answer (for broken
bodies).  Any form may add ``"delay_s"`` (wait before answering; a disconnect cuts
it short) and ``"chunk_delay_s"`` (wait between streamed chunks).  A
responder may also sleep itself, be ``async``, or return a
:class:`ScriptedFailure` to answer with an HTTP error.  A
:class:`ScriptedFailure` is itself a responder that fails its first
``times`` requests and then delegates to ``then``.
"""

from __future__ import annotations

import inspect
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Union

import anyio
import anyio.to_thread
import uvicorn

__all__ = ["Responder", "ScriptedFailure", "ScriptedOpenAIServer", "completion_body", "completion_chunks"]

Reply = Union[dict[str, Any], "ScriptedFailure"]
Responder = Callable[[dict[str, Any]], Reply | Awaitable[Reply]]

_CONTROL_KEYS = ("delay_s", "chunk_delay_s", "raw_body")
_TOKEN = re.compile(r"\s*\S+|\s+")


def _ok(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": "ok"}


@dataclass
class ScriptedFailure:
    """An HTTP error answer, or a responder failing its first ``times`` requests.

    Returned by a responder, the server answers that one request with
    ``status``.  Used as the responder, it fails the first ``times`` requests
    (every one when ``times`` is None) and answers the rest with ``then``.
    """

    status: int = 500
    times: int | None = 1
    then: Responder = _ok
    message: str = "scripted failure"
    calls: int = field(default=0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __call__(self, request: dict[str, Any]) -> Reply | Awaitable[Reply]:
        with self._lock:
            self.calls += 1
            failing = self.times is None or self.calls <= self.times
        return self if failing else self.then(request)

    def body(self) -> dict[str, Any]:
        """The JSON error body, in OpenAI's shape."""
        return {"error": {"message": self.message, "type": "scripted_failure", "param": None, "code": self.status}}


class ScriptedOpenAIServer:
    """A real, scripted OpenAI-compatible server in a background thread (see module docstring)."""

    def __init__(self, responder: Responder = _ok, *, models: tuple[str, ...] = ("scripted-model",),
                 hint_route: bool = True, port: int = 0) -> None:
        """``hint_route=False``: no ``/agentspec/hints`` route (a plain OpenAI-compatible endpoint's 404);
        ``port``: listen on this port of 127.0.0.1 (0: one the system picks; a port in use raises OSError)."""
        self.responder = responder
        self.hint_route = hint_route
        self.models = list(models)
        self.requests: list[dict[str, Any]] = []
        self.hints: list[dict[str, Any]] = []
        self._answering: set[str] = set()
        self.disconnects = 0
        self.model_list_requests = 0
        self.errors: list[BaseException] = []
        self.port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> ScriptedOpenAIServer:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._socket.bind(("127.0.0.1", self.port))
        except OSError:
            self._socket.close()
            raise
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self._app, interface="asgi3", lifespan="off", log_config=None, log_level="warning", access_log=False,
            http="h11", loop="asyncio", timeout_graceful_shutdown=2,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="scripted-openai-server", daemon=True
        )
        self._thread.start()
        self._wait_started()
        return self

    def _wait_started(self) -> None:
        assert self._server is not None and self._thread is not None
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("the scripted OpenAI server did not start")
            time.sleep(0.005)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()

    # ------------------------------------------------------------ ASGI app

    async def _app(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http":
            return
        path, method = scope["path"].rstrip("/"), scope["method"]
        if method == "GET" and path.endswith("/models"):
            self.model_list_requests += 1
            data = [{"id": name, "object": "model", "created": 0, "owned_by": "scripted"} for name in self.models]
            await _send_json(send, 200, {"object": "list", "data": data})
        elif method == "POST" and path.endswith("/chat/completions"):
            await self._chat(receive, send)
        elif method == "POST" and path.endswith("/agentspec/hints") and self.hint_route:
            raw = await _read_body(receive)
            body = json.loads(raw or b"{}")
            self.hints.append(body)
            await _send_json(send, 200, {"delivered": body.get("request_id") in self._answering})
        else:
            await _send_json(send, 404, ScriptedFailure(404, message=f"no route {method} {path}").body())

    async def _chat(self, receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        raw = await _read_body(receive)
        if raw is None:
            self.disconnects += 1
            return
        request = json.loads(raw)
        self.requests.append(request)
        exchange = _Exchange(send)
        named = request.get("agentspec_request_id")
        if named:
            self._answering.add(named)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watch_disconnect, receive, exchange, tg.cancel_scope)
                await self._answer(request, exchange)
                tg.cancel_scope.cancel()
        finally:
            self._answering.discard(named)

    async def _watch_disconnect(
        self, receive: Callable[..., Any], exchange: _Exchange, scope: anyio.CancelScope
    ) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not exchange.finishing:
            self.disconnects += 1
        scope.cancel()

    async def _answer(self, request: dict[str, Any], exchange: _Exchange) -> None:
        try:
            reply = await anyio.to_thread.run_sync(self.responder, request, abandon_on_cancel=True)
            if inspect.isawaitable(reply):
                reply = await reply
        except Exception as exc:  # a broken responder is reported, not hidden
            self.errors.append(exc)
            reply = ScriptedFailure(500, message=f"responder raised {exc!r}")
        if isinstance(reply, ScriptedFailure):
            await exchange.json(reply.status, reply.body())
            return
        await anyio.sleep(float(reply.get("delay_s") or 0))
        if "raw_body" in reply:
            await exchange.raw(reply["raw_body"].encode())
            return
        body = completion_body(reply, request, default_model=self.models[0] if self.models else "scripted-model")
        if request.get("stream"):
            include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
            await exchange.sse(completion_chunks(body, include_usage), float(reply.get("chunk_delay_s") or 0))
        else:
            await exchange.json(200, body)


class _Exchange:
    """Sends one response; ``finishing`` is set before its last piece goes out."""

    def __init__(self, send: Callable[..., Any]) -> None:
        self._send = send
        self.finishing = False

    async def json(self, status: int, body: dict[str, Any]) -> None:
        self.finishing = True
        await _send_json(self._send, status, body)

    async def raw(self, data: bytes) -> None:
        self.finishing = True
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        await self._send({"type": "http.response.body", "body": data, "more_body": False})

    async def sse(self, chunks: list[dict[str, Any]], delay_s: float) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        for chunk in chunks:
            data = f"data: {json.dumps(chunk)}\n\n".encode()
            await self._send({"type": "http.response.body", "body": data, "more_body": True})
            await anyio.sleep(delay_s)
        self.finishing = True
        await self._send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


async def _read_body(receive: Callable[..., Any]) -> bytes | None:
    """The request body, or None if the client left first."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def _send_json(send: Callable[..., Any], status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})


# ---------------------------------------------------------------- response bodies


def completion_body(
    reply: dict[str, Any], request: dict[str, Any], *, default_model: str = "scripted-model"
) -> dict[str, Any]:
    """The full ``chat.completion`` body for a reply (full bodies pass through)."""
    reply = {key: value for key, value in reply.items() if key not in _CONTROL_KEYS}
    if "choices" in reply:
        return reply
    content = reply.get("content")
    calls = [_wire_call(call) for call in reply.get("tool_calls") or []]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    if reply.get("reasoning_content"):
        message["reasoning_content"] = reply["reasoning_content"]
    tokens = _TOKEN.findall(content or "")
    choice: dict[str, Any] = {
        "index": 0,
        "message": message,
        "finish_reason": reply.get("finish_reason") or ("tool_calls" if calls else "stop"),
        "logprobs": None,
    }
    if request.get("logprobs"):
        entries = reply.get("logprobs") or _fake_logprobs(tokens, request.get("top_logprobs") or 0)
        choice["logprobs"] = {"content": entries}
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:16],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model") or default_model,
        "choices": [choice],
        "usage": _usage(request, tokens, calls, reply.get("cached_tokens")),
    }


def _wire_call(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments", {})
    return {
        "id": call.get("id") or "call_" + uuid.uuid4().hex[:12],
        "type": "function",
        "function": {
            "name": call["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def _fake_logprobs(tokens: list[str], top: int) -> list[dict[str, Any]]:
    """Deterministic logprobs: token i gets -0.1 * (i % 5 + 1); alternatives are lower."""
    entries = []
    for i, token in enumerate(tokens):
        logprob = -0.1 * (i % 5 + 1)
        alternatives = [{"token": token, "logprob": logprob, "bytes": list(token.encode())}]
        alternatives += [{"token": f"<alt{j}>", "logprob": logprob - j, "bytes": None} for j in range(1, top)]
        entry = {"token": token, "logprob": logprob, "bytes": list(token.encode())}
        entries.append({**entry, "top_logprobs": alternatives[:top]})
    return entries


def _usage(
    request: dict[str, Any], tokens: list[str], calls: list[dict[str, Any]], cached: int | None
) -> dict[str, Any]:
    prompt = sum(len(str(m.get("content") or "").split()) + 4 for m in request.get("messages") or [])
    completion = len(tokens) + sum(len(c["function"]["arguments"]) // 4 + 1 for c in calls)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion
    }
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return usage


def completion_chunks(body: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` sequence that streams ``body``, token by token."""
    base = {"id": body.get("id", "chatcmpl-scripted"), "object": "chat.completion.chunk",
            "created": body.get("created", 0), "model": body.get("model", "")}
    choice = body["choices"][0]
    message = choice.get("message") or {}

    def chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None, **extra}]}

    chunks = [chunk({"role": "assistant", "content": ""})]
    if message.get("reasoning_content"):
        chunks.append(chunk({"reasoning_content": message["reasoning_content"]}))
    chunks += _content_chunks(message.get("content") or "", (choice.get("logprobs") or {}).get("content"), chunk)
    for index, call in enumerate(message.get("tool_calls") or []):
        chunks += _call_chunks(index, call, chunk)
    chunks.append(chunk({}, finish_reason=choice.get("finish_reason")))
    if include_usage and body.get("usage") is not None:
        chunks.append({**base, "choices": [], "usage": body["usage"]})
    return chunks


def _content_chunks(
    content: str, logprobs: list[dict[str, Any]] | None, chunk: Callable[..., dict[str, Any]]
) -> list[dict[str, Any]]:
    if logprobs and "".join(entry["token"] for entry in logprobs) == content:
        return [chunk({"content": entry["token"]}, logprobs={"content": [entry]}) for entry in logprobs]
    return [chunk({"content": token}) for token in _TOKEN.findall(content)]


def _call_chunks(index: int, call: dict[str, Any], chunk: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    function = call.get("function") or {}
    name = {"name": function.get("name"), "arguments": ""}
    head = {"index": index, "id": call.get("id"), "type": "function", "function": name}
    arguments = function.get("arguments") or ""
    pieces = [arguments[i : i + 8] for i in range(0, len(arguments), 8)]
    return [chunk({"tool_calls": [head]})] + [
        chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}) for piece in pieces
    ]
