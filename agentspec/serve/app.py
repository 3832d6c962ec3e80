"""The OpenAI-compatible ASGI app (Starlette) over one or more :class:`Engine`.

Routes: ``GET /v1/models``, ``GET /v1/models/{id}``,
``POST /v1/chat/completions`` (with vLLM's ``prompt_logprobs``:
:mod:`agentspec.serve.prompt_logprobs`), ``POST /v1/agentspec/hints`` (draft hints for a
running request, :mod:`agentspec.serve.hints`), ``POST /v1/agentspec/verify_chain``
(does the model make these calls in turn: :mod:`agentspec.serve.chain_verification`),
``GET /v1/agentspec/capabilities`` (``{"verify_chain": true, "prompt_logprobs":
true, "models": [...]}``: how a client tells this server from others),
``GET /health`` and ``GET /stats`` (per-model
counters: requests, completed, cancelled, active, prompt/cached/generated
tokens, verified chains and their accepted/rejected steps, prefix-cache entries).  Every error is an OpenAI-style JSON body
``{"error": {"message", "type", "param", "code"}}`` with its HTTP status; an
unexpected exception answers 500 and the server keeps serving.  A chat
request's body is capped (``max_request_bytes``, 4 MiB by default): a larger
one is answered 413 before it is read, so it costs neither time nor memory.
Chat requests in progress (read, prepared, queued or decoding) are capped too
(``max_queued_requests``, :data:`DEFAULT_MAX_QUEUED_REQUESTS`): past it a request is
answered 429 with ``Retry-After`` before its body is read, since every queued
prompt holds its key/values (a 7.9k-token prompt: about 0.8 GB on a 1.5B model).
Hints (``agentspec_hints``, ``agentspec_predicted_calls``, deliveries) are
bounded in number and bytes (:mod:`agentspec.serve.protocol`), and are indexed in
worker threads, never in an engine step.  Hint deliveries in progress are capped
apart from chat requests (:data:`MAX_HINT_DELIVERIES`, then 429) and index on
:data:`HINT_THREADS` threads of their own; each engine steps on a thread of its
own, so neither deliveries nor request prep can hold the thread a step needs.
Test it in-process through ``httpx.ASGITransport`` or over a socket with
:class:`agentspec.serve.server.ServerThread`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentspec.engine.scheduler import Engine
from agentspec.serve.chain_verification import prepare_chain
from agentspec.serve.completions import CompletionResponse, prepare
from agentspec.serve.hints import HintTargets, deliver_hints
from agentspec.serve.protocol import APIError, parse_hint_delivery

__all__ = [
    "Admission", "DEFAULT_MAX_QUEUED_REQUESTS", "DEFAULT_MAX_REQUEST_BYTES", "DEFAULT_MAX_TOKENS", "HINT_THREADS",
    "MAX_HINT_DELIVERIES", "create_app", "read_body",
]

DEFAULT_MAX_TOKENS = 2048
"""Completion tokens when a request sets no ``max_tokens`` (small models can loop for a whole context)."""

DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The largest request body accepted (``--max-request-bytes``): a long agent conversation with tools is far below."""

DEFAULT_MAX_QUEUED_REQUESTS = 32
"""Chat requests in progress at once (``--max-queued-requests``); more are answered 429.  Decoding together pays
off up to a few dozen rows on a CPU, while each queued prompt holds its key/values in memory until it is done."""

MAX_HINT_DELIVERIES = 8
"""Hint deliveries in progress at once (read, waiting or indexing); more are answered 429.  A speculator sends
one per guess, and each holds its body (up to ``max_request_bytes``) until it is indexed."""

HINT_THREADS = 2
"""Worker threads indexing hint deliveries at once: indexing is pure Python, so more threads only share the GIL."""

RETRY_AFTER_S = 1
"""``Retry-After`` of a 429: a step takes well under a second, and requests end all the time."""


