"""Scheduling over one local model: concurrent requests decoded together, prefix KV reuse, a decoder behind a protocol.

The engine decides *when* a request steps and *where* its KV cache comes
from; *how* tokens are chosen belongs to the decoder it drives through the
:class:`~agentspec.engine.generation.Generator` protocol:
:class:`~agentspec.engine.plain.PlainGenerator` (greedy or sampled, one
forward per token; the default) or the ToolSpec
:class:`~agentspec.decoding.serving.ServingDecoder`.

Concurrency: batched steps.  Requests queue units of work (start, a prefill
chunk of up to ``prefill_chunk`` tokens, one decoding step).  One of the
waiting requests runs the next *step* for everyone queued: it waits briefly
(``gather_s``) until every running request has queued its next unit, then
takes all decoding units, at most one prefill chunk (so a long prompt never
stalls running decodes for more than one chunk) and at most one unit of a
stream that is not a :class:`~agentspec.engine.plain.PlainStream` (a
ToolSpec generation shares its decoder's drafters with others, so two never
run at once; its tree forwards do share the step with plain rows).  The
step runs in worker threads, one per unit, and their model calls meet in a
:class:`~agentspec.engine.batched_forward.ForwardStep`: all rows go through
one ragged forward, each request with its own KV cache and attention
(:mod:`agentspec.engine.batched_forward`), so each request's numbers, and its
greedy tokens, are exactly those it gets alone.  A step of one unit runs the
model's own forward.  Requests never share mutable state: each owns its KV
cache.  A cancelled request stops at its next step; a unit in flight
finishes first.

Several models (``agentspec serve --model A --model B``): each has its own
engine and no lock is shared, so their steps run at the same time.  torch's
intra-op thread count is per OS thread, so each step's threads take the
engine's share of the cores first: all of torch's threads while one model is
stepping, half each while two are (``EngineStats.overlapped_steps`` counts
steps that ran beside another model's).

Other model work runs as units too (:class:`ForwardJob`, :meth:`Engine.run_job`):
a chain verification (:mod:`agentspec.serve.chain_verification`) and the prompt
log-probabilities of a chat request (:mod:`agentspec.serve.prompt_logprobs`)
queue their start, their prefill chunks and a last unit; a verification
forward counts as the step's one many-token forward, like a prefill chunk.

Priority (vLLM's ``priority`` field, lower first): an engine given the
server's :class:`~agentspec.engine.priority.PriorityGate` holds a background
request (priority above 0) before each of its units while a better-priority
request is in progress on any of the server's models; a held request is not
counted as running, so steps do not wait to gather its unit.  Its prefill runs
in chunks of :data:`BACKGROUND_PREFILL_CHUNK` tokens, so a step it holds ends
soon after a foreground request arrives.

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

import os
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import anyio.to_thread
import numpy as np

from agentspec.engine.batched_forward import ForwardStep, participating, route_forwards
from agentspec.engine.generation import Generator, SamplingParams, TokenOut, TokenStream
from agentspec.engine.grammar import GrammarConstraint
from agentspec.engine.kv_cache import Reuse
from agentspec.engine.model import LocalModel, require
from agentspec.engine.plain import PlainGenerator, PlainStream
from agentspec.engine.priority import PriorityGate, background

__all__ = ["BACKGROUND_PREFILL_CHUNK", "Engine", "EngineStats", "ForwardJob", "PrefixCache"]

BACKGROUND_PREFILL_CHUNK = 32
"""Prompt tokens one prefill unit of a background request computes, where a gate orders priorities: a step it holds
takes a fraction of a second on a CPU, the longest an arriving foreground request then waits (a 2048-token chunk
of a 9,000-token prompt takes many seconds)."""


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
    hints_delivered: int = 0
    """Predicted calls delivered to a running request of this model (``POST /v1/agentspec/hints``)."""
    steps: int = 0
    """Scheduler steps run (each takes every queued decoding unit and at most one prefill chunk)."""
    forwards: int = 0
    """Model forwards run by steps; with N requests decoding together, one forward serves N rows."""
    batched_rows: int = 0
    """Token rows those forwards computed."""
    overlapped_steps: int = 0
    """Steps that ran while another engine (another model) was stepping too, each on its share of the cores."""
    chains_verified: int = 0
    """Chains verified (``POST /v1/agentspec/verify_chain``)."""
    chain_steps_accepted: int = 0
    """Chain steps the model's greedy choice confirmed (each chain's accepted prefix)."""
    chain_steps_rejected: int = 0
    """Chain steps offered but not accepted: the step the model decided otherwise, and every step after it."""
    prompt_logprob_requests: int = 0
    """Chat requests that asked for ``prompt_logprobs`` (their prompts are computed in full, not reused)."""
    priority_waits: int = 0
    """Times a background request was held: once at its arrival, and again before each unit it could not run yet
    for a better-priority request in progress (:mod:`agentspec.engine.priority`)."""


class ForwardJob(Protocol):
    """Model work that is not a generation (a chain verification, prompt log-probabilities), run as units.

    The engine looks ``lookup_tokens`` up in the prefix cache and calls :meth:`start` with what it found,
    then :meth:`prefill` (a unit each) until :attr:`prefilled`, then :meth:`run` as one last unit when
    :attr:`runs_model`, else on the event loop; what ``covered``/:meth:`layers` hold then goes back into
    the prefix cache.  Its ``seq`` (a :class:`~agentspec.engine.kv_cache.TargetSequence`) counts forwards.
    """

    lookup_tokens: list[int]
    """The tokens to find a cached prefix for ([]: compute everything)."""
    runs_model: bool

    @property
    def prefilled(self) -> bool: ...

    @property
    def covered(self) -> list[int]: ...

    def layers(self) -> list[tuple[Any, Any]]: ...

    def start(self, reuse: Reuse) -> None: ...

    def prefill(self) -> None: ...

    def run(self) -> Any: ...


@dataclass(eq=False)
class _Unit:
    """One unit of model work a request queued: ``start``, ``prefill`` or ``decode``."""

    kind: str
    work: Callable[[], Any]
    stream: TokenStream | None = None
    job: ForwardJob | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    result: Any = None
    error: BaseException | None = None

    @property
    def exclusive(self) -> bool:
        """Whether it may not run beside another exclusive unit (state shared beyond its own stream)."""
        return self.kind != "start" and self.job is None and not isinstance(self.stream, PlainStream)

    @property
    def heavy(self) -> bool:
        """A many-token forward (a prefill chunk, a chain verification): at most one per step."""
        return self.kind in ("prefill", "verify")


@dataclass(eq=False)
class _Entry:
    tokens: np.ndarray
    layers: list[tuple[Any, Any]]

    @cached_property
    def nbytes(self) -> int:
        """The key/values' size (a slice of a larger tensor counts as its own size: the budget errs safe)."""
        return sum(int(k.nbytes) + int(v.nbytes) for k, v in self.layers)


