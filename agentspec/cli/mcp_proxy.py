"""``agentspec mcp-proxy``: a speculating MCP proxy in front of MCP servers (handler:
:func:`agentspec.cli.commands.mcp_proxy.mcp_proxy_command`; the proxy is :mod:`agentspec.mcp_proxy`)."""

from __future__ import annotations

from typing import Any

from agentspec.cli.flags import POSITIVE, number, out_file

DEFAULT_PORT = 8765


def add_parser(sub: Any) -> None:
    """Register ``mcp-proxy``."""
    proxy = sub.add_parser(
        "mcp-proxy", help="serve MCP servers' tools through a proxy that pre-executes predicted read-only calls",
        description="An MCP server in front of MCP servers: every call is forwarded as it comes and answered "
        "exactly as the upstream answered; between calls, the read-only calls a speculator learned from the "
        "session predicts are pre-executed, and a later identical call is answered from that result unless a "
        "non-read-only call went through in between.  Stats go to stderr at exit (and --stats FILE).")
    proxy.add_argument("--upstream", action="append", default=[], metavar="'COMMAND ARGS'",
                       help="an upstream stdio server, as one shell-quoted command line (repeatable)")
    proxy.add_argument("--upstream-url", action="append", default=[], metavar="URL",
                       help="an upstream streamable-HTTP server (repeatable)")
    proxy.add_argument("--trust-annotations", action="store_true",
                       help="pre-execute the upstreams' tools annotated readOnlyHint: true (a server's own word; "
                       "without this flag only --read-only tools are)")
    proxy.add_argument("--read-only", action="append", default=[], metavar="TOOL",
                       help="a tool (as the client sees it) to treat as read-only, whatever its annotations say "
                       "(repeatable)")
    proxy.add_argument("--speculator", metavar="FILE", help="start the online speculator from this file of "
                       "`agentspec speculator fit` (default: from nothing)")
    proxy.add_argument("--max-inflight", type=number(int, ge=0), default=2, metavar="N",
                       help="pre-executed calls running at once (0: forward only)")
    proxy.add_argument("--max-cache-bytes", type=number(int, ge=0), default=8 * 1024 * 1024, metavar="BYTES",
                       help="bytes of pre-executed results kept")
    proxy.add_argument("--lookahead-timeout", type=number(float, gt=0), default=10.0, metavar="S",
                       help="deadline of one pre-executed call")
    proxy.add_argument("--call-timeout", type=number(float, gt=0), default=None, metavar="S",
                       help="deadline of a forwarded call (default: none, the client's own)")
    proxy.add_argument("--max-age", type=number(float, gt=0), default=120.0, metavar="S",
                       help="how long a pre-executed result may wait for its call")
    proxy.add_argument("--width", type=POSITIVE, default=3, metavar="N", help="guesses asked of the speculator per call")
    proxy.add_argument("--learn-window", type=POSITIVE, default=64, metavar="N",
                       help="the latest calls the online speculator learns from")
    proxy.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                       help="serve the client on stdin/stdout, or streamable HTTP on 127.0.0.1")
    proxy.add_argument("--port", type=number(int, ge=1, le=65535), default=None, metavar="N",
                       help=f"the HTTP port, on 127.0.0.1 only (--transport http; default {DEFAULT_PORT})")
    proxy.add_argument("--stats", type=out_file, metavar="FILE", help="write the stats as JSON to FILE at exit")
    proxy.set_defaults(handler="agentspec.cli.commands.mcp_proxy:mcp_proxy_command")
