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
:class:`~agentspec.runtime.policies.Policy`: the noisy oracle, an
:class:`~agentspec.runtime.policies.LLMPolicy` over any OpenAI-compatible
endpoint (a local server or a hosted one).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass
from types import TracebackType

import anyio

from agentspec.macros import align
from agentspec.mining.candidates import Candidate
from agentspec.mining.trajectories import MinedTrajectory
from agentspec.runtime.policies import Policy
from agentspec.snapshot import Snapshot, SnapshotBackend
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
        self._backends = AsyncExitStack()

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
    async def _fork(self, trajectory: MinedTrajectory, anchor: int) -> AsyncIterator[DraftRunner]:
        backend, snapshots = await self._snapshots(trajectory)
        sandbox = await backend.fork(snapshots[anchor])

        async def run(call: ToolCall) -> Observation | None:
            if backend.effect(call.name) is Effect.EXTERNAL:
                return None  # never reach outside while labelling, as the executor never does with drafts
            return await sandbox.execute(call)

        try:
            yield run
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

    def __call__(self, trajectory: MinedTrajectory, anchor: int) -> AbstractAsyncContextManager[DraftRunner]:
        """A draft runner in a fresh fork of the state after step ``anchor``, discarded on exit."""
        return self._fork(trajectory, anchor)

    async def aclose(self) -> None:
        """Close every backend a replay opened."""
        self._replays = {}
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
    """``samples`` draft chains of up to ``depth`` calls from each state (a chain ends early on "done")."""
    results: dict[State, list[Continuation]] = {state: [()] * samples for state in states}
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(state: State, sample: int) -> None:
        async with limiter:
            trajectory = trajectories[state[0]]
            policy = speculator(trajectory, sample)
            opened = sandboxes(trajectory, state[1]) if sandboxes is not None else nullcontext(None)
            history: list[tuple[ToolCall, Observation | None]] = list(trajectory.steps[: state[1] + 1])
            drafts: list[ToolCall] = []
            async with opened as run:
                for _ in range(depth):
                    decision = await policy.decide(history)
                    if decision.call is None:
                        break
                    drafts.append(decision.call)
                    history.append((decision.call, await run(decision.call) if run is not None else None))
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