class Admission:
    """Counts requests in progress and refuses one past ``limit`` (a 429 with ``Retry-After``).

    ``what`` names them and ``limit_note`` the limit in the 429's message.  Used on the event loop only, so the
    count needs no lock.
    """

    def __init__(self, limit: int, what: str = "requests",
                 limit_note: str = "agentspec serve --max-queued-requests") -> None:
        if limit < 1:
            raise ValueError(f"max_queued_requests must be at least 1, not {limit}")
        self.limit = limit
        self.what = what
        self.limit_note = limit_note
        self.admitted = 0
        self.refused = 0

    def enter(self) -> None:
        """Admit one request, or raise the 429 :class:`APIError`."""
        if self.admitted >= self.limit:
            self.refused += 1
            raise APIError(
                429, f"the server has {self.admitted} {self.what} in progress, its limit "
                f"({self.limit_note}); retry later", type="rate_limit_error",
                code="server_busy", headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self.admitted += 1

    def leave(self) -> None:
        self.admitted -= 1


class _Admitted:
    """An ASGI response that gives its request's admission back once it has run (however it ended)."""

    def __init__(self, response: CompletionResponse, admission: Admission) -> None:
        self.response = response
        self.admission = admission

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            await self.response(scope, receive, send)
        finally:
            self.admission.leave()


def _deliver(targets: HintTargets, body: bytes) -> dict[str, Any]:
    """Validate a hint delivery and put it into its request (blocking: run in a worker thread)."""
    return deliver_hints(targets, parse_hint_delivery(body))


def _answer(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body, status_code=exc.status, headers=exc.headers or None)


def _error(status: int, message: str, *, type: str, code: str | None = None) -> JSONResponse:
    return JSONResponse(APIError(status, message, type=type, code=code).body, status_code=status)


async def read_body(request: Request, max_bytes: int) -> bytes:
    """The request body; a 413 :class:`APIError` as soon as it is known to exceed ``max_bytes``.

    A declared ``Content-Length`` over the cap is refused before anything is
    read; a body without one (chunked) is read only up to the cap.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(int(declared), max_bytes)
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > max_bytes:
            raise _too_large(size, max_bytes)
        parts.append(part)
    return b"".join(parts)


def _too_large(size: int, max_bytes: int) -> APIError:
    return APIError(
        413, f"the request body ({size} bytes or more) is larger than the server's limit of {max_bytes} bytes "
        "(agentspec serve --max-request-bytes)", code="request_too_large",
    )


def create_app(
    engines: dict[str, Engine], *, default_max_tokens: int = DEFAULT_MAX_TOKENS,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS,
) -> Starlette:
    """The server app; ``engines`` maps each served model id to its engine.

    ``max_request_bytes`` caps a chat request's body (larger ones get a 413); ``max_queued_requests`` caps the
    chat requests in progress (more get a 429 with ``Retry-After``).
    """
    created = int(time.time())
    targets = HintTargets()
    admission = Admission(max_queued_requests)
    deliveries = Admission(MAX_HINT_DELIVERIES, "hint deliveries", "agentspec.serve.app.MAX_HINT_DELIVERIES")
    hint_threads = anyio.CapacityLimiter(HINT_THREADS)

    def model_card(model_id: str) -> dict[str, Any]:
        lm = engines[model_id].lm
        return {"id": model_id, "object": "model", "created": created, "owned_by": "agentspec",
                "max_model_len": lm.context_length}

    async def list_models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [model_card(name) for name in engines]})

    async def get_model(request: Request) -> Response:
        name = request.path_params["model"]
        if name not in engines:
            return _error(404, f"the model {name!r} does not exist", type="invalid_request_error",
                          code="model_not_found")
        return JSONResponse(model_card(name))

    async def chat(request: Request) -> Response:
        try:
            admission.enter()  # before the body is read: a refused request costs nothing
        except APIError as exc:
            return _answer(exc)
        try:
            body = await read_body(request, max_request_bytes)
            prepared = await anyio.to_thread.run_sync(prepare, body, engines, default_max_tokens)
        except BaseException as exc:
            admission.leave()
            if isinstance(exc, APIError):
                return _answer(exc)
            raise
        return _Admitted(CompletionResponse(prepared, targets), admission)  # type: ignore[return-value]

    async def hints(request: Request) -> Response:
        try:
            deliveries.enter()  # before the body is read, as for a chat request
        except APIError as exc:
            return _answer(exc)
        try:
            body = await read_body(request, max_request_bytes)
            # Validating, rendering and indexing the calls take time in proportion to their size: not on the loop,
            # and on threads of their own (a flood of deliveries must not hold the threads others need).
            answer = await anyio.to_thread.run_sync(_deliver, targets, body, limiter=hint_threads)
        except APIError as exc:
            return _answer(exc)
        finally:
            deliveries.leave()
        return JSONResponse(answer)

    async def verify_chain(request: Request) -> Response:
        try:
            admission.enter()  # a verification holds key/values like a chat request: the same cap
        except APIError as exc:
            return _answer(exc)
        try:
            began = time.perf_counter()
            body = await read_body(request, max_request_bytes)
            _, engine, job = await anyio.to_thread.run_sync(prepare_chain, body, engines)
            verdict = await engine.run_job(job)
        except APIError as exc:
            return _answer(exc)
        finally:
            admission.leave()
        engine.stats.chains_verified += 1
        engine.stats.chain_steps_accepted += verdict.accepted
        engine.stats.chain_steps_rejected += verdict.steps - verdict.accepted
        return JSONResponse(verdict.body(time.perf_counter() - began))

    async def capabilities(request: Request) -> Response:
        return JSONResponse({"verify_chain": True, "prompt_logprobs": True, "models": list(engines)})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "models": list(engines)})

    async def stats(request: Request) -> Response:
        return JSONResponse({
            name: {**dataclasses.asdict(engine.stats), "prefix_cache_entries": len(engine.prefix_cache)}
            for name, engine in engines.items()
        })

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", type=kind)

    async def server_error(request: Request, exc: Exception) -> Response:
        return _error(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error")

    routes = [
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/agentspec/hints", hints, methods=["POST"]),
        Route("/v1/agentspec/verify_chain", verify_chain, methods=["POST"]),
        Route("/v1/agentspec/capabilities", capabilities, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/stats", stats, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})
