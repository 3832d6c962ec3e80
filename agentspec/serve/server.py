"""Run the server: ``agentspec serve`` (foreground) and :class:`ServerThread` (in-process, background).

``agentspec serve --model NAME_OR_PATH [--model ...] [--host H] [--port N]``
loads each model once, binds the socket (``--port 0``: any free port), then
prints one JSON line on stdout when it accepts requests::

    {"event": "ready", "base_url": "http://127.0.0.1:41234/v1", "models": ["smollm2-135m"]}

and, after SIGINT/SIGTERM, a last JSON line with the per-model counters.
Started by another process with ``AGENTSPEC_PARENT_PID`` set (the embedded
backend), it dies with that process (:mod:`agentspec.serve.lifeline`).
"""

from __future__ import annotations

import json
import signal
import socket
import sys
import threading
import time
from types import TracebackType
from typing import Any, Self

import anyio

from agentspec.engine.model import load_model, require
from agentspec.engine.priority import PriorityGate
from agentspec.engine.scheduler import DEFAULT_PREFIX_CACHE_BYTES, Engine, PrefixCache
from agentspec.errors import ConfigError
from agentspec.models.registry import resolve
from agentspec.serve.app import DEFAULT_MAX_QUEUED_REQUESTS, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_MAX_TOKENS, create_app

__all__ = ["ServerThread", "load_engines", "serve_until_stopped"]


def load_engines(specs: list[str], *, decoder: str = "greedy", sidecar: str | None = None,
                 prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES) -> dict[str, Engine]:
    """One engine per ``--model`` (registry name, folder, GGUF file or hub id), keyed by the served id.

    ``decoder="toolspec"`` serves greedy requests with the ToolSpec decoder
    (:mod:`agentspec.decoding.serving`), with a ``sidecar`` model if named.  Each engine's prefix cache keeps up
    to ``prefix_cache_bytes`` of key/values.  The engines share one
    :class:`~agentspec.engine.priority.PriorityGate`: a request's ``priority`` orders it against every model's.
    """
    if decoder not in ("greedy", "toolspec"):
        raise ConfigError(f"unknown decoder {decoder!r}: use greedy or toolspec")
    engines: dict[str, Engine] = {}
    gate = PriorityGate()
    for spec in specs:
        source = resolve(spec)
        if source.id in engines:
            raise ConfigError(f"model {source.id!r} is given twice")
        lm = load_model(source)
        if decoder == "toolspec":
            from agentspec.decoding.serving import toolspec_decoder

            decoding = toolspec_decoder(lm, sidecar=sidecar)
        else:
            decoding = None
        engines[source.id] = Engine(lm, decoder=decoding, prefix_cache=PrefixCache(max_bytes=prefix_cache_bytes),
                                    gate=gate)
    return engines


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (port 0: any free port) for :func:`serve_until_stopped`; a port that
    cannot be bound is a :class:`ConfigError`.  Used by ``agentspec serve`` (both engines) and :class:`ServerThread`."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    return sock


def uvicorn_server(app: Any) -> Any:
    """A uvicorn server for the ASGI ``app`` with this project's settings (no lifespan, no access log, h11,
    asyncio), to run with :func:`serve_until_stopped` on a socket from :func:`bind`."""
    uvicorn = require("uvicorn")
    config = uvicorn.Config(
        app, interface="asgi3", lifespan="off", log_config=None, log_level="warning", access_log=False,
        http="h11", loop="asyncio", timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


def _base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


def serve_until_stopped(server: Any, sock: socket.socket, models: list[str]) -> None:
    """Run the uvicorn ``server`` on ``sock`` (announcing ``models`` with a ready line) until SIGINT/SIGTERM."""

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(_announce, server, sock, models)
            await server.serve(sockets=[sock])
            group.cancel_scope.cancel()

    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal under the handler it found:
    # a no-op handler lets the command end normally and print its counters.
    previous = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        anyio.run(main)
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ignore(signum: int, frame: Any) -> None:
    """A signal handler that does nothing (see :func:`serve_until_stopped`)."""


async def _announce(server: Any, sock: socket.socket, models: list[str]) -> None:
    while not server.started:
        await anyio.sleep(0.02)
    print(json.dumps({"event": "ready", "base_url": _base_url(sock), "models": models}), flush=True)
    print(f"agentspec: serving {', '.join(models)} at {_base_url(sock)}", file=sys.stderr, flush=True)


class ServerThread:
    """The server on 127.0.0.1 (an OS-chosen port) in a background thread, for tests and benchmarks::

        with ServerThread(load_engines(["smollm2-135m"])) as srv:
            openai.OpenAI(base_url=srv.base_url, api_key="x")...
    """

    def __init__(
        self, engines: dict[str, Engine], *, default_max_tokens: int = DEFAULT_MAX_TOKENS,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES, max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS,
    ) -> None:
        self.engines = engines
        self._app = create_app(engines, default_max_tokens=default_max_tokens, max_request_bytes=max_request_bytes,
                               max_queued_requests=max_queued_requests)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.base_url = ""

    def __enter__(self) -> Self:
        self._socket = bind("127.0.0.1", 0)
        self.base_url = _base_url(self._socket)
        self._server = uvicorn_server(self._app)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="agentspec-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError("the agentspec server did not start")
            time.sleep(0.01)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._socket is not None:
            self._socket.close()
