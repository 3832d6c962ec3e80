"""Labelling: does the speculator reproduce a candidate where the reference trajectory has it?

A macro fires in the executor once the authority confirms its anchor (the
first step) and the speculator's next drafts align with the rest.  So the
training state for a candidate occurrence at step ``t`` is the reference
history up to and including its anchor, ``steps[: t + 1]``; there the
speculator is asked for a continuation of up to ``depth`` calls, each run in
a fork of the state (:class:`ReplaySandboxes`, through any
:class:`~agentspec.snapshot.SnapshotBackend`) so the next draft sees its
observation, just as the executor's draft chain does.  Several samples are
drawn per state.

For a candidate ``m`` of length L and one sample at a state whose last step
aligns with ``m``'s anchor:

* the **reference** matches when its next L-1 calls instantiate ``m``;
* the **sample** matches when its first L-1 drafts instantiate ``m``
  (slots bound consistently with the anchor): the macro would fire;
* when either matches, the sample is one label (n += 1), and it is
  *reproduced* (k += 1) when both match with the same values, i.e. the
  drafts equal the reference future after normalization.

So ``k / n`` estimates how often the speculator and the reference agree on
``m`` when either of them takes it: a sample that misses a reference
occurrence and a firing the reference would not have made both count
against the macro.  :func:`sample_continuations` works with any
:class:`~agentspec.runtime.policies.protocol.Policy`: the noisy oracle, an
:class:`~agentspec.runtime.policies.llm.LLMPolicy` over any OpenAI-compatible
endpoint (a local server or a hosted one).

A speculator that looks ahead (:class:`LooksAhead`, the learned one) gets look-ahead in the sample's own fork:
its read-only calls run in a fresh fork of the state the sample stands at (the reference up to the anchor, then
its drafts), never in a replay's live state, which is the end of the whole trajectory.  They are counted
(:attr:`ReplaySandboxes.lookahead_calls`), as in a run.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, runtime_checkable

import anyio

from agentspec.errors import SnapshotError
from agentspec.learned_speculator.lookahead import ForkLookahead
from agentspec.macros import align
from agentspec.mining.candidates import Candidate
from agentspec.runtime.policies.protocol import DraftedHistory, Policy
from agentspec.snapshot import Sandbox, Snapshot, SnapshotBackend
from agentspec.trajectories import MinedTrajectory
from agentspec.types import Effect, Observation, ToolCall

State = tuple[int, int]
"""(trajectory index, anchor index): the speculator has seen ``steps[: anchor + 1]``."""
Continuation = tuple[ToolCall, ...]
DraftRunner = Callable[[ToolCall], Awaitable[Observation | None]]
"""Runs one draft in a sample's fork; None for a draft that is not run (an external effect)."""
SpeculatorFactory = Callable[[MinedTrajectory, int], Policy]
"""Makes the speculator for one (trajectory, sample number)."""
SandboxFactory = Callable[[MinedTrajectory, int], AbstractAsyncContextManager[DraftRunner]]
"""Opens a runner for drafts from the state after step ``anchor`` of a trajectory (closed after the sample)."""
BackendFactory = Callable[[MinedTrajectory], AbstractAsyncContextManager[SnapshotBackend] | SnapshotBackend]
"""A fresh live backend in the initial state of a trajectory's task: a context manager that opens and closes one
(a bench's ``open_backend``, or a backend that is its own), or a bare backend (closed with ``close()`` if it has one)."""


@runtime_checkable
class LooksAhead(Protocol):
    """A speculator that runs read-only calls in a fork before it guesses (the learned one)."""

    def look_through(self, lookahead: ForkLookahead) -> None:
        """Look ahead through ``lookahead`` from now on (at a history's ``state``, a fork)."""
        ...


class ForkOnlyLookahead(ForkLookahead):
    """Look-ahead from a sample's fork only: a call without one (the replay's live state, the end of the whole
    trajectory, which a guess at an earlier step must never see) raises :class:`SnapshotError`, which the learned
    speculator takes as "guess without look-ahead"."""

    async def run(self, calls: Sequence[ToolCall], parent: Sandbox | None = None) -> list[Observation | None]:
        if parent is None:
            raise SnapshotError("look-ahead while mining runs only in a sample's fork")
        return await super().run(calls, parent)


