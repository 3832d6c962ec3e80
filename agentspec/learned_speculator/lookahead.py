"""Look-ahead: read-only calls a speculator runs in a fork of the current state before it guesses.

A :class:`Probe` is a read-only tool with arguments it can fill before any call is made: a typed value of the
task text, a constant the trajectories used for an argument of that name, or (a *chained* probe) a field of
another probe's result, e.g. an id that a lookup by the task's phone number returned.  The fit runs every
candidate probe (:func:`candidate_probes`, :func:`chained_probes`) at every step of the training trajectories
and keeps those whose results predict something; at prediction the policy runs the kept ones through a
:class:`Lookahead`, one batch per level (a chained probe runs after the probes it reads), except that a chained
probe whose inputs the previous look-ahead saw runs in the first batch and is kept where the fresh inputs agree
(:func:`run_probes`): one tool latency per guess instead of two while the ids it reads stay the same.

:class:`ForkLookahead` is the one implementation: every batch runs in a fresh fork of the backend's live state
(``snapshot``/``fork``/``discard``), never on live, and a call that is not ``read_only`` is never run at all.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import anyio
from pydantic import BaseModel, ConfigDict, Field

from agentspec.learned_speculator.features import json_leaves
from agentspec.learned_speculator.sources import Context, Source, evaluate
from agentspec.normalize import Normalizer
from agentspec.snapshot import Sandbox, SnapshotBackend
from agentspec.types import Effect, Observation, ToolCall, ToolSpec, canonical_json

MAX_PROBES_PER_TOOL = 4
MAX_CHAINED_PER_TOOL = 8
MAX_CONSTANTS = 3
"""Constants tried per argument name: the ones the trajectories used most."""


class Probe(BaseModel):
    """A read-only call to run before guessing: a tool and each argument's source (task text or constant)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arguments: dict[str, Source] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        """Names the probe in features and sources: the tool and its argument sources."""
        args = {k: _argument_key(s) for k, s in sorted(self.arguments.items())}
        return f"{self.name}{canonical_json(args)}"

    @property
    def reads(self) -> tuple[str, ...]:
        """The keys of the probes whose results this one's arguments come from (empty: it runs first)."""
        return tuple(sorted({s.tool for s in self.arguments.values() if s.kind == "lookahead"}))

    def call(self, context: Context) -> ToolCall | None:
        """The concrete call at ``context``; None when an argument has no value there."""
        arguments = {}
        for name, source in self.arguments.items():
            available, value = evaluate(source, context)
            if not available:
                return None
            arguments[name] = value
        return ToolCall(name=self.name, arguments=arguments, id=f"lookahead_{self.name}")


def _argument_key(source: Source) -> object:
    if source.kind == "const":
        return source.value
    if source.kind == "lookahead":
        return f"<{source.tool}:{source.path}>"
    return f"<{source.type}#{source.index}>"


def expected_types(normalizer: Normalizer, calls: Iterable[ToolCall]) -> dict[str, set[str | None]]:
    """Argument name -> the slot types its values had in ``calls`` (None: an untyped constant)."""
    found: dict[str, set[str | None]] = {}
    for call in calls:
        for name, value in call.arguments.items():
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                found.setdefault(name, set()).add(normalizer.slot_type(name, str(value)))
    return found


def _accepts(name: str, type_: str, expected: dict[str, set[str | None]], field: str | None = None) -> bool:
    """Whether a value of ``type_`` may fill argument ``name``: the types the trajectories gave that name; for a
    name they never gave, the pattern type of the same name, or a result field named like it (``id`` takes a
    ``customer_id`` or a ``line_ids`` item, a ``dob`` no date of another name)."""
    if name in expected:
        return type_ in expected[name]
    return type_ == name or (field is not None and _relation(name, field) < 3)


def _relation(name: str, path: str) -> int:
    """How a result field (the last named part of ``path``) is named against an argument: 0 the same, 1 its
    plural, 2 ending in ``_name`` (or its plural), 3 otherwise."""
    field = next((part for part in reversed(path.split(".")) if not part.isdigit()), "")
    plurals = (f"{name}s", f"{name}es")
    if field == name:
        return 0
    if field in plurals:
        return 1
    return 2 if field.endswith(tuple(f"_{n}" for n in (name, *plurals))) else 3


def _constants(calls: Iterable[ToolCall]) -> dict[str, list[object]]:
    counts: dict[str, Counter[str]] = {}
    for call in calls:
        for name, value in call.arguments.items():
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                counts.setdefault(name, Counter())[canonical_json(value)] += 1
    return {name: [json.loads(v) for v, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CONSTANTS]]
            for name, c in counts.items()}


