"""Token generation over one local model: prefix KV reuse, sampling, grammar constraints, interleaving.

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

import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import numpy as np

from agentspec.models.local import LocalModel, require
from agentspec.serve.grammar import GrammarConstraint

__all__ = ["Engine", "EngineStats", "PrefixCache", "SamplingParams", "TokenOut"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick tokens: ``temperature`` 0 is greedy (deterministic); ``seed`` makes sampling repeatable."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    top_logprobs: int = 0
    ignore_eos: bool = False


@dataclass(frozen=True, slots=True)
class TokenOut:
    """One generated token, its log probability under the model (before any grammar mask) and the top alternatives."""

    id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


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

    def lookup(self, prompt: list[int], running: Sequence[Any] = ()) -> tuple[int, list[tuple[Any, Any]]]:
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


class _Generation:
    """The state of one request between steps; its methods run in a worker thread under the engine lock."""

    def __init__(
        self, lm: LocalModel, prompt: list[int], params: SamplingParams, reuse: tuple[int, list[tuple[Any, Any]]],
        constraint: GrammarConstraint | None, prefill_chunk: int,
    ) -> None:
        self.torch = require("torch")
        transformers = require("transformers")
        self.lm, self.params, self.constraint = lm, params, constraint
        cached, layers = reuse
        data = [(k[..., :cached, :], v[..., :cached, :]) for k, v in layers] if cached else None
        self.cache = transformers.DynamicCache(ddp_cache_data=data, config=lm.model.config)
        self.covered = list(prompt[:cached])
        self.pending = list(prompt[cached:])
        self.cached = cached
        self.chunk = prefill_chunk
        self.next_logits: Any = None
        self.generated = 0
        seed = params.seed if params.seed is not None else random.getrandbits(62)
        self.rng = self.torch.Generator().manual_seed(seed)

    @property
    def prefilled(self) -> bool:
        return not self.pending

    def layers(self) -> list[tuple[Any, Any]]:
        return [(layer.keys, layer.values) for layer in self.cache.layers if layer.is_initialized]

    def _forward(self, ids: list[int], keep: int = 1) -> Any:
        torch = self.torch
        with torch.inference_mode():
            out = self.lm.model(
                input_ids=torch.tensor([ids]), cache=self.cache, use_cache=True, logits_to_keep=keep
            )
        self.covered.extend(ids)
        return out.logits[0].float()

    def prefill(self) -> None:
        """Compute the next chunk of the prompt."""
        chunk, self.pending = self.pending[: self.chunk], self.pending[self.chunk :]
        self.next_logits = self._forward(chunk)[-1]

    def decode(self) -> tuple[list[TokenOut], str | None]:
        """The next token(s) and, when generation must end, why ("stop" or "length")."""
        if self.constraint is not None:
            forced = self.constraint.forced()[: self.params.max_tokens - self.generated]
            if forced:
                return self._emit_forced(forced)
        token = self._sample()
        if token in self.lm.stop_token_ids and not self.params.ignore_eos:
            return [], "stop"
        out = self._describe(self.next_logits, token)
        self.generated += 1
        if self.constraint is not None:
            self.constraint.consume([token])
        finish = self._finish()
        if finish is None:
            self.next_logits = self._forward([token])[-1]
        return [out], finish

    def _finish(self) -> str | None:
        if self.generated >= self.params.max_tokens:
            return "length"
        if self.constraint is not None and self.constraint.done:
            return "stop"
        return None

    def _emit_forced(self, forced: list[int]) -> tuple[list[TokenOut], str | None]:
        assert self.constraint is not None
        self.constraint.consume(forced)
        self.generated += len(forced)
        # One forward over all forced tokens: the logits after each give the next one's log probability
        # (and the KV of a finished call serves the next turn's prefix).
        after = self._forward(forced, keep=len(forced))
        rows = [self.next_logits, *after[:-1]]
        self.next_logits = after[-1]
        return [self._describe(row, token) for row, token in zip(rows, forced)], self._finish()

    def _sample(self) -> int:
        torch = self.torch
        logits = self.next_logits.clone()
        if self.constraint is not None:
            logits[torch.from_numpy(~self.constraint.allowed())] = float("-inf")
        if self.params.ignore_eos and self.constraint is None:  # a finished grammar may allow nothing but the end
            logits[list(self.lm.stop_token_ids)] = float("-inf")
        if self.params.temperature == 0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / self.params.temperature, dim=-1)
        if self.params.top_p < 1:
            sorted_probs, order = torch.sort(probs, descending=True)
            drop = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= self.params.top_p
            probs[order[drop]] = 0
        return int(torch.multinomial(probs, 1, generator=self.rng))

    def _describe(self, logits: Any, token: int) -> TokenOut:
        torch = self.torch
        logprobs = torch.log_softmax(logits, dim=-1)
        top: tuple[tuple[int, float], ...] = ()
        if self.params.top_logprobs:
            values, ids = torch.topk(logprobs, self.params.top_logprobs)
            top = tuple(zip(ids.tolist(), values.tolist()))
        return TokenOut(id=token, logprob=float(logprobs[token]), top=top)


class Engine:
    """Serves generations of one :class:`LocalModel`, one step at a time, with prefix reuse (module docstring)."""

    def __init__(
        self, lm: LocalModel, *, prefill_chunk: int = 2048, prefix_cache: PrefixCache | None = None,
        decoder: Any = None,
    ) -> None:
        self.lm = lm
        # A decoder (agentspec.decoding.serving.ServingDecoder) may take over requests it can serve (greedy ones).
        self.decoder = decoder
        self.stats = EngineStats()
        self.prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache()
        self._lock = anyio.Lock()
        self._prefill_chunk = prefill_chunk
        self._running: list[Any] = []
        self.contexts: dict[str, Any] = {}
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
        on_start: Callable[[int], None] | None = None, context: Any = None,
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
        gen: _Generation | None = None
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
                if hasattr(gen, "close"):
                    gen.close()

    def _start(
        self, prompt: list[int], params: SamplingParams, constraint: GrammarConstraint | None, context: Any = None,
    ) -> _Generation:
        reuse = self.prefix_cache.lookup(prompt, [gen for gen in self._running if gen.prefilled])
        self.stats.cached_tokens += reuse[0]
        if self.decoder is not None:
            gen = self.decoder.start_generation(self.lm, prompt, params, reuse, constraint, self._prefill_chunk, context)
            if gen is not None:
                return gen  # type: ignore[no-any-return]
        return _Generation(self.lm, prompt, params, reuse, constraint, self._prefill_chunk)
