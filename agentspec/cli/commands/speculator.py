"""``agentspec speculator fit|score``: a learned speculator, fitted on trajectories and scored on held-out tasks
(the parser is :mod:`agentspec.cli.speculator`; the fit is :func:`agentspec.learned_speculator.command.fit_bench`).

    agentspec speculator fit --bench B --split train [--runs DIR ...] [--data-dir D] --out F.json
    agentspec speculator score --bench B --split S --speculator F [--lookahead] [--data-dir D]
    agentspec speculator score --bench B --split test --speculator F --runs DIR [--min-reward 0]
    agentspec speculator score --bench B --split train --folds 5 [--lookahead]

Each also takes ``agentspec run``'s ``--backend`` and ``--bench-option KEY=VALUE`` (GAIA's sandbox and search
backend, AppWorld's ``apps``...), passed to the bench as a run passes them.

Each prints one JSON object as its last stdout line.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import anyio

from agentspec.bench.protocol import recording_at
from agentspec.bench.registry import open_bench
from agentspec.cli.flags import bench_options
from agentspec.cli.progress import Progress
from agentspec.errors import ConfigError
from agentspec.learned_speculator.artifact import load
from agentspec.learned_speculator.command import fit_bench
from agentspec.learned_speculator.model import SpeculatorModel
from agentspec.learned_speculator.online import OnlineLearner
from agentspec.learned_speculator.score import cross_validate, score_runs, score_tasks, summarise
from agentspec.learned_speculator.trajectories import run_trajectories


@runtime_checkable
class ReplayGuarded(Protocol):
    """A bench whose tasks' calls must not, or may only under conditions, be replayed by the commands that replay
    them (``agentspec mine``, ``agentspec speculator fit|score``): the ``mcp`` bench, whose server outside a sandbox
    is the user's live world."""

    def prepare_replay(self, command: str) -> None:
        """Ready the bench for ``command``, or refuse it with one ConfigError line."""
        ...


def prepare_replay(bench: object, command: str) -> None:
    """Let ``bench`` refuse, or ready itself for, ``command``, which replays its tasks' calls (a bench whose live
    state is the user's world, such as an MCP server outside a sandbox, refuses with one ConfigError line)."""
    if isinstance(bench, ReplayGuarded):
        bench.prepare_replay(command)


def _bench(args: argparse.Namespace, command: str) -> Any:
    """The bench opened as a run opens it: its ``--backend`` and ``--bench-option`` settings included (a bad
    ``KEY=VALUE`` is a usage error before any data is read), readied for ``command``, which replays its tasks'
    calls (one line where it must not: an MCP server outside a sandbox)."""
    bench = open_bench(args.bench, args.data_dir, backend=args.backend, options=bench_options(args.bench_option))
    prepare_replay(bench, command)
    return bench


def held_out_tasks(bench: Any, recordings: Sequence[str]) -> set[str]:
    """The tasks of the recorded runs ``recordings`` (``speculator fit --hold-out``); one ConfigError line for a
    file that is not a recording the bench reads."""
    held: set[str] = set()
    for path in recordings:
        recording = recording_at(bench, path)
        if recording is None:
            raise ConfigError(f"--hold-out {path}: not a recorded run {bench.name} reads (tau2-bench's simulation file)")
        held.update(recording.task_ids())
    return held