def candidate_probes(tools: Sequence[ToolSpec], normalizer: Normalizer, texts_typed: Iterable[dict[str, list[str]]],
                     calls: Iterable[ToolCall]) -> list[Probe]:
    """Every read-only tool whose required arguments can be filled: by a typed value of the task text that the
    normaliser types the same under that argument's name, or by a constant the trajectories gave that name."""
    samples: dict[str, str] = {}
    for typed in texts_typed:
        for type_, values in typed.items():
            samples.setdefault(type_, values[0])
    calls = list(calls)
    constants = _constants(calls)
    expected = expected_types(normalizer, calls)
    probes: list[Probe] = []
    for tool in sorted(tools, key=lambda t: t.name):
        if tool.effect is not Effect.READ_ONLY:
            continue
        required = sorted(tool.parameters.get("required") or [])
        options: list[list[Source]] = []
        for name in required:
            # A typed value of the text only where the argument takes that type: a date is no customer id.
            choices = [Source(kind="text", type=t) for t, v in sorted(samples.items())
                       if normalizer.slot_type(name, v) == t and _accepts(name, t, expected)]
            choices += [Source(kind="const", value=v) for v in constants.get(name, [])]
            options.append(choices)
        if any(not o for o in options):
            continue
        for combo in itertools.islice(itertools.product(*options), MAX_PROBES_PER_TOOL):
            probes.append(Probe(name=tool.name, arguments=dict(zip(required, combo, strict=True))))
    return probes


def chained_probes(tools: Sequence[ToolSpec], normalizer: Normalizer, first: Sequence[Probe],
                   observations: Iterable[Mapping[str, str]], calls: Iterable[ToolCall]) -> list[Probe]:
    """Read-only calls whose arguments come from fields of the ``first`` probes' results (sample
    ``observations``: probe key -> content, e.g. at the start of a few training tasks): a field whose value the
    normaliser types as the argument takes (:func:`_accepts`), fields named like the argument first.  Only
    probes without constants feed others (their fields are the task's own data)."""
    expected = expected_types(normalizer, calls)
    feeders = {p.key for p in first if all(s.kind != "const" for s in p.arguments.values())}
    fields: dict[tuple[str, str], str] = {}
    for sample in observations:
        for key, content in sample.items():
            if key not in feeders:
                continue
            for path, value in json_leaves(content) or ():
                type_ = normalizer.slot_type(None, value) if isinstance(value, str) else None
                if type_ is not None:
                    fields.setdefault((key, path), type_)
    probes: list[Probe] = []
    for tool in sorted(tools, key=lambda t: t.name):
        required = sorted(tool.parameters.get("required") or [])
        if tool.effect is not Effect.READ_ONLY or not required:
            continue
        options = []
        for name in required:
            # Not from a probe of the same tool: a lookup fed its own answer asks the same question again.
            found = [(key, path) for (key, path), type_ in fields.items()
                     if _accepts(name, type_, expected, path) and not key.startswith(f"{tool.name}{{")]
            found.sort(key=lambda kp: (_relation(name, kp[1]), kp[1], kp[0]))
            options.append([Source(kind="lookahead", tool=key, path=path) for key, path in found])
        if any(not o for o in options):
            continue
        for combo in itertools.islice(itertools.product(*options), MAX_CHAINED_PER_TOOL):
            probes.append(Probe(name=tool.name, arguments=dict(zip(required, combo, strict=True))))
    return probes


class Lookahead(Protocol):
    """Runs read-only calls in a fork of the current state: one observation per call (None: not run)."""

    async def __call__(self, calls: Sequence[ToolCall]) -> list[Observation | None]: ...


Charge = Callable[[Sequence[ToolCall]], Awaitable[None]]
"""Takes a batch of look-ahead calls' time on the run's clock (independent reads: they may run side by side)."""


class ForkLookahead:
    """Look-ahead through ``backend``: each batch in a fresh fork of its live state, discarded after.

    Only ``read_only`` tools are run (anything else answers None and never runs, not even in the fork);
    ``calls`` counts the calls run; ``charge`` takes each batch's time on the clock.
    """

    def __init__(self, backend: SnapshotBackend, charge: Charge | None = None) -> None:
        self.backend, self.charge = backend, charge
        self.calls = 0

    async def __call__(self, calls: Sequence[ToolCall]) -> list[Observation | None]:
        return await self.run(calls)

    def at(self, parent: Sandbox | None) -> Lookahead:
        """The same look-ahead (and count) from the state of ``parent``, a draft's fork (None: live)."""

        async def from_parent(calls: Sequence[ToolCall]) -> list[Observation | None]:
            return await self.run(calls, parent)

        return from_parent

    async def run(self, calls: Sequence[ToolCall], parent: Sandbox | None = None) -> list[Observation | None]:
        """``calls`` in a fresh fork of live state or of ``parent`` (never in ``parent`` itself; a parent that
        is gone raises :class:`~agentspec.errors.SnapshotError`)."""
        runnable = [self.backend.effect(call.name) is Effect.READ_ONLY for call in calls]
        if not any(runnable):
            return [None] * len(calls)
        sandbox = await self.backend.fork(await self.backend.snapshot(parent))
        out: list[Observation | None] = []
        try:
            if self.charge is not None:
                await self.charge([call for call, ok in zip(calls, runnable, strict=True) if ok])
            for call, ok in zip(calls, runnable, strict=True):
                if not ok:
                    out.append(None)
                    continue
                self.calls += 1
                out.append(await sandbox.execute(call))
        finally:
            with anyio.CancelScope(shield=True):
                await self.backend.discard(sandbox)
        return out


