"""What the proxy is told: its upstream servers, which tools it may pre-execute, and its bounds."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agentspec.mcp import MCPServer

#: Pre-executed calls running at once (``--max-inflight``).
MAX_INFLIGHT = 2
#: Bytes of pre-executed results kept (``--max-cache-bytes``): their JSON, as the client would receive it.
MAX_CACHE_BYTES = 8 * 1024 * 1024
#: How long one pre-execution may take before it is given up (``--lookahead-timeout``).
LOOKAHEAD_TIMEOUT_S = 10.0
#: How long a pre-executed result may wait for its call (``--max-age``): the world outside may change meanwhile.
MAX_AGE_S = 120.0
#: Guesses asked of the speculator after each call (``--width``).
WIDTH = 3
#: The latest client calls the online speculator learns from (``--learn-window``): re-learning is O(window^2).
LEARN_WINDOW = 64


class ProxyConfig(BaseModel):
    """Everything :class:`~agentspec.mcp_proxy.core.Proxy` needs (the CLI builds it from its flags)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    upstreams: tuple[MCPServer, ...] = Field(min_length=1)
    trust_annotations: bool = False
    """Pre-execute the upstreams' ``readOnlyHint: true`` tools (annotations are the server's word about itself)."""
    read_only: frozenset[str] = frozenset()
    """Tools (as the client sees them) the user declares read-only: pre-executed whatever their annotations say."""
    max_inflight: int = Field(MAX_INFLIGHT, ge=0)
    """0: never pre-execute (a plain forwarding proxy)."""
    max_cache_bytes: int = Field(MAX_CACHE_BYTES, ge=0)
    lookahead_timeout_s: float = Field(LOOKAHEAD_TIMEOUT_S, gt=0)
    call_timeout_s: float | None = Field(None, gt=0)
    """A deadline on forwarded calls (None: as long as the client waits, so a hang looks as it does directly)."""
    max_age_s: float = Field(MAX_AGE_S, gt=0)
    width: int = Field(WIDTH, ge=1)
    learn_window: int = Field(LEARN_WINDOW, ge=1)
    speculator: Path | None = None
    """A file of ``agentspec speculator fit`` the online speculator starts from (None: from nothing)."""
    stats: Path | None = None
