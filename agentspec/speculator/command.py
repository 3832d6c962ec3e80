"""``agentspec speculator fit`` and ``agentspec speculator score`` (parsers in :mod:`agentspec.cli.speculator`).

    agentspec speculator fit --bench B --split train [--runs DIR ...] [--data-dir D] --out F.json
    agentspec speculator score --bench B --split S --speculator F [--lookahead] [--data-dir D]
    agentspec speculator score --bench B --split train --folds 5 [--lookahead]

Each prints one JSON object as its last stdout line.  :func:`fit_bench` is what they (and a run's plain
``--speculator-model learned``) fit with.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio

from agentspec.bench.registry import open_bench
from agentspec.errors import ConfigError
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.speculator.artifact import Artifact, FittedOn, inputs_digest, load
from agentspec.speculator.fit import fit
from agentspec.speculator.lookahead import candidate_probes, chained_probes
from agentspec.speculator.model import SpeculatorModel
from agentspec.speculator.online import OnlineLearner
from agentspec.speculator.score import check_disjoint, cross_validate, score_tasks, summarise
from agentspec.speculator.sources import TypedValues
from agentspec.speculator.trajectories import collect, first_observations, gold_calls, run_trajectories, task_text
from agentspec.types import ToolSpec


async def fit_bench(bench: Any, tasks: Sequence[Any], *, runs: Sequence[str] = (), gold: bool = True,
                    min_reward: float = 1.0, seed: int = 0, split: str | None = None) -> Artifact:
    """Fit on ``tasks`` of ``bench``: their gold calls (``gold``) and their successful episodes in ``runs``."""
    if not tasks:
        raise ConfigError("no tasks to fit a speculator on")
    table = bench.value_patterns()
    normalizer = Normalizer(patterns_from_table(table))
    typed = TypedValues(normalizer.patterns)
    mined = run_trajectories(runs, {t.id for t in tasks}, min_reward=min_reward) if runs else []
    calls = [c for t in tasks for c in (gold_calls(bench, t) if gold else [])] + [c for m in mined for c in m.calls]
    tools: dict[str, ToolSpec] = {}
    for task in tasks[:3]:  # a bench's tools rarely differ between tasks; a few cover those that do
        tools.update((spec.name, spec) for spec in bench.tools(task, solo=True))
    first = candidate_probes(list(tools.values()), normalizer, [typed.find(task_text(bench, t)) for t in tasks], calls)
    samples = await first_observations(bench, tasks[:3], first, typed)
    probes = first + chained_probes(list(tools.values()), normalizer, first, samples, calls)
    trajectories = await collect(bench, tasks, gold=gold, runs=mined, probes=probes, typed=typed,
                                 label=f"gold:{bench.name}/{split}")
    if not trajectories:
        raise ConfigError("nothing to fit a speculator on: no gold calls and no successful run episodes")
    model = fit(trajectories, normalizer, table, probes)
    sources = ([f"gold:{bench.name}/{split}"] if gold else []) + [str(Path(r)) for r in runs]
    fitted_on = FittedOn(bench=bench.name, split=split, sources=sources,
                         task_ids=sorted({t.task_id for t in trajectories}), trajectories=len(trajectories),
                         calls=sum(len(t.steps) for t in trajectories), inputs_sha256=inputs_digest(trajectories))
    return Artifact(seed=seed, fitted_on=fitted_on, model=model)


def _bench(args: argparse.Namespace) -> Any:
    return open_bench(args.bench, args.data_dir)


def fit_command(args: argparse.Namespace) -> dict[str, Any]:
    """``speculator fit``: fit and write the artifact."""
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {args.out} is a folder: give the speculator's file name, e.g. {out / 'spec.json'}")
    if args.no_gold and not args.runs:
        raise ConfigError("--no-gold leaves nothing to fit on: give --runs DIR")
    bench = _bench(args)
    tasks = bench.tasks(args.split)
    started = time.perf_counter()
    artifact = anyio.run(lambda: fit_bench(bench, tasks, runs=args.runs, gold=not args.no_gold,
                                           min_reward=args.min_reward, seed=args.seed, split=args.split))
    fit_s = time.perf_counter() - started
    artifact.save(out)
    model = artifact.model
    return {"speculator": str(out), "bench": args.bench, "split": args.split,
            "trajectories": artifact.fitted_on.trajectories, "calls": artifact.fitted_on.calls,
            "rules": len(model.rules), "lookahead_rules": len(model.lookahead_rules), "probes": len(model.probes),
            "fit_s": round(fit_s, 3)}


def score_command(args: argparse.Namespace) -> dict[str, Any]:
    """``speculator score``: hit rates of a fitted speculator on a split (or ``--folds`` cross-validation)."""
    if (args.speculator is None) == (args.folds is None):
        raise ConfigError("score needs --speculator FILE, or --folds K to cross-validate on the split itself")
    if args.learn_online and args.folds is not None:
        raise ConfigError("--learn-online scores with a --speculator FILE, not --folds")
    artifact = load(args.speculator) if args.speculator else None
    bench = _bench(args)
    tasks = bench.tasks(args.split, limit=args.limit)
    head = {"bench": args.bench, "split": args.split, "lookahead": bool(args.lookahead)}
    if artifact is None:
        async def fitter(train: Sequence[Any]) -> SpeculatorModel:
            return (await fit_bench(bench, train, seed=args.seed, split=args.split)).model

        figures = anyio.run(lambda: cross_validate(bench, tasks, args.folds, args.seed, fitter, lookahead=args.lookahead))
        return {**head, "speculator": f"{args.folds}-fold cross-validation", **figures}
    check_disjoint(artifact.fitted_on.task_ids, [t.id for t in tasks])
    learner = OnlineLearner(artifact) if args.learn_online else None
    scores = anyio.run(lambda: score_tasks(bench, tasks, artifact.model, lookahead=args.lookahead, learner=learner))
    return {**head, "speculator": str(args.speculator), "learn_online": bool(args.learn_online), **summarise(scores)}
