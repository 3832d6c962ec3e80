"""``agentspec run --mode ...``: a bench's tasks through the speculative executor, one or several modes per run.

The flags become one :class:`~agentspec.run_spec.RunSpec`, which :func:`agentspec.pipeline.run` runs.

With ``--mode sequential,sa,smc`` every mode runs over the same tasks in the
same process, so their ratios are measured side by side.  The summary
(``--json``: the last stdout line; ``results.json``'s ``summary``) holds the run's settings, each
mode's figures under ``modes`` (a dict by mode, also for a single mode),
``speedup_vs_sequential`` (mean task wall time of sequential over the mode's,
when sequential ran) and ``run_wall_s`` (the whole run); no mode's figure
sits at top level::

    {"bench": "tau2-telecom", "modes": {"sequential": {...}, "sa": {...}},
     "speedup_vs_sequential": {"sequential": 1.0, "sa": 1.41}, "run_wall_s": 3.2, ...}
"""

from __future__ import annotations

import argparse
import os
import re
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentspec.api import run
from agentspec.assembly import Outcome
from agentspec.bench.runner import raise_if_endpoint_dead
from agentspec.cli.flags import bench_options
from agentspec.errors import ConfigError
from agentspec.results import Results, results_file
from agentspec.run_spec import RunSpec, SporkSettings
from agentspec.runtime.runlog.lock import LOCK_NAME, locked_out
from agentspec.user_files import out_dir


def run_spec(args: argparse.Namespace) -> RunSpec:
    """The run the flags describe (checked as a whole: a bad combination fails before any task starts)."""
    for written in (args.timeline, args.macros_out):  # files written after the run: refuse a bad path before it
        if written and Path(written).is_dir():
            raise ConfigError(f"{written} is a folder: give a file name")
        if written:
            out_dir(str(Path(written).parent))
    task_ids = [t.strip() for t in args.task_ids.split(",") if t.strip()] if args.task_ids else None
    agent = args.agent or ("llm" if (args.agent_model or args.agent_base_url) else None)
    if agent is None:
        raise ConfigError("say which agent to run: --agent oracle, --agent llm (local models, served for the run), "
                          "--agent replay --runs FILE (a recorded run), or --agent-model URL_OR_NAME for an LLM agent")
    spork = SporkSettings(gate=args.gate, probe_every=args.probe_every, cost_model=not args.no_cost_model,
                          probe_accuracy=args.probe_accuracy, probe_opening=args.probe_opening)
    spec = RunSpec.of(
        bench=args.bench, data_dir=args.data_dir, backend=getattr(args, "backend", None), split=args.split,
        bench_options={**{k: v for k, v in (("levels", args.level), ("search", args.search_backend)) if v},
                       **bench_options(getattr(args, "bench_option", []))},
        task_ids=task_ids, limit=args.limit, trials=args.trials, solo=args.solo, agent=agent,
        runs=getattr(args, "runs", None), tool_latency=getattr(args, "tool_latency", None),
        **{f"{role}_{what}": getattr(args, f"{role}_{what}", None) for role in ("agent", "user", "speculator")
           for what in ("model", "base_url")},
        temperature=args.temperature, answer_prefix=args.answer_prefix, modes=args.mode, depth=args.depth,
        l_min=args.l_min, seed=args.seed, max_steps=args.max_steps, max_errors=args.max_errors,
        verify_macros=args.verify_macros, macro_commit=args.macro_commit, macros=args.macros, latency_model=args.latency_model, spork=spork,
        concurrency=args.concurrency, out=args.out, resume=args.resume, overwrite=args.overwrite,
        resume_uncertain=getattr(args, "resume_uncertain", "stop"),
        progress=not args.no_progress,
        record=args.record, replay=args.replay, speculator_hints=args.speculator_hints, draft_first=args.draft_first,
        cluster=getattr(args, "ray", None),
        unverified_data=getattr(args, "unverified_data", False), spec_width=getattr(args, "spec_width", 1),
        governor=getattr(args, "governor", True), more_speculators=getattr(args, "more_speculators", None) or [],
        learn_online=getattr(args, "learn_online", False), save_speculator=getattr(args, "save_speculator", None),
    )
    if (args.speculator_model or getattr(args, "more_speculators", None)) and not spec.needs_speculator:
        raise ConfigError(f"--speculator-model is only used by a speculating mode, and --mode {args.mode} has none: "
                          "add one, e.g. --mode sequential,sa,smc")
    out_dir(args.out)
    return spec


def _baseline_wall(path: Path) -> tuple[Path, str, dict[str, Any]]:
    """The baseline run's file, the mode it is compared as, and that mode's figures: its only mode, or its
    ``sequential`` mode when it ran several."""
    try:
        file = results_file(path)
        modes = {mode: figures.as_dict() for mode, figures in Results.load(file).summary.modes.items()}
    except ConfigError as exc:
        raise ConfigError(f"--baseline {path}: {exc}") from exc
    mode = next(iter(modes)) if len(modes) == 1 else "sequential" if "sequential" in modes else None
    if mode is None or not modes[mode].get("mean_task_wall_s"):
        raise ConfigError(f"--baseline {path}: no single mode (or sequential) with a mean_task_wall_s to compare with")
    return file, mode, modes[mode]


