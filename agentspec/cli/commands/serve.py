"""``agentspec serve``: local models over an OpenAI-compatible HTTP API, on the chosen ``--engine`` (the parser is
:mod:`agentspec.cli.serve`).  Each engine's module (:mod:`agentspec.serve.server`, the embedded fp32 torch engine;
:mod:`agentspec.serve.llama_cpp`) is imported only when chosen."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from agentspec.errors import ConfigError


def serve_command(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``agentspec serve`` on the chosen ``--engine``."""
    return ENGINES[getattr(args, "engine", "embedded")](args)


def embedded_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec serve``: serve until interrupted; return the counters as the final JSON line."""
    from agentspec.engine.scheduler import DEFAULT_PREFIX_CACHE_BYTES
    from agentspec.serve import server  # by module: tests replace its load_engines / serve_until_stopped
    from agentspec.serve.app import DEFAULT_MAX_QUEUED_REQUESTS, DEFAULT_MAX_REQUEST_BYTES, create_app
    from agentspec.serve.lifeline import exit_with_parent

    exit_with_parent()  # before the slow part: loading the models
    gigabytes = getattr(args, "prefix_cache_gb", None)
    engines = server.load_engines(
        args.model, decoder=getattr(args, "decoder", "greedy"), sidecar=getattr(args, "sidecar", None),
        prefix_cache_bytes=int(gigabytes * 2**30) if gigabytes is not None else DEFAULT_PREFIX_CACHE_BYTES,
    )
    sock = server.bind(args.host, args.port)
    max_request_bytes = getattr(args, "max_request_bytes", None) or DEFAULT_MAX_REQUEST_BYTES
    max_queued = getattr(args, "max_queued_requests", None) or DEFAULT_MAX_QUEUED_REQUESTS
    served = server.uvicorn_server(create_app(
        engines, default_max_tokens=args.max_tokens, max_request_bytes=max_request_bytes,
        max_queued_requests=max_queued,
    ))

    server.serve_until_stopped(served, sock, list(engines))
    return {"event": "stopped", "stats": {name: dataclasses.asdict(e.stats) for name, e in engines.items()}}


def llama_cpp_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec serve --engine llama-cpp``: serve until interrupted; return a final JSON summary."""
    from agentspec.serve.lifeline import exit_with_parent
    from agentspec.serve.llama_cpp import (
        ChatExtensions,
        gguf_path,
        log,
        require_llama_cpp,
        served_id,
        settings_for,
    )
    from agentspec.serve.server import bind, serve_until_stopped, uvicorn_server

    if getattr(args, "decoder", "greedy") != "greedy" or getattr(args, "sidecar", None):
        raise ConfigError("--decoder toolspec and --sidecar need --engine embedded (llama.cpp decodes by itself)")
    exit_with_parent()
    server_app = require_llama_cpp()
    settings_module = importlib.import_module("llama_cpp.server.settings")
    specs = list(dict.fromkeys(args.model))
    model_settings = [settings_module.ModelSettings(**settings_for(spec, gguf_path(spec))) for spec in specs]
    server_settings = settings_module.ServerSettings(host=args.host, port=args.port, interrupt_requests=False)
    sock = bind(args.host, args.port)
    log(f"agentspec: loading {', '.join(specs)} with llama.cpp")
    try:
        inner = server_app.create_app(server_settings=server_settings, model_settings=model_settings)
    except ValueError as exc:  # llama.cpp's word for a file it cannot load
        sock.close()
        raise ConfigError(f"llama.cpp cannot load {', '.join(specs)}: {exc}") from exc
    models = [served_id(spec) for spec in specs]
    app = ChatExtensions(inner, server_app.get_llama_proxy, default_max_tokens=getattr(args, "max_tokens", None),
                         models=models)
    server = uvicorn_server(app)

    serve_until_stopped(server, sock, models)  # as the embedded engine: stops on SIGINT/SIGTERM, then reports
    return {"event": "stopped", "engine": "llama-cpp", "models": models, "stats": app.stats}


ENGINES: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "embedded": embedded_command, "llama-cpp": llama_cpp_command}
"""``--engine`` name -> what serves it."""