@dataclass
class ForkRunner:
    """A sample's draft runner: each draft runs in ``sandbox``, its fork of the trajectory's state at the anchor
    (so the next draft sees it); ``lookahead`` forks that fork's current state for a speculator's look-ahead."""

    backend: SnapshotBackend
    sandbox: Sandbox
    lookahead: ForkOnlyLookahead

    async def __call__(self, call: ToolCall) -> Observation | None:
        if self.backend.effect(call.name) is Effect.EXTERNAL:
            return None  # never reach outside while labelling, as the executor never does with drafts
        return await self.sandbox.execute(call)


@dataclass
class Label:
    """A candidate's labels: ``n`` samples where it was in play, ``k`` of them reproduced."""

    n: int = 0
    k: int = 0
    occurrences: int = 0
    """Samples at a reference occurrence (the rest of ``n`` are would-be firings the reference did not make)."""
    false_firings: int = 0


class ReplaySandboxes:
    """Draft runners at training states: the trajectory replayed on a fresh backend, then forked.

    ``make_backend`` gives a fresh live backend (in-process, SQLite, overlay, Docker...) for a
    trajectory's task.  The replay runs once per trajectory, keeping a snapshot after every step; each
    runner works in its own fork of one of them (``snapshot``/``fork``/``discard`` of
    :class:`~agentspec.snapshot.SnapshotBackend`, nothing else), so samples never see each other's drafts,
    and the fork is discarded when the sample ends.  Drafts of ``external`` tools are not run (no
    observation).  Use as an async context manager, or call :meth:`aclose`, to close the backends.
    """

    def __init__(self, make_backend: BackendFactory) -> None:
        self.make_backend = make_backend
        self._replays: dict[int, tuple[MinedTrajectory, SnapshotBackend, list[Snapshot]]] = {}
        self._locks: dict[int, anyio.Lock] = {}
        self._lookaheads: dict[int, ForkOnlyLookahead] = {}
        self._counted = 0
        self._backends = AsyncExitStack()

    @property
    def lookahead_calls(self) -> int:
        """Look-ahead calls the samples' speculators ran (each in a fork of a sample's fork)."""
        return self._counted + sum(look.calls for look in self._lookaheads.values())

    async def _snapshots(self, trajectory: MinedTrajectory) -> tuple[SnapshotBackend, list[Snapshot]]:
        # Samples of one trajectory run concurrently: the first replays it, the others wait for its snapshots.
        async with self._locks.setdefault(id(trajectory), anyio.Lock()):
            cached = self._replays.get(id(trajectory))
            if cached is None or cached[0] is not trajectory:
                backend = await self._open(trajectory)
                snapshots = []
                for call in trajectory.calls:
                    await backend.execute(call)
                    snapshots.append(await backend.snapshot())
                cached = self._replays[id(trajectory)] = (trajectory, backend, snapshots)
        return cached[1], cached[2]

    @asynccontextmanager
    async def _fork(self, trajectory: MinedTrajectory, anchor: int) -> AsyncIterator[ForkRunner]:
        backend, snapshots = await self._snapshots(trajectory)
        sandbox = await backend.fork(snapshots[anchor])
        lookahead = self._lookaheads.setdefault(id(backend), ForkOnlyLookahead(backend))
        try:
            yield ForkRunner(backend, sandbox, lookahead)
        finally:
            with anyio.CancelScope(shield=True):
                await backend.discard(sandbox)

    async def _open(self, trajectory: MinedTrajectory) -> SnapshotBackend:
        made = self.make_backend(trajectory)
        if isinstance(made, AbstractAsyncContextManager):
            return await self._backends.enter_async_context(made)
        backend: SnapshotBackend = made  # a bare backend (the protocol asks for no context manager): close it at the end
        if hasattr(backend, "close"):
            self._backends.push_async_callback(backend.close)
        return backend

    def __call__(self, trajectory: MinedTrajectory, anchor: int) -> AbstractAsyncContextManager[ForkRunner]:
        """A draft runner in a fresh fork of the state after step ``anchor``, discarded on exit."""
        return self._fork(trajectory, anchor)

    async def aclose(self) -> None:
        """Close every backend a replay opened."""
        self._replays = {}
        self._counted, self._lookaheads = self.lookahead_calls, {}
        with anyio.CancelScope(shield=True):
            await self._backends.aclose()

    async def __aenter__(self) -> ReplaySandboxes:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        await self.aclose()