def _default_cache_bytes() -> int:
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        memory = 16 * 2**30
    return min(2 * 2**30, memory // 12)


DEFAULT_PREFIX_CACHE_BYTES = _default_cache_bytes()
"""Key/values the prefix cache of one model keeps (``agentspec serve --prefix-cache-gb``): 2 GB, or a twelfth of
the machine's memory if less (two served models and their weights must fit beside it).  Agent prompts are long
(tau2's solo prompt is about 9,000 tokens: 0.5 GB of fp32 key/values for a 1.5B Qwen, 0.25 GB for the 0.5B), and
on a CPU an evicted one costs minutes of prefill, so the budget is in bytes, not entries."""

SUPERSEDE = 0.9
"""A new entry replaces the entries it shares at least this share of their tokens with: the turns of one
conversation (each ends in text the next prompt renders differently) and the episodes of one task (the same
prompt, another answer) keep one entry, not one each, so the cache holds as many different prompts as fit."""


@dataclass
class PrefixCache:
    """LRU KV caches of recent requests, keyed by the tokens they cover, within ``max_bytes`` of key/values
    (and, when set, ``max_tokens`` tokens); the newest entry is always kept.

    ``lookup(prompt)`` returns the longest reusable prefix length and that
    entry's per-layer (keys, values); at least one prompt token is always left
    to compute, because its logits start generation.
    """

    max_entries: int = 16
    max_tokens: int | None = None
    max_bytes: int = DEFAULT_PREFIX_CACHE_BYTES
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
        # An entry (nearly) all of which is a prefix of the new one is superseded: the same conversation one turn
        # later, or the same prompt answered again.
        self._entries = [e for e in self._entries if _common_prefix(e.tokens, new) < SUPERSEDE * len(e.tokens)]
        self._entries.insert(0, _Entry(new, layers))
        while len(self._entries) > self.max_entries or len(self._entries) > 1 and self._over_budget():
            self._entries.pop()

    def _over_budget(self) -> bool:
        if self.max_tokens is not None and sum(len(e.tokens) for e in self._entries) > self.max_tokens:
            return True
        return sum(e.nbytes for e in self._entries) > self.max_bytes

    def __len__(self) -> int:
        return len(self._entries)


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


class Engine:
    """Serves generations of one :class:`LocalModel`, concurrent requests decoded together (module docstring)."""

    def __init__(
        self, lm: LocalModel, *, prefill_chunk: int = 2048, prefix_cache: PrefixCache | None = None,
        decoder: Generator | None = None, gather_s: float = 0.005, gate: PriorityGate | None = None,
    ) -> None:
        self.lm = lm
        self.gate = gate
        """Orders requests by priority across the server's engines (None: priority is ignored)."""
        self.decoder: Generator = decoder if decoder is not None else PlainGenerator()
        self.stats = EngineStats()
        self.prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache()
        self._prefill_chunk = prefill_chunk
        self._gather_s = gather_s
        self._running: list[TokenStream] = []
        # The prefix cache and the running list are read by starts in the step thread and written by the loop.
        self._shared = threading.Lock()
        self._queue: list[_Unit] = []
        self._live = 0
        # The step's own worker thread: on anyio's default limiter, request prep and hint indexing (up to its 40
        # threads) could hold every thread and stall the steps.  One token: an engine runs one step at a time.
        self._step_limiter = anyio.CapacityLimiter(1)
        self._stepping = False
        # Events are made inside the event loop (anyio needs one), per step and per gathering.
        self._step_over: anyio.Event | None = None
        self._arrived: anyio.Event | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._routed: bool | None = None

    @property
    def prefill_chunk(self) -> int:
        """Prompt tokens one prefill unit computes (a long prompt never holds a step for longer)."""
        return self._prefill_chunk

    @cached_property
    def max_token_bytes(self) -> int:
        """The most bytes one token stands for (bounds a prompt's token count from below without tokenising it)."""
        decode = self.lm.ll_tokenizer.decode_bytes
        ordinary = max(len(decode([token])) for token in range(self.lm.vocab_size))
        # Special tokens match their text in a prompt ("<|im_start|>"), whatever they decode to.
        special = max((len(text.encode()) for text in self.lm.tokenizer.all_special_tokens), default=1)
        return max(1, ordinary, special)

    async def generate(
        self, prompt: list[int], params: SamplingParams, constraint: GrammarConstraint | None = None,
        on_start: Callable[[int], None] | None = None, context: object | None = None, priority: int = 0,
    ) -> AsyncGenerator[tuple[list[TokenOut], str | None], None]:
        """Yield ``(tokens, finish_reason)`` per step; the last has a finish reason unless the caller stops early.

        ``on_start(cached_tokens)`` is called once the prefix cache was consulted.
        Stopping early (``aclose``, cancellation) ends the request; its KV
        cache is kept for prefix reuse either way.  The caller counts
        ``stats.requests``/``completed``/``cancelled``: only it knows why a
        generation ended.  ``priority``: vLLM's (lower first; module docstring).
        """
        self.stats.prompt_tokens += len(prompt)
        gen: TokenStream | None = None
        try:
            async with self._request(priority):
                gen = await self._run(_Unit("start", lambda: self._start(prompt, params, constraint, context,
                                                                         priority)), priority)
                if on_start is not None:
                    on_start(gen.cached)
                while not gen.prefilled:
                    await self._run(_Unit("prefill", gen.prefill, gen), priority)
                while True:
                    tokens, finish = await self._run(_Unit("decode", gen.decode, gen), priority)
                    self.stats.generated_tokens += len(tokens)
                    yield tokens, finish
                    if finish is not None:
                        break
        finally:
            if gen is not None:
                with self._shared:
                    self._running.remove(gen)
                    self.prefix_cache.store(gen.covered, gen.layers())
                gen.close()

    async def run_job(self, job: ForwardJob, priority: int = 0) -> Any:
        """Run ``job`` as units of this engine's steps (:class:`ForwardJob`); return what its :meth:`run` returns.

        Its units share steps with the generations in progress like their prefill chunks do; afterwards its
        key/values go into the prefix cache (a verified chain's accepted path serves the next decision).
        """
        started = False
        try:
            async with self._request(priority):
                await self._run(_Unit("start", lambda: self._start_job(job)), priority)
                started = True
                while not job.prefilled:
                    await self._run(_Unit("prefill", job.prefill, job=job), priority)
                return await self._run(_Unit("verify", job.run, job=job), priority) if job.runs_model else job.run()
        finally:
            if started:
                with self._shared:
                    self.prefix_cache.store(job.covered, job.layers())

    @asynccontextmanager
    async def _request(self, priority: int) -> AsyncIterator[None]:
        """A request in progress: counted active, known to the gate, and counted as running here once the gate
        lets it in (a background one waits first); a step gathering units stops waiting for it when it ends."""
        self.stats.active += 1
        try:
            with self.gate.live(priority) if self.gate is not None else nullcontext():
                if self.gate is not None and background(priority):
                    self.stats.priority_waits += 1
                    await self.gate.arrive(priority)
                self._live += 1
                try:
                    yield
                finally:
                    self._away()
        finally:
            self.stats.active -= 1

    def _away(self) -> None:
        """A request stops counting as running: a step gathering units need not wait for it any more."""
        self._live -= 1
        self._wake()

    async def _turn(self, priority: int) -> None:
        """Hold a background request while the gate says so, not counted as running meanwhile."""
        if self.gate is None or not self.gate.must_wait(priority):
            return
        self.stats.priority_waits += 1
        self._away()
        try:
            await self.gate.turn(priority)
        finally:
            self._live += 1

    def _start_job(self, job: ForwardJob) -> None:
        with self._shared:
            reuse = self.prefix_cache.lookup(job.lookup_tokens, [g for g in self._running if g.prefilled]) \
                if job.lookup_tokens else (0, [])
        job.start(reuse)

    async def _run(self, unit: _Unit, priority: int = 0) -> Any:
        """Queue ``unit`` and return its result once a step ran it (this request may run that step itself)."""
        await self._turn(priority)
        # A step this request runs itself may never wait: this is where a cancelled request stops.
        await anyio.lowlevel.checkpoint()
        self._queue.append(unit)
        self._wake()
        try:
            while not unit.done.is_set():
                if self._stepping and self._step_over is not None:
                    await self._step_over.wait()
                else:
                    await self._step()
        except BaseException:
            if unit in self._queue:
                self._queue.remove(unit)
            elif not unit.done.is_set():
                with anyio.CancelScope(shield=True):  # its thread is stepping the stream: let it finish first
                    await unit.done.wait()
            raise
        if unit.error is not None:
            raise unit.error
        return unit.result

    def _wake(self) -> None:
        if self._arrived is not None:
            self._arrived.set()

    async def _step(self) -> None:
        self._stepping = True
        self._step_over = anyio.Event()
        try:
            with anyio.move_on_after(self._gather_s):
                while len(self._queue) < self._live:
                    self._arrived = anyio.Event()
                    await self._arrived.wait()
            units = self._select()
            with anyio.CancelScope(shield=True):  # others wait on these units: finish them even if cancelled
                await anyio.to_thread.run_sync(self._execute, units, limiter=self._step_limiter)
                for unit in units:
                    unit.done.set()
        finally:
            self._stepping = False
            self._step_over.set()
            self._step_over = None

    def _select(self) -> list[_Unit]:
        """This step's units: every start and decode, at most one prefill chunk and one exclusive unit."""
        chosen: list[_Unit] = []
        prefill = exclusive = False
        for unit in self._queue:
            if unit.exclusive and exclusive or unit.heavy and prefill:
                continue
            exclusive = exclusive or unit.exclusive
            prefill = prefill or unit.heavy
            chosen.append(unit)
        self._queue = [unit for unit in self._queue if unit not in chosen]
        return chosen

    def _execute(self, units: list[_Unit]) -> None:
        """Run one step (in a worker thread): starts one by one, then the rest together (module docstring)."""
        for unit in units:
            if unit.kind == "start":
                _perform(unit)
        work = [unit for unit in units if unit.kind != "start"]
        if not work:
            return
        threads, overlapped = _budget.enter()
        self.stats.overlapped_steps += int(overlapped)
        try:
            _use_threads(threads)
            self._execute_work(work, threads)
        finally:
            _budget.leave()

    def _execute_work(self, work: list[_Unit], threads: int) -> None:
        self.stats.steps += 1
        if len(work) == 1:
            before = _forwards(work[0])
            _perform(work[0])
            self.stats.forwards += max(1, _forwards(work[0]) - before)
            return
        if self._routed is None:
            self._routed = route_forwards(self.lm.model)
        if not self._routed:  # a model that cannot fuse forwards: its units run one after another
            for unit in work:
                _perform(unit)
            self.stats.forwards += len(work)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix=f"engine-{self.lm.id}")
        step = ForwardStep(self.lm.model, len(work))

        def participate(unit: _Unit) -> None:
            _use_threads(threads)  # the fused forward runs in one of these threads
            with participating(step):
                _perform(unit)

        for future in [self._pool.submit(participate, unit) for unit in work]:
            future.result()
        self.stats.forwards += step.forwards
        self.stats.batched_rows += step.rows

    def _start(
        self, prompt: list[int], params: SamplingParams, constraint: GrammarConstraint | None,
        context: object | None, priority: int = 0,
    ) -> TokenStream:
        chunk = self._prefill_chunk
        if self.gate is not None and background(priority):
            chunk = min(chunk, BACKGROUND_PREFILL_CHUNK)
        with self._shared:
            reuse = self.prefix_cache.lookup(prompt, [gen for gen in self._running if gen.prefilled])
            self.stats.cached_tokens += reuse[0]
            stream = self.decoder.start(self.lm, prompt, params, reuse=reuse, constraint=constraint,
                                        prefill_chunk=chunk, context=context)
            self._running.append(stream)
        return stream