def with_readers(used: Iterable[str], probes: Sequence[Probe]) -> list[Probe]:
    """The ``probes`` whose keys are ``used``, with every probe they read from (transitively), in order."""
    by_key = {p.key: p for p in probes}
    needed: set[str] = set()
    stack = [key for key in used if key in by_key]
    while stack:
        key = stack.pop()
        if key not in needed:
            needed.add(key)
            stack.extend(k for k in by_key[key].reads if k in by_key)
    return [p for p in probes if p.key in needed]


@dataclass
class ProbeRun:
    """One prediction's look-ahead: at most ``cap`` calls (None: every probe); ``calls`` it asked for, whether
    the cap left a runnable probe out (``capped``), and how many batches it took (``batches``)."""

    cap: int | None = None
    calls: int = 0
    capped: bool = False
    batches: int = 0
    early: int = 0
    """Chained probes run in an earlier batch than the probes they read, with arguments from ``earlier`` results
    that the fresh results then confirmed."""


async def run_probes(probes: Sequence[Probe], context: Context, lookahead: Lookahead,
                     budget: ProbeRun | None = None, earlier: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each probe's observation at ``context`` (probe key -> content): one batch per level, a chained probe in
    the batch after the probes it reads (a probe whose input is missing is not run).  With ``budget``'s cap, the
    probes run in the fit's order until the cap is spent (a chained probe whose input was left out cannot run).

    ``earlier``: the probes' observations at an earlier state of the same task.  A chained probe whose inputs
    are there runs in the first batch with the arguments they give, beside the probes it reads; its observation
    is kept only where the fresh observations of those probes give the same call, else it runs again in the
    next batch.  Every observation returned is of the current state, with the arguments the current state gives:
    ``earlier`` only saves a batch (a tool latency) when the reads it depends on did not change.
    """
    budget = budget if budget is not None else ProbeRun()
    seen: dict[str, str] = {}
    early = _early_calls(probes, context, earlier or {})
    waiting = list(probes)
    while waiting:
        pending = {p.key for p in waiting}
        ready_now = [p for p in waiting if not pending.intersection(p.reads)]
        if not ready_now:
            break  # a cycle: cannot happen with probes from chained_probes
        level = Context(context.text, context.history, {**context.lookahead, **seen}, context.typed)
        made = [(probe.key, probe.call(level)) for probe in ready_now]
        ready = [(key, call) for key, call in made if call is not None]
        first = not budget.batches
        ahead = [(key, call) for key, call in early.items() if first and key in pending and key not in dict(ready)]
        waiting = [p for p in waiting if p not in ready_now]
        if budget.cap is not None and len(ready) + len(ahead) > budget.cap - budget.calls:
            budget.capped = True
            ready = ready[: max(0, budget.cap - budget.calls)]
            ahead = ahead[: max(0, budget.cap - budget.calls - len(ready))]
        if not ready and not ahead:
            continue
        batch = [*ready, *ahead]
        observations = await lookahead([call for _, call in batch])
        budget.calls += len(batch)  # once they ran: a look-ahead refused (no fork) ran nothing
        budget.batches += 1
        seen.update({key: obs.content for (key, _), obs in zip(ready, observations[:len(ready)], strict=True)
                     if obs is not None})
        confirmed = _confirmed(waiting, ahead, observations[len(ready):], context, seen)
        seen.update(confirmed)
        budget.early += len(confirmed)
        waiting = [p for p in waiting if p.key not in confirmed]
    return seen


def _early_calls(probes: Sequence[Probe], context: Context, earlier: Mapping[str, str]) -> dict[str, ToolCall]:
    """The chained probes' calls as ``earlier``'s observations of the probes they read would make them."""
    if not earlier:
        return {}
    past = Context(context.text, context.history, {**context.lookahead, **earlier}, context.typed)
    calls = {p.key: p.call(past) for p in probes if p.reads and all(k in earlier for k in p.reads)}
    return {key: call for key, call in calls.items() if call is not None}


def _confirmed(waiting: Sequence[Probe], ahead: Sequence[tuple[str, ToolCall]], observations: Sequence[Observation | None],
               context: Context, seen: Mapping[str, str]) -> dict[str, str]:
    """Of the chained probes run ahead, those whose inputs have now been read fresh and give the same call."""
    by_key = {p.key: p for p in waiting}
    fresh = dict(seen)
    out: dict[str, str] = {}
    for (key, call), observation in zip(ahead, observations, strict=True):  # in the fit's order: readers last
        probe = by_key.get(key)
        if probe is None or observation is None or not all(k in fresh for k in probe.reads):
            continue
        if probe.call(Context(context.text, context.history, {**context.lookahead, **fresh}, context.typed)) == call:
            out[key] = fresh[key] = observation.content
    return out
