"""``agentspec mcp-proxy``: an MCP server in front of MCP servers that makes a client's read-only calls faster,
without changing what the client sees.

    agentspec mcp-proxy --upstream 'mcp-server-git --repository .' --trust-annotations --stats stats.json

The proxy lists its upstreams' tools (a name two upstreams share is prefixed ``SERVER__`` on both, and said on
stderr) and forwards every call as it comes, in order, returning exactly what the upstream returned.  Between
calls, agentspec's learned speculator, fitted online on the session's own calls (optionally starting from a file
of ``agentspec speculator fit``), guesses the next ones; the read-only guesses are pre-executed, and a later
identical call (same tool, canonical-equal arguments) is answered from that result, provided no non-read-only
call went through in between (any such call drops every pre-executed result).  The upstreams' resources and
prompts are forwarded to the upstream that owns each one, never pre-executed.

Only tools annotated ``readOnlyHint: true`` by an upstream the user trusts (``--trust-annotations``), or declared
read-only by the user (``--read-only TOOL``), are ever pre-executed: annotations are a server's word about itself
(:mod:`agentspec.mcp`).  Bounds: pre-executions in flight, bytes of kept results, a deadline per pre-execution.
A forwarded call has no deadline of the proxy's: an upstream that hangs makes the client time out as it would
directly; one that exits gives ``Connection closed`` for that call and every later one, as directly.

Modules, one job each: :mod:`.config` (the settings), :mod:`.upstreams` (sessions, tool names, forwarding),
:mod:`.catalog` (resources and prompts, routed to their owners),
:mod:`.cache` (pre-executed results and their invalidation), :mod:`.predictor` (the online speculator),
:mod:`.core` (the proxy's logic), :mod:`.server` (stdio and HTTP), :mod:`.stats` (what it saved).
"""

from __future__ import annotations

from agentspec.mcp_proxy.config import ProxyConfig
from agentspec.mcp_proxy.core import Proxy, open_proxy
from agentspec.mcp_proxy.server import serve_http, serve_stdio
from agentspec.mcp_proxy.stats import ProxyStats

__all__ = ["Proxy", "ProxyConfig", "ProxyStats", "open_proxy", "serve_http", "serve_stdio"]