def _check_comparable(path: Path, results: Results) -> None:
    """Refuse a baseline of another bench or other tasks: its ratios would compare different work."""
    file, mode, _ = _baseline_wall(path)
    baseline = Results.load(file)
    theirs = {(r.task_id, r.trial) for r in baseline.episodes[mode]}
    ours = {(r.task_id, r.trial) for records in results.episodes.values() for r in records}
    if baseline.summary.bench != results.summary.bench:
        raise ConfigError(f"--baseline {path}: a run of {baseline.summary.bench}, this one is of {results.summary.bench}")
    if theirs != ours:
        raise ConfigError(f"--baseline {path}: it ran {len(theirs)} episodes of split {baseline.summary.split}, this "
                          f"run {len(ours)} of split {results.summary.split} ({len(theirs ^ ours)} not in both): "
                          "compare runs of the same tasks")


def _against_baseline(path: Path, summaries: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Mean task wall time of the baseline run over each mode's (> 1: this run is faster)."""
    file, base_mode, base = _baseline_wall(path)
    base_wall = base["mean_task_wall_s"]
    ratios = {mode: round(base_wall / s["mean_task_wall_s"], 4) for mode, s in summaries.items() if s.get("mean_task_wall_s")}
    return {"baseline": str(file), "baseline_mode": base_mode, "baseline_mean_task_wall_s": base_wall,
            "speedup": ratios, "reward_delta": {m: s["reward_mean"] - base.get("reward_mean", 0.0) for m, s in summaries.items()}}


RUNS_ENV = "AGENTSPEC_RUNS"
"""Where runs without ``--out`` keep their results (default: ``runs`` under the working directory)."""


def default_out(bench: str) -> Path:
    """A new folder for a run without ``--out``: ``$AGENTSPEC_RUNS/BENCH-UTCTIME`` (``./runs/...`` without the
    variable), made now so that two runs started in the same second each get their own (``-2``, ``-3``...)."""
    root = Path(os.environ.get(RUNS_ENV) or "runs")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", bench).strip(".-") or "run"  # a folder name, never a path
    for attempt in range(1, 1000):  # bounded: a name that always "exists" must not spin
        folder = root / (f"{name}-{stamp}" + (f"-{attempt}" if attempt > 1 else ""))
        try:
            folder.mkdir(parents=True)  # fails if it exists: this run's folder is no other run's
        except FileExistsError:
            continue
        except OSError as exc:  # a file where a folder should be, no permission...: one line, what to do
            raise ConfigError(f"cannot make {folder} to keep the results in ({exc.strerror or exc}): give --out DIR, "
                              f"or set {RUNS_ENV} to a folder you can write in") from None
        return folder
    raise ConfigError(f"{root} holds a thousand runs of {name} started at {stamp}: give --out DIR")


def _drop_if_unused(folder: Path) -> None:
    """Remove a default folder the run wrote nothing in (it failed before its first record): nothing to keep."""
    with suppress(OSError):  # tidying up must not hide why the run failed
        if {entry.name for entry in folder.iterdir()} <= {LOCK_NAME}:
            (folder / LOCK_NAME).unlink(missing_ok=True)
            folder.rmdir()


def speculative_run_command(args: argparse.Namespace) -> dict[str, Any]:
    """Run the spec the flags describe and write its results, holding ``--out`` from the first log record to the
    last file written (a second run into it is refused at once, not interleaved).  Without ``--out`` the results
    go to a new folder (:func:`default_out`): a run always keeps them."""
    spec = run_spec(args)
    if args.baseline:  # a bad baseline fails before any task runs, or any folder is made
        _baseline_wall(Path(args.baseline))
    made = spec.out is None
    # After every check of the flags: a refused run leaves no folder behind.
    out = spec.out = spec.out or str(default_out(args.bench))
    try:
        with locked_out(out):
            return _run_and_write(args, spec)
    except BaseException:
        if made:
            _drop_if_unused(Path(out))
        raise


def _run_and_write(args: argparse.Namespace, spec: RunSpec) -> dict[str, Any]:
    kept: list[Outcome] = []

    def annotate(results: Results, outcome: Outcome) -> None:
        """Before the results are written: the baseline comparison and the library's file go into the summary."""
        kept.append(outcome)
        if args.baseline:
            _check_comparable(Path(args.baseline), results)
            results.summary.vs_baseline = _against_baseline(
                Path(args.baseline), {m: s.as_dict() for m, s in results.summary.modes.items()})
        if args.macros_out and outcome.macros is not None:
            results.summary.macros_out = args.macros_out  # in results.json too: a report shows the library after the run

    results = run(spec, annotate=annotate)
    (outcome,) = kept
    summary = results.summary
    out = Path(spec.out) if spec.out else None
    written = results_file(out) if out is not None else None
    printed = summary.as_dict() | ({"results": str(written)} if written is not None else {})
    raise_if_endpoint_dead([e for r in outcome.modes.values() for e in r.episodes])
    if args.macros_out and outcome.macros is not None:
        outcome.macros.provenance["online_updates"] = {"runs": [m.name for m in spec.modes], "split": spec.split or outcome.bench.default_split}
        outcome.macros.save(args.macros_out)
    if args.report and out is not None:  # after the library is saved: the report reads it back
        from agentspec.report.command import report_after_run

        printed["report"] = report_after_run(out)
    if args.timeline:
        from agentspec.report.timeline import plot_timeline

        last = spec.modes[-1].name
        episode = results.episodes[last][0]
        timeline = (episode.execution or {}).get("timeline") or []
        plot_timeline(timeline, Path(args.timeline), title=f"{episode.task_id} ({last})")
        printed["timeline"] = args.timeline
    return printed
