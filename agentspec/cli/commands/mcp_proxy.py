"""``agentspec mcp-proxy``: build the proxy's settings from the flags and serve (the parser is
:mod:`agentspec.cli.mcp_proxy`; the proxy is :mod:`agentspec.mcp_proxy`).  Nothing is printed on stdout: over
stdio it is the client's channel.  The stats line goes to stderr at exit, and to ``--stats`` as JSON."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError

from agentspec.errors import ConfigError, first_problem
from agentspec.mcp import MCPServer


def proxy_config(args: argparse.Namespace) -> Any:
    """The :class:`~agentspec.mcp_proxy.ProxyConfig` the flags describe; :class:`ConfigError` (one line) else."""
    from agentspec.mcp_proxy import ProxyConfig

    if not args.upstream and not args.upstream_url:
        raise ConfigError("mcp-proxy: give at least one --upstream 'COMMAND ARGS' or --upstream-url URL")
    for url in args.upstream_url:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--upstream-url {url!r}: give an http:// or https:// URL")
    servers = [MCPServer.of_command_line(line) for line in args.upstream]
    servers += [MCPServer(url=url) for url in args.upstream_url]
    if args.transport != "http" and args.port is not None:
        raise ConfigError("--port applies to --transport http")
    try:
        return ProxyConfig(upstreams=tuple(servers), trust_annotations=args.trust_annotations,
                           read_only=frozenset(args.read_only), max_inflight=args.max_inflight,
                           max_cache_bytes=args.max_cache_bytes, lookahead_timeout_s=args.lookahead_timeout,
                           call_timeout_s=args.call_timeout, max_age_s=args.max_age, width=args.width,
                           learn_window=args.learn_window,
                           speculator=Path(args.speculator) if args.speculator else None,
                           stats=Path(args.stats) if args.stats else None)
    except ValidationError as exc:
        raise ConfigError(f"mcp-proxy: {first_problem(exc)}") from None


def mcp_proxy_command(args: argparse.Namespace) -> dict[str, Any] | None:
    """Serve until the client goes (stdio) or a signal (HTTP); the summary is the stats, on stderr and in
    ``--stats``, never on stdout."""
    from agentspec.cli.mcp_proxy import DEFAULT_PORT
    from agentspec.mcp_proxy import serve_http, serve_stdio

    config = proxy_config(args)
    if config.speculator is not None:
        from agentspec.learned_speculator.artifact import load

        load(config.speculator)  # a bad file is one line now, not a failure once the client is connected
    if args.transport == "http":
        anyio.run(serve_http, config, args.port or DEFAULT_PORT)
    else:
        anyio.run(serve_stdio, config)
    return None