class _ThreadBudget:
    """Splits the process's torch threads among the engines stepping at the same time.

    torch's intra-op thread count is per OS thread (OpenMP), so each thread
    that runs a step sets its own before computing: with one model busy it
    gets every core; with two models stepping at once (``agentspec serve
    --model A --model B``) each gets half, instead of both oversubscribing
    all cores.  The total is the thread count torch had when the first engine
    was made (``OMP_NUM_THREADS`` or the core count).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._busy = 0
        self.total: int | None = None

    def enter(self) -> tuple[int, bool]:
        """A step begins: this engine's share of the threads, and whether another engine is stepping."""
        with self._lock:
            if self.total is None:
                self.total = int(require("torch").get_num_threads())
            self._busy += 1
            return max(1, self.total // self._busy), self._busy > 1

    def leave(self) -> None:
        with self._lock:
            self._busy -= 1


_budget = _ThreadBudget()


def _use_threads(count: int) -> None:
    torch = require("torch")
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)


def _perform(unit: _Unit) -> None:
    try:
        unit.result = unit.work()
    except BaseException as exc:  # handed to the request's own coroutine, which raises it
        unit.error = exc


def _forwards(unit: _Unit) -> int:
    seq = getattr(unit.job if unit.job is not None else unit.stream, "seq", None)
    return int(getattr(seq, "forwards", 0))
