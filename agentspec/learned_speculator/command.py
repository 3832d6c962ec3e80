"""What ``agentspec speculator fit`` and ``agentspec speculator score`` (handlers in
:mod:`agentspec.cli.commands.speculator`) and a run's plain ``--speculator-model learned`` fit with:
:func:`fit_bench`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError
from agentspec.learned_speculator.artifact import Artifact, FittedOn, inputs_digest
from agentspec.learned_speculator.fit import fit
from agentspec.learned_speculator.lookahead import candidate_probes, chained_probes
from agentspec.learned_speculator.sources import TypedValues
from agentspec.learned_speculator.trajectories import (
    collect,
    episodes,
    first_observations,
    gold_calls,
    run_trajectories,
    task_text,
)
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.types import ToolSpec


async def fit_bench(bench: Any, tasks: Sequence[Any], *, runs: Sequence[str] = (), gold: bool = True,
                    min_reward: float | None = None, seed: int = 0, split: str | None = None,
                    progress: Callable[[str], None] = lambda text: None) -> Artifact:
    """Fit on ``tasks`` of ``bench``: their gold calls (``gold``), their episodes in agentspec ``runs``, and every
    episode of recorded runs of real agents among ``runs`` (at least ``min_reward``: by default 1.0 for an
    agentspec run, any for a recording: :func:`~agentspec.trajectories.read_runs`).  ``progress`` hears what
    it is doing, a line at a time (the command line prints them)."""
    if not tasks:
        raise ConfigError("no tasks to fit a speculator on")
    table = bench.value_patterns()
    normalizer = Normalizer(patterns_from_table(table))
    typed = TypedValues(normalizer.patterns)
    mined = run_trajectories(runs, {t.id for t in tasks}, min_reward=min_reward, bench=bench) if runs else []
    calls = [c for t in tasks for c in (gold_calls(bench, t) if gold else [])] + [c for m in mined for c in m.calls]
    tools: dict[str, ToolSpec] = {}
    for task in tasks[:3]:  # a bench's tools rarely differ between tasks; a few cover those that do
        tools.update((spec.name, spec) for spec in bench.tools(task, solo=True))
    first = candidate_probes(list(tools.values()), normalizer, [typed.find(task_text(bench, t)) for t in tasks], calls)
    samples = await first_observations(bench, tasks[:3], first, typed)
    probes = first + chained_probes(list(tools.values()), normalizer, first, samples, calls)
    progress(f"replaying {len(tasks) if gold else 0} tasks' gold calls and {len(mined)} run episodes...")
    trajectories = await collect(bench, tasks, gold=gold, runs=mined, probes=probes, typed=typed,
                                 label=f"gold:{bench.name}/{split}")
    if not trajectories:
        raise ConfigError("nothing to fit a speculator on: no gold calls and no successful run episodes")
    progress(f"fitting on {len(episodes(trajectories))} trajectories...")
    model = fit(trajectories, normalizer, table, probes)
    sources = ([f"gold:{bench.name}/{split}"] if gold else []) + [str(Path(r)) for r in runs]
    recordings: dict[str, set[str]] = {}
    for m in mined:
        if m.recording is not None:
            recordings.setdefault(m.recording, set()).add(m.task_id)
    own = {t.id for t in tasks if gold and gold_calls(bench, t)} | {m.task_id for m in mined if m.recording is None}
    fitted_on = FittedOn(bench=bench.name, split=split, sources=sources,
                         task_ids=sorted({t.task_id for t in trajectories}), trajectories=len(episodes(trajectories)),
                         calls=sum(len(t.steps) for t in episodes(trajectories)),
                         inputs_sha256=inputs_digest(trajectories),
                         recordings={k: sorted(v) for k, v in sorted(recordings.items())}, own_task_ids=sorted(own))
    return Artifact(seed=seed, fitted_on=fitted_on, model=model)
