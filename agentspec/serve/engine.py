"""Scheduling over one local model: turns under a FIFO lock, prefix KV reuse, a decoder behind a protocol.

The engine decides *when* a request steps and *where* its KV cache comes
from; *how* tokens are chosen belongs to the decoder it drives through the
:class:`~agentspec.decoding.generation.Generator` protocol:
:class:`~agentspec.decoding.plain.PlainGenerator` (greedy or sampled, one
forward per token; the default) or the ToolSpec
:class:`~agentspec.decoding.serving.ServingDecoder`.

Concurrency: there is no batching.  An :class:`Engine` owns one model and a
FIFO lock (``anyio.Lock`` hands ownership to the longest waiter); every unit
of model work (a prefill chunk of up to ``prefill_chunk`` tokens, 2048 by
default because smaller chunks cost up to twice the time on the CPU, or one
decoding step) takes the lock and runs in a worker thread
(``anyio.to_thread.run_sync``).  Concurrent requests therefore advance in
turns, step by step, and never share mutable state: each request owns its KV
cache.  A cancelled request (the client left) stops at its next step; the
step in flight finishes first, so the lock is always released cleanly.

Prefix reuse: finished (or cancelled) requests leave their KV cache in a small
LRU :class:`PrefixCache`.  A new request starts from the entry sharing the
longest token prefix with its prompt (the next turn of a conversation), or
from a request still running (a probe forked from an agent's unfinished
answer: its prompt is the agent's prompt plus the text generated so far), and
only the rest of the prompt is computed; ``cached_tokens`` reports how many
prompt tokens were reused.  Sharing a running request's cache is safe because
caches only ever grow by concatenation into new tensors, never in place.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import numpy as np

from agentspec.decoding.generation import Generator, RequestContext, SamplingParams, TokenOut, TokenStream
from agentspec.decoding.grammar import GrammarConstraint
from agentspec.decoding.kv_cache import Reuse
from agentspec.decoding.plain import PlainGenerator
from agentspec.models.local import LocalModel

__all__ = ["Engine", "EngineStats", "PrefixCache"]

T = TypeVar("T")


@dataclass
class EngineStats:
    """Counters since start; ``active`` is the number of requests in progress."""

    requests: int = 0
    completed: int = 0
    cancelled: int = 0
    active: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    hints_forwarded: int = 0
    """Probe texts handed to a running request as draft hints (``agentspec_hint_for``)."""


@dataclass(eq=False)
class _Entry:
    tokens: np.ndarray
    layers: list[tuple[Any, Any]]


@dataclass
class PrefixCache:
    """LRU KV caches of recent requests, keyed by the tokens they cover.

    ``lookup(prompt)`` returns the longest reusable prefix length and that
    entry's per-layer (keys, values); at least one prompt token is always left
    to compute, because its logits start generation.
    """

    max_entries: int = 8
    max_tokens: int = 32_768
    _entries: list[_Entry] = field(default_factory=list)

    def lookup(self, prompt: list[int], running: Sequence[TokenStream] = ()) -> Reuse:
        """The longest reusable prefix among the entries and the ``running`` generations (``covered``, ``layers()``)."""
        query = np.asarray(prompt, dtype=np.int64)
        best, best_len = None, 0
        for entry in self._entries:
            length = _common_prefix(entry.tokens, query)
            if length > best_len:
                best, best_len = entry, length
        live, live_len = None, 0
        for generation in running:
            length = _common_prefix(np.asarray(generation.covered, dtype=np.int64), query)
            if length > max(best_len, live_len):
                live, live_len = generation, length
        if live is not None:
            return min(live_len, len(prompt) - 1), live.layers()
        best_len = min(best_len, len(prompt) - 1)
        if best is None or best_len <= 0:
            return 0, []
        self._entries.remove(best)
        self._entries.insert(0, best)
        return best_len, best.layers

    def store(self, tokens: list[int], layers: list[tuple[Any, Any]]) -> None:
        if not tokens or not layers:
            return
        new = np.asarray(tokens, dtype=np.int64)
        # An entry that is a prefix of the new one is superseded (the same conversation, one turn later).
        self._entries = [e for e in self._entries if _common_prefix(e.tokens, new) < len(e.tokens)]
        self._entries.insert(0, _Entry(new, layers))
        while len(self._entries) > self.max_entries or (
            len(self._entries) > 1 and sum(len(e.tokens) for e in self._entries) > self.max_tokens
        ):
            self._entries.pop()

    def __len__(self) -> int:
        return len(self._entries)


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class Engine:
    """Serves generations of one :class:`LocalModel`, one step at a time, with prefix reuse (module docstring)."""

    def __init__(
        self, lm: LocalModel, *, prefill_chunk: int = 2048, prefix_cache: PrefixCache | None = None,
        decoder: Generator | None = None,
    ) -> None:
        self.lm = lm
        self.decoder: Generator = decoder if decoder is not None else PlainGenerator()
        self.stats = EngineStats()
        self.prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache()
        self._lock = anyio.Lock()
        self._prefill_chunk = prefill_chunk
        self._running: list[TokenStream] = []
        self.contexts: dict[str, RequestContext] = {}
        """Decoder contexts of running requests by their ``agentspec_request_id`` (targets of hints)."""

    @cached_property
    def max_token_bytes(self) -> int:
        """The most bytes one token stands for (bounds a prompt's token count from below without tokenising it)."""
        decode = self.lm.ll_tokenizer.decode_bytes
        ordinary = max(len(decode([token])) for token in range(self.lm.vocab_size))
        # Special tokens match their text in a prompt ("<|im_start|>"), whatever they decode to.
        special = max((len(text.encode()) for text in self.lm.tokenizer.all_special_tokens), default=1)
        return max(1, ordinary, special)

    async def _locked(self, work: Callable[[], T]) -> T:
        async with self._lock:
            return await anyio.to_thread.run_sync(work)

    async def generate(
        self, prompt: list[int], params: SamplingParams, constraint: GrammarConstraint | None = None,
        on_start: Callable[[int], None] | None = None, context: RequestContext | None = None,
    ) -> AsyncIterator[tuple[list[TokenOut], str | None]]:
        """Yield ``(tokens, finish_reason)`` per step; the last has a finish reason unless the caller stops early.

        ``on_start(cached_tokens)`` is called once the prefix cache was consulted.
        Stopping early (``aclose``, cancellation) ends the request; its KV
        cache is kept for prefix reuse either way.  The caller counts
        ``stats.requests``/``completed``/``cancelled``: only it knows why a
        generation ended.
        """
        self.stats.active += 1
        self.stats.prompt_tokens += len(prompt)
        gen: TokenStream | None = None
        try:
            gen = await self._locked(lambda: self._start(prompt, params, constraint, context))
            self._running.append(gen)
            if on_start is not None:
                on_start(gen.cached)
            while not gen.prefilled:
                await self._locked(gen.prefill)
            while True:
                tokens, finish = await self._locked(gen.decode)
                self.stats.generated_tokens += len(tokens)
                yield tokens, finish
                if finish is not None:
                    break
        finally:
            self.stats.active -= 1
            if gen is not None:
                self._running.remove(gen)
                self.prefix_cache.store(gen.covered, gen.layers())
                gen.close()

    def _start(
        self, prompt: list[int], params: SamplingParams, constraint: GrammarConstraint | None,
        context: RequestContext | None,
    ) -> TokenStream:
        reuse = self.prefix_cache.lookup(prompt, [gen for gen in self._running if gen.prefilled])
        self.stats.cached_tokens += reuse[0]
        return self.decoder.start(self.lm, prompt, params, reuse=reuse, constraint=constraint,
                                  prefill_chunk=self._prefill_chunk, context=context)
