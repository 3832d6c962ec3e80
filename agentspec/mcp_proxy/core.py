"""The proxy's logic: forward every client call, in order, and between calls pre-execute the read-only ones its
speculator expects, answering a later identical call from that result (see :mod:`agentspec.mcp_proxy`)."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
from mcp import MCPError, types

from agentspec.errors import ConfigError
from agentspec.learned_speculator.trajectories import Step
from agentspec.mcp import render
from agentspec.mcp_proxy.cache import Entry, PreExecutions, call_key
from agentspec.mcp_proxy.catalog import Catalog
from agentspec.mcp_proxy.config import ProxyConfig
from agentspec.mcp_proxy.predictor import OnlinePredictor, base_artifact
from agentspec.mcp_proxy.stats import ProxyStats
from agentspec.mcp_proxy.upstreams import Route, Upstreams
from agentspec.types import Observation, ToolCall

#: How long closing waits for the upstreams to stop.
CLOSE_S = 10.0


class Proxy:
    """Forwards calls to its upstreams and pre-executes guesses; open it with :func:`open_proxy`."""

    def __init__(self, config: ProxyConfig, upstreams: Upstreams, work: anyio.abc.TaskGroup,
                 catalog: Catalog | None = None) -> None:
        self.config = config
        self.upstreams = upstreams
        self.catalog = catalog or Catalog()
        """The upstreams' resources and prompts: forwarded, never pre-executed."""
        self.stats = ProxyStats()
        self.speculable = self._speculable()
        self.cache = PreExecutions(self.stats, max_inflight=config.max_inflight, max_bytes=config.max_cache_bytes,
                                   max_age_s=config.max_age_s)
        self.predictor = OnlinePredictor(base_artifact(config.speculator), self.speculable, width=config.width,
                                         window=config.learn_window)
        self.history: list[Step] = []
        """The session's latest finished calls (at most two learning windows)."""
        self._finished = 0
        self._work = work
        self._order = anyio.Lock()  # FIFO: calls reach the upstream in the order they came
        self._changed = anyio.Event()

    def _speculable(self) -> frozenset[str]:
        """The tools that may be pre-executed: declared read-only, or annotated so by an upstream the user trusts."""
        unknown = sorted(self.config.read_only - set(self.upstreams.routes))
        if unknown:
            raise ConfigError(f"--read-only {unknown[0]}: no upstream offers that tool (the tools are: "
                              f"{', '.join(sorted(self.upstreams.routes))})")
        trusted = {name for name, route in self.upstreams.routes.items()
                   if self.config.trust_annotations and route.annotated_read_only}
        return frozenset(trusted | self.config.read_only)

    def tools(self) -> list[types.Tool]:
        """Every upstream tool, as the client sees it."""
        return [route.tool for route in self.upstreams.routes.values()]

    # ------------------------------------------------------------------ the client's calls

    async def call(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """Answer one client call: from a pre-executed result where one is valid, else from its upstream.
        Raises the :class:`mcp.MCPError` the upstream (or its end) gave, as a direct client would see it."""
        self.stats.calls += 1
        route = self._route(name)
        speculable = name in self.speculable
        self.stats.speculable_calls += int(speculable)
        if not speculable:
            return await self._write(route, name, arguments)
        async with self._order:
            entry = self.cache.claim(call_key(name, arguments)) if self.upstreams.alive(route.upstream) else None
        if entry is not None:
            result = await self._served(entry)
            if result is not None:
                self._learn(name, arguments, result)
                return result
        return await self._forward(route, name, arguments, write=False)

    async def _write(self, route: Route, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        """A call that may change something: drop every pre-executed result, wait for the running guesses to
        end (bounded by their deadline), then forward it."""
        async with self._order:
            running = self.cache.begin_write()
            try:
                if running:
                    waited = anyio.current_time()
                    for pending in running:
                        await pending.done.wait()
                    self.stats.write_wait_s += anyio.current_time() - waited
            except BaseException:
                self.cache.end_write()
                raise
        return await self._forward(route, name, arguments, write=True)  # its end ends the write

    def _route(self, name: str) -> Route:
        route = self.upstreams.routes.get(name)
        if route is not None:
            return route
        if len(self.upstreams.upstreams) == 1:
            # One upstream: it answers an unknown tool as it would directly (an error result, or its refusal).
            only = self.upstreams.upstreams[0]
            return Route(only, name, types.Tool(name=name, input_schema={"type": "object"}))
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")

    async def _served(self, entry: Entry) -> types.CallToolResult | None:
        """The result of a claimed pre-execution, waiting for it if it still runs (None: it failed)."""
        asked = anyio.current_time()
        joined = not entry.done.is_set()
        if joined:
            # It is the client's call now: the deadline of a forwarded call applies, not a guess's.
            timeout = self.config.call_timeout_s
            entry.scope.deadline = math.inf if timeout is None else asked + timeout
            try:
                await entry.done.wait()
            except BaseException:
                entry.scope.cancel()  # the client gave up on its call (its own timeout): so does the proxy
                raise
        if entry.result is None:
            return None
        self.stats.hits += 1
        self.stats.joined += int(joined)
        # What the hit did not wait for: all of a finished run, the part already run of a running one.
        self.stats.time_saved_s += (asked - entry.started) if joined else entry.upstream_s
        return entry.result

    async def _forward(self, route: Route, name: str, arguments: dict[str, Any] | None, *,
                       write: bool) -> types.CallToolResult:
        self.stats.forwarded += 1
        started = anyio.current_time()
        try:
            result = await self.upstreams.call(route, arguments, self.config.call_timeout_s)
        except MCPError as exc:
            self._learn(name, arguments, None, error=exc.message)
            raise
        finally:
            self.stats.upstream_s += anyio.current_time() - started
            if write:
                self.cache.end_write()
        self._learn(name, arguments, result)
        return result

    # ------------------------------------------------------------------ resources and prompts

    async def read_resource(self, uri: str) -> types.ReadResourceResult:
        """Forward a resource read to the upstream that owns ``uri``.  Nothing pre-executed is dropped: reading a
        resource changes nothing."""
        self.stats.resource_reads += 1
        return await self.catalog.read(uri, self.config.call_timeout_s)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        """Forward a prompt request to the upstream that offers ``name``."""
        self.stats.prompts += 1
        return await self.catalog.prompt(name, arguments, self.config.call_timeout_s)

    # ------------------------------------------------------------------ learning and guessing

    def _learn(self, name: str, arguments: dict[str, Any] | None, result: types.CallToolResult | None,
               error: str = "") -> None:
        """Add a finished call to the session's history and wake the speculator."""
        try:
            call = ToolCall(name=name, arguments=arguments or {})
        except ValueError:
            return  # arguments that are no JSON object of ours: nothing to learn
        text = render(result) if result is not None else error
        failed = result is None or bool(result.is_error)
        self.history.append((call, Observation(call_id=call.id, name=name, content=text, error=failed)))
        if len(self.history) > 2 * self.config.learn_window:  # only the latest window is learned from
            del self.history[:-self.config.learn_window]
        self._finished += 1
        self._changed.set()

    async def speculate(self) -> None:
        """Run for the proxy's life: after each finished call, guess the next ones and pre-execute those that may
        be.  A guess from a history a newer call has already extended is dropped: the next round guesses anew."""
        if self.config.max_inflight == 0 or not self.speculable:
            return
        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            seen = self._finished
            guesses = await self.predictor.guesses(self.history)
            self.stats.predictions += 1
            if self._finished != seen:
                continue
            for guess in guesses:
                key = call_key(guess.name, guess.arguments)
                route = self.upstreams.routes.get(guess.name)
                if route is not None and guess.name in self.speculable and self.cache.may_start(key):
                    entry = self.cache.start(key, self.config.lookahead_timeout_s)
                    self._work.start_soon(self._pre_execute, route, guess, entry)

    async def _pre_execute(self, route: Route, guess: ToolCall, entry: Entry) -> None:
        result: types.CallToolResult | None = None
        why = "cancelled"  # what is left when none of the below: the proxy is stopping, or its caller gave up
        try:
            with entry.scope:  # the guess's deadline, lifted if a call joins it
                result = await self.upstreams.call(route, dict(guess.arguments), None)
            if entry.scope.cancelled_caught:
                why = "abandoned" if entry.claimed else "timed-out"  # the joined call gave up, or the deadline
        except MCPError:
            why = "failed"
        except Exception:  # noqa: BLE001 - a guess that went wrong is only a guess: its call goes upstream
            why = "failed"
        finally:
            self.cache.finish(entry, result, anyio.current_time() - entry.started, why)


@asynccontextmanager
async def open_proxy(config: ProxyConfig) -> AsyncIterator[Proxy]:
    """Connect to the upstreams and run the speculator until the block ends; then print (stderr) and write
    (``config.stats``) what the proxy saved, and stop the upstreams."""
    upstreams = Upstreams(config.upstreams)
    async with anyio.create_task_group() as sessions:
        try:
            await upstreams.open(sessions)
            catalog = Catalog()
            await catalog.load(upstreams.upstreams)
            proxy: Proxy | None = None
            try:
                async with anyio.create_task_group() as work:
                    proxy = Proxy(config, upstreams, work, catalog)
                    work.start_soon(proxy.speculate)
                    try:
                        yield proxy
                    finally:
                        work.cancel_scope.cancel()
            finally:
                if proxy is not None:
                    # Before the upstreams stop: one slow to stop must not cost the stats (a client that closed
                    # the proxy's stdin sends SIGTERM, then SIGKILL, if the proxy is not gone soon).
                    proxy.cache.close()
                    proxy.stats.report(config.stats)
        finally:
            upstreams.close()
            sessions.cancel_scope.deadline = anyio.current_time() + CLOSE_S
