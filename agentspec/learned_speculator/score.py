"""Scoring: replay each task's reference trajectory and ask for the next call at every step.

At step ``t`` the speculator sees the reference calls before ``t`` with their real observations (the task is
replayed on a fresh live environment of the bench); with look-ahead its probes run in a fork of that state.
A guess is **exact** when it equals the reference call (same tool, canonically equal arguments), **strict**
when it is exact and every task-specific argument came from data flow.  Figures:

``exact_at_1``, ``exact_at_3``, ``name_at_1``, ``strict_at_1``; ``chain2`` (the guesses at ``t`` and ``t+1``
both exact, over steps with a next one); ``coverage`` (steps with any guess); ``by_position`` (exact@1 per
step index, ``10+`` pooled); ``predict_us_median`` (prediction alone); ``lookahead_calls_per_step``;
``lookahead_capped`` (the share of steps whose look-ahead the cap cut short, ``--lookahead-cap``);
``lookahead_batches_per_step`` (tool latencies the look-ahead took: each step passes its observations on to the
next, as a run's speculator does, so a chained probe whose input did not change runs in the first batch).

Against a run's episodes (:func:`score_runs`), the reference is the agent's calls; a recorded normal-mode episode
is replayed with its user's calls between them (so that the state is the recording's), the agent's history holds
its own calls only, and its guesses are among its own tools.

No scored task may be in the fit (:meth:`~agentspec.learned_speculator.artifact.FittedOn.check_unseen`); cross-validation (:func:`cross_validate`) fits on
the other folds only.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentspec.errors import ConfigError
from agentspec.learned_speculator.lookahead import ForkLookahead, ProbeRun, run_probes
from agentspec.learned_speculator.model import SpeculatorModel
from agentspec.learned_speculator.online import OnlineLearner
from agentspec.learned_speculator.sources import Context
from agentspec.learned_speculator.trajectories import Step, TrajectoryBench, episode_calls, gold_calls, task_text
from agentspec.trajectories import MinedTrajectory
from agentspec.types import ToolCall


@dataclass(frozen=True)
class StepScore:
    task_id: str
    position: int
    exact1: bool
    exact3: bool
    name1: bool
    strict1: bool
    guessed: bool
    predict_s: float
    lookahead_calls: int
    capped: bool = False
    lookahead_batches: int = 0


async def score_task(bench: TrajectoryBench, task: Any, model: SpeculatorModel, *, lookahead: bool,
                     learner: OnlineLearner | None = None, cap: int | None = None,
                     reference: Sequence[ToolCall] | None = None, agent: Sequence[bool] = (),
                     tools: frozenset[str] | None = None) -> list[StepScore]:
    """Every step of ``task``'s reference trajectory (its gold calls, or ``reference``: the calls of a run's
    episode), scored; with a ``learner``, learned from once scored.  ``cap``: look-ahead calls per step (None: the
    model's ``lookahead_cap``).  ``agent``: which reference calls the agent made (a normal-mode recording's user
    calls run, in order, so that the state is the recording's, but they are neither scored nor in the agent's
    history: see :func:`~agentspec.learned_speculator.trajectories.solo_view`), and ``tools`` the agent's tools (None:
    any), the only ones a guess may name."""
    calls = list(reference) if reference is not None else gold_calls(bench, task)
    text = task_text(bench, task)
    steps: list[Step] = []
    out = []
    earlier: dict[str, str] = {}
    async with bench.open_backend(task, solo=True) as backend:
        look = ForkLookahead(backend)
        for position, call in enumerate(calls):
            if position < len(agent) and not agent[position]:
                await backend.execute(call)  # the user's call: state as recorded, not the agent's history
                continue
            before = look.calls
            budget = ProbeRun(cap=cap if cap is not None else model.lookahead_cap)
            context = Context(text, steps, {}, model.typed)
            seen = await run_probes(model.probes, context, look, budget, earlier) if lookahead else None
            earlier = seen or {}  # as a run's speculator does: the last look-ahead saves the next one a batch
            started = time.perf_counter()
            guesses = model.predict(text, steps, seen, k=3, tools=tools)
            spent = time.perf_counter() - started
            head = guesses[0] if guesses else None
            exact1 = head is not None and head.call == call
            out.append(StepScore(task.id, position, exact1, any(g.call == call for g in guesses),
                                 head is not None and head.call is not None and head.call.name == call.name,
                                 exact1 and head is not None and head.strict, head is not None and head.call is not None,
                                 spent, look.calls - before, budget.capped, budget.batches))
            steps.append((call, await backend.execute(call)))
    if learner is not None:
        learner.learn(task.id, text, steps)
    return out


def _rate(values: Sequence[bool]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def summarise(scores: Sequence[StepScore]) -> dict[str, Any]:
    """The figures of the module docstring over ``scores``."""
    by_task: dict[str, list[StepScore]] = {}
    for s in scores:
        by_task.setdefault(s.task_id, []).append(s)
    chain = [a.exact1 and b.exact1 for steps in by_task.values() for a, b in zip(steps, steps[1:], strict=False)]
    positions: dict[str, list[bool]] = {}
    for s in scores:
        positions.setdefault(str(s.position) if s.position < 10 else "10+", []).append(s.exact1)
    order = sorted(positions, key=lambda p: 10 if p == "10+" else int(p))
    return {
        "tasks": len(by_task),
        "steps": len(scores),
        "exact_at_1": _rate([s.exact1 for s in scores]),
        "exact_at_3": _rate([s.exact3 for s in scores]),
        "name_at_1": _rate([s.name1 for s in scores]),
        "strict_at_1": _rate([s.strict1 for s in scores]),
        "chain2": _rate(chain),
        "coverage": _rate([s.guessed for s in scores]),
        "by_position": {p: {"steps": len(positions[p]), "exact_at_1": _rate(positions[p])} for p in order},
        "predict_us_median": round(statistics.median(s.predict_s for s in scores) * 1e6, 1) if scores else 0.0,
        "lookahead_calls_per_step": round(sum(s.lookahead_calls for s in scores) / len(scores), 3) if scores else 0.0,
        "lookahead_capped": _rate([s.capped for s in scores]),
        "lookahead_batches_per_step": round(sum(s.lookahead_batches for s in scores) / len(scores), 3) if scores else 0.0,
    }


async def score_tasks(bench: TrajectoryBench, tasks: Sequence[Any], model: SpeculatorModel, *,
                      lookahead: bool, learner: OnlineLearner | None = None, cap: int | None = None) -> list[StepScore]:
    """Every task scored in order; with a ``learner`` (whose ``model`` is then the one used), each task is
    learned from after it is scored: prequential, as ``--learn-online`` does in a run."""
    out = []
    for task in tasks:
        out += await score_task(bench, task, learner.model if learner else model, lookahead=lookahead, learner=learner,
                                cap=cap)
    return out


async def score_runs(bench: TrajectoryBench, tasks: Sequence[Any], episodes: Sequence[MinedTrajectory],
                     model: SpeculatorModel, *, lookahead: bool, cap: int | None = None) -> list[StepScore]:
    """Every call of each run episode of ``tasks`` scored as :func:`score_task` scores the gold ones (the end of
    the episode is not a call); a recorded normal-mode episode is replayed with its user's calls between the
    agent's, and only the agent's are scored, each guess among the agent's tools
    (:func:`~agentspec.learned_speculator.trajectories.episode_calls`)."""
    by_id = {task.id: task for task in tasks}
    out = []
    for episode in episodes:
        task = by_id.get(episode.task_id)
        if task is None:
            continue
        calls, agent, tools = episode_calls(bench, task, episode)
        if any(agent):
            out += await score_task(bench, task, model, lookahead=lookahead, cap=cap, reference=calls, agent=agent,
                                    tools=tools)
    return out


Fitter = Callable[[Sequence[Any]], Awaitable[SpeculatorModel]]
"""Fits a speculator on the given tasks only."""


def folds_of(tasks: Sequence[Any], folds: int, seed: int) -> list[list[Any]]:
    """``tasks`` dealt into ``folds`` groups after a seeded shuffle (the same seed, the same folds)."""
    if folds < 2 or folds > len(tasks):
        raise ConfigError(f"--folds {folds}: need 2 <= folds <= the {len(tasks)} tasks of the split")
    order = sorted(tasks, key=lambda t: t.id)
    random.Random(seed).shuffle(order)
    return [order[i::folds] for i in range(folds)]


async def cross_validate(bench: TrajectoryBench, tasks: Sequence[Any], folds: int, seed: int, fitter: Fitter, *,
                         lookahead: bool, cap: int | None = None) -> dict[str, Any]:
    """``folds``-fold cross-validation: each fold scored by a speculator fitted on the other folds."""
    scores: list[StepScore] = []
    for held_out in folds_of(tasks, folds, seed):
        held = {t.id for t in held_out}
        model = await fitter([t for t in tasks if t.id not in held])
        scores += await score_tasks(bench, held_out, model, lookahead=lookahead, cap=cap)
    return {"folds": folds, **summarise(scores)}
