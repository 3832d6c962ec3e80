"""The OpenAI-compatible ASGI app (Starlette) over one or more :class:`Engine`.

Routes: ``GET /v1/models``, ``GET /v1/models/{id}``,
``POST /v1/chat/completions``, ``POST /v1/agentspec/hints`` (draft hints for a
running request, :mod:`agentspec.serve.hints`), ``GET /health`` and ``GET /stats`` (per-model
counters: requests, completed, cancelled, active, prompt/cached/generated
tokens, prefix-cache entries).  Every error is an OpenAI-style JSON body
``{"error": {"message", "type", "param", "code"}}`` with its HTTP status; an
unexpected exception answers 500 and the server keeps serving.  A chat
request's body is capped (``max_request_bytes``, 4 MiB by default): a larger
one is answered 413 before it is read, so it costs neither time nor memory.
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

from agentspec.serve.completions import CompletionResponse, prepare
from agentspec.serve.engine import Engine
from agentspec.serve.hints import deliver_hints
from agentspec.serve.protocol import APIError, parse_hint_delivery

__all__ = ["DEFAULT_MAX_REQUEST_BYTES", "DEFAULT_MAX_TOKENS", "create_app", "read_body"]

DEFAULT_MAX_TOKENS = 2048
"""Completion tokens when a request sets no ``max_tokens`` (small models can loop for a whole context)."""

DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The largest request body accepted (``--max-request-bytes``): a long agent conversation with tools is far below."""


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
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
) -> Starlette:
    """The server app; ``engines`` maps each served model id to its engine.

    ``max_request_bytes`` caps a chat request's body (larger ones get a 413).
    """
    created = int(time.time())

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
            body = await read_body(request, max_request_bytes)
            prepared = await anyio.to_thread.run_sync(prepare, body, engines, default_max_tokens)
        except APIError as exc:
            return JSONResponse(exc.body, status_code=exc.status)
        return CompletionResponse(prepared)  # type: ignore[return-value]

    async def hints(request: Request) -> Response:
        try:
            delivery = parse_hint_delivery(await read_body(request, max_request_bytes))
        except APIError as exc:
            return JSONResponse(exc.body, status_code=exc.status)
        return JSONResponse(deliver_hints(engines, delivery))

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
        Route("/health", health, methods=["GET"]),
        Route("/stats", stats, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: server_error})
