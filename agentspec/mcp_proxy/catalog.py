"""The upstreams' resources and prompts, offered through the proxy as each upstream offers them.

Only tools are ever pre-executed; resources and prompts are forwarded, each request to the upstream that owns what
it names, and the reply passed on as it came.  A resource is owned by the upstream that listed its URI, else by the
one whose URI template matches it (RFC 6570 level 1: each ``{name}`` stands for one path segment), else, with a
single upstream offering resources, by that one (it answers an unknown URI as it would directly).  Prompts are named
as tools are: their own names, ``UPSTREAM__NAME`` where two upstreams offer the same one; a name none lists goes
to the one upstream offering prompts, if there is one.  The proxy declares resources and prompts only where an
upstream does.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mcp import MCPError, types

from agentspec.mcp_proxy.upstreams import Upstream, send

#: How many pages of one listing the proxy reads from an upstream (a server paging forever must not hang it).
MAX_PAGES = 100
#: JSON-RPC's code for a resource no upstream owns (the MCP specification's "Resource not found").
RESOURCE_NOT_FOUND = -32002

Page = TypeVar("Page", types.ListResourcesResult, types.ListResourceTemplatesResult, types.ListPromptsResult)


def offers(upstream: Upstream, capability: str) -> bool:
    """Whether ``upstream`` declared ``capability`` (``resources``, ``prompts``) when it started."""
    client = upstream.session.session
    result = getattr(client, "initialize_result", None)
    return result is not None and getattr(result.capabilities, capability, None) is not None


async def _all_pages(listing: Callable[..., Awaitable[Page]]) -> list[Page]:
    """Every page of one of a client session's listings (``listing(params=...)``), up to :data:`MAX_PAGES`."""
    pages: list[Page] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await listing(params=_page(cursor))
        pages.append(page)
        cursor = page.next_cursor
        if not cursor:
            break
    return pages


async def _listed(upstream: Upstream, what: str, listing: Callable[..., Awaitable[Page]]) -> list[Page] | None:
    """:func:`_all_pages` of one upstream's listing; None (said on stderr) when the upstream refuses it."""
    try:
        return await _all_pages(listing)
    except MCPError as exc:
        print(f"agentspec mcp-proxy: upstream {upstream.name} did not list its {what} ({exc.message}): the proxy "
              f"offers none of them", file=sys.stderr, flush=True)
        return None


def _template_pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^{}]+\})", template)
    return re.compile("".join("[^/]+" if part.startswith("{") else re.escape(part) for part in parts))


@dataclass
class Catalog:
    """What the upstreams offer besides tools, listed once when the proxy starts (:meth:`load`)."""

    resources: list[tuple[Upstream, types.Resource]] = field(default_factory=list)
    templates: list[tuple[Upstream, types.ResourceTemplate]] = field(default_factory=list)
    prompts: dict[str, tuple[Upstream, str, types.Prompt]] = field(default_factory=dict)
    """Prompt name as the client sees it -> its upstream, the upstream's name for it, its listing."""
    resource_upstreams: list[Upstream] = field(default_factory=list)
    prompt_upstreams: list[Upstream] = field(default_factory=list)

    async def load(self, upstreams: Sequence[Upstream]) -> None:
        """List every upstream's resources, templates and prompts (all pages).  An upstream whose listing fails
        offers none of that kind through the proxy (said on stderr); its tools are unaffected."""
        for upstream in (u for u in upstreams if offers(u, "resources")):
            client = upstream.session.session
            pages = await _listed(upstream, "resources", client.list_resources)
            templates = await _listed(upstream, "resource templates", client.list_resource_templates)
            if pages is None or templates is None:
                continue
            self.resource_upstreams.append(upstream)
            self.resources += [(upstream, resource) for page in pages for resource in page.resources]
            self.templates += [(upstream, template) for page in templates for template in page.resource_templates]
        listed: list[tuple[Upstream, types.Prompt]] = []
        for upstream in (u for u in upstreams if offers(u, "prompts")):
            prompts = await _listed(upstream, "prompts", upstream.session.session.list_prompts)
            if prompts is not None:
                self.prompt_upstreams.append(upstream)
                listed += [(upstream, prompt) for page in prompts for prompt in page.prompts]
        offered = Counter(prompt.name for _, prompt in listed)
        for upstream, prompt in listed:
            name = prompt.name if offered[prompt.name] == 1 else f"{upstream.name}__{prompt.name}"
            self.prompts[name] = (upstream, prompt.name, prompt.model_copy(update={"name": name}))

    @property
    def has_resources(self) -> bool:
        return bool(self.resource_upstreams)

    @property
    def has_prompts(self) -> bool:
        return bool(self.prompt_upstreams)

    def owner(self, uri: str) -> Upstream:
        """The upstream a resource read goes to; :class:`MCPError` when none owns ``uri``."""
        for upstream, resource in self.resources:
            if str(resource.uri) == uri:
                return upstream
        for upstream, template in self.templates:
            if _template_pattern(template.uri_template).fullmatch(uri):
                return upstream
        if len(self.resource_upstreams) == 1:
            return self.resource_upstreams[0]
        raise MCPError(code=RESOURCE_NOT_FOUND, message=f"Resource not found: {uri}")

    async def read(self, uri: str, timeout_s: float | None) -> types.ReadResourceResult:
        """Forward a resource read to its owner; the reply as it came."""
        request = types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=uri))
        return await send(self.owner(uri), request, types.ReadResourceResult, timeout_s)

    async def prompt(self, name: str, arguments: dict[str, str] | None,
                     timeout_s: float | None) -> types.GetPromptResult:
        """Forward a prompt request to the upstream that offers ``name`` (under its own name for it)."""
        if name in self.prompts:
            upstream, own, _ = self.prompts[name]
        elif len(self.prompt_upstreams) == 1:  # it answers a name it lacks as it would directly
            upstream, own = self.prompt_upstreams[0], name
        else:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {name}")
        request = types.GetPromptRequest(params=types.GetPromptRequestParams(name=own, arguments=arguments))
        return await send(upstream, request, types.GetPromptResult, timeout_s)


def _page(cursor: str | None) -> types.PaginatedRequestParams | None:
    return types.PaginatedRequestParams(cursor=cursor) if cursor else None