def training_states(
    trajectories: Sequence[MinedTrajectory],
    candidates: Sequence[Candidate],
    *,
    max_states: int | None = None,
    seed: int = 0,
) -> list[State]:
    """States whose last step is the anchor of some candidate; at most ``max_states``, drawn with ``seed``."""
    by_name: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in candidates:
        by_name[candidate.steps[0].name].append(candidate)
    states = []
    for number, trajectory in enumerate(trajectories):
        for anchor, call in enumerate(trajectory.calls):
            if any(align(list(c.steps[:1]), [call]) is not None for c in by_name.get(call.name, ())):
                states.append((number, anchor))
    if max_states is not None and len(states) > max_states:
        states = sorted(random.Random(seed).sample(states, max_states))
    return states


async def sample_continuations(
    trajectories: Sequence[MinedTrajectory],
    states: Sequence[State],
    speculator: SpeculatorFactory,
    *,
    samples: int,
    depth: int,
    sandboxes: SandboxFactory | None = None,
    concurrency: int = 1,
) -> dict[State, list[Continuation]]:
    """``samples`` draft chains of up to ``depth`` calls from each state (a chain ends early on "done").  With a
    :class:`ForkRunner` (:class:`ReplaySandboxes`), a :class:`LooksAhead` speculator looks ahead in the sample's
    fork: it is asked with a :class:`~agentspec.runtime.policies.protocol.DraftedHistory` whose ``state`` is that fork."""
    results: dict[State, list[Continuation]] = {state: [()] * samples for state in states}
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(state: State, sample: int) -> None:
        async with limiter:
            trajectory = trajectories[state[0]]
            policy = speculator(trajectory, sample)
            opened = sandboxes(trajectory, state[1]) if sandboxes is not None else nullcontext(None)
            reference = list(trajectory.steps[: state[1] + 1])
            steps: list[tuple[ToolCall, Observation | None]] = []
            async with opened as run:
                fork = run if isinstance(run, ForkRunner) else None
                if fork is not None and isinstance(policy, LooksAhead):
                    policy.look_through(fork.lookahead)
                for _ in range(depth):
                    history = DraftedHistory(reference, steps, fork.sandbox if fork is not None else None)
                    decision = await policy.decide(history)
                    if decision.call is None:
                        break
                    steps.append((decision.call, await run(decision.call) if run is not None else None))
            drafts = [call for call, _ in steps]
            results[state][sample] = tuple(drafts)

    async with anyio.create_task_group() as group:
        for state in states:
            for sample in range(samples):
                group.start_soon(one, state, sample)
    return results


def label_candidates(
    candidates: Sequence[Candidate],
    trajectories: Sequence[MinedTrajectory],
    continuations: dict[State, list[Continuation]],
) -> dict[str, Label]:
    """Each candidate's labels over the sampled states (see module docstring), keyed by candidate key."""
    by_name: dict[str, list[State]] = defaultdict(list)
    for state in continuations:
        by_name[trajectories[state[0]].calls[state[1]].name].append(state)
    labels: dict[str, Label] = {}
    for candidate in candidates:
        label = labels[candidate.key] = Label()
        steps, length = list(candidate.steps), candidate.length
        for state in by_name.get(steps[0].name, ()):
            reference = trajectories[state[0]].calls
            anchor = reference[state[1]]
            if align(steps[:1], [anchor]) is None:
                continue
            future = reference[state[1] + 1 : state[1] + length]
            reference_match = len(future) == length - 1 and align(steps, [anchor, *future]) is not None
            for continuation in continuations[state]:
                drafted = list(continuation[: length - 1])
                sample_match = len(drafted) == length - 1 and align(steps, [anchor, *drafted]) is not None
                if not (reference_match or sample_match):
                    continue
                label.n += 1
                label.occurrences += int(reference_match)
                label.false_firings += int(sample_match and not reference_match)
                label.k += int(reference_match and sample_match and drafted == future)
    return labels