def fit_command(args: argparse.Namespace) -> dict[str, Any]:
    """``speculator fit``: fit and write the artifact."""
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {args.out} is a folder: give the speculator's file name, e.g. {out / 'spec.json'}")
    if args.no_gold and not args.runs:
        raise ConfigError("--no-gold leaves nothing to fit on: give --runs DIR")
    bench = _bench(args, "agentspec speculator fit")
    tasks = bench.tasks(args.split)
    held = held_out_tasks(bench, getattr(args, "hold_out", None) or [])
    if held:  # their gold calls stay out, so the speculator can be scored and run on those recordings
        tasks = [t for t in tasks if t.id not in held]
        if not tasks and not args.runs:
            raise ConfigError(f"--hold-out leaves none of the {args.split} split's tasks to fit on")
    progress = Progress("speculator fit", enabled=not getattr(args, "no_progress", False))
    started = time.perf_counter()
    artifact = anyio.run(lambda: fit_bench(bench, tasks, runs=args.runs, gold=not args.no_gold,
                                           min_reward=args.min_reward, seed=args.seed, split=args.split,
                                           progress=progress))
    fit_s = time.perf_counter() - started
    cap = getattr(args, "lookahead_cap", None)
    artifact.model.lookahead_cap = cap  # where it fits: every use of the file (runs, mining, scoring) obeys it
    artifact.save(out)
    progress(f"fitted in {fit_s:.1f} s: {len(artifact.model.rules)} rules, written to {out}")
    model = artifact.model
    return {"speculator": str(out), "bench": args.bench, "split": args.split,
            "trajectories": artifact.fitted_on.trajectories, "calls": artifact.fitted_on.calls,
            "rules": len(model.rules), "lookahead_rules": len(model.lookahead_rules), "probes": len(model.probes),
            "lookahead_cap": cap, "fit_s": round(fit_s, 3)}


def score_command(args: argparse.Namespace) -> dict[str, Any]:
    """``speculator score``: hit rates of a fitted speculator on a split (or ``--folds`` cross-validation)."""
    if (args.speculator is None) == (args.folds is None):
        raise ConfigError("score needs --speculator FILE, or --folds K to cross-validate on the split itself")
    if args.learn_online and args.folds is not None:
        raise ConfigError("--learn-online scores with a --speculator FILE, not --folds")
    if args.runs and (args.folds is not None or args.learn_online):
        raise ConfigError("--runs scores a --speculator FILE against run episodes: not with --folds or --learn-online")
    artifact = load(args.speculator) if args.speculator else None
    bench = _bench(args, "agentspec speculator score")
    tasks = bench.tasks(args.split, limit=args.limit)
    cap = getattr(args, "lookahead_cap", None)
    if cap is None and artifact is not None:
        cap = artifact.model.lookahead_cap
    head = {"bench": args.bench, "split": args.split, "lookahead": bool(args.lookahead), "lookahead_cap": cap}
    if artifact is None:
        async def fitter(train: Sequence[Any]) -> SpeculatorModel:
            return (await fit_bench(bench, train, seed=args.seed, split=args.split)).model

        figures = anyio.run(lambda: cross_validate(bench, tasks, args.folds, args.seed, fitter, lookahead=args.lookahead,
                                                   cap=cap))
        return {**head, "speculator": f"{args.folds}-fold cross-validation", **figures}
    ids = [t.id for t in tasks]
    if args.runs:
        mined = [m for m in run_trajectories(args.runs, set(ids), min_reward=args.min_reward, bench=bench)
                 if m.task_id in set(ids)]
        if not mined:
            floor = "the default reward" if args.min_reward is None else f"reward >= {args.min_reward}"
            raise ConfigError(f"no episode of the {args.split} split's tasks with {floor} in {', '.join(args.runs)}")
        for digest in {m.recording for m in mined}:  # the tasks scored: those of the episodes, nothing else
            artifact.fitted_on.check_unseen(sorted({m.task_id for m in mined if m.recording == digest}), digest)
        scores = anyio.run(lambda: score_runs(bench, tasks, mined, artifact.model, lookahead=args.lookahead, cap=cap))
        return {**head, "speculator": str(args.speculator), "reference": "runs", "runs": list(args.runs),
                "episodes": len(mined), **summarise(scores)}
    artifact.fitted_on.check_unseen(ids)
    learner = OnlineLearner(artifact) if args.learn_online else None
    scores = anyio.run(lambda: score_tasks(bench, tasks, artifact.model, lookahead=args.lookahead, learner=learner,
                                           cap=cap))
    return {**head, "speculator": str(args.speculator), "learn_online": bool(args.learn_online), **summarise(scores)}
