"""``agentspec mine``: trajectories -> normalized skeletons -> labels -> filter -> a macro library (the parser is
:mod:`agentspec.cli.mine`; the steps are :mod:`agentspec.mining`'s).

    agentspec mine --bench tau2-telecom --split train --speculator-model noisy-oracle:0.8 \\
        --data-dir ../shared/data/tau2 --out macros/tau2-telecom.json

Trajectories are the split's gold calls (replayed for their observations;
``--no-gold`` leaves them out) and the successful episodes of ``--runs``
folders, restricted to the split's tasks so mining never sees a test task, and every episode of recorded runs of
real agents (tau2-bench's simulation files; leave out the recording a library will run on).
The speculator is ``noisy-oracle:P`` (each trajectory's own calls stand in
for the gold), a learned speculator (``learned:FILE`` of ``agentspec speculator fit``) or any model
endpoint (``URL``, ``URL#MODEL``, or a name with
``--speculator-base-url``), which sees the solo agent prompt and tools.  The
last stdout line is one JSON object; ``funnel`` holds the counts (labels,
candidates, support >= n_min, lcb >= tau, kept).

The library records its inputs (split, sources, speculator, seed, parameters
and ``data_sha256``, a hash of the trajectories mined), never the time: the
same inputs give a byte-identical file, so re-mining a tracked library shows
no diff unless something that matters changed.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from agentspec.assembly import model_policy
from agentspec.bench.registry import open_bench
from agentspec.cli.commands.speculator import prepare_replay
from agentspec.cli.flags import bench_options
from agentspec.cli.mine import DEFAULT_TEMPERATURE
from agentspec.errors import ConfigError
from agentspec.learned_speculator.artifact import load as load_speculator
from agentspec.learned_speculator.policy import LearnedSpeculator
from agentspec.learned_speculator.trajectories import task_text
from agentspec.macros import MacroLibrary
from agentspec.mining.candidates import enumerate_candidates, graph_statistics, transition_graph
from agentspec.mining.filter import FilterConfig, select
from agentspec.mining.labelling import (
    ReplaySandboxes,
    SpeculatorFactory,
    label_candidates,
    sample_continuations,
    training_states,
)
from agentspec.normalize import Normalizer, patterns_from_table
from agentspec.roles import open_roles
from agentspec.run_spec import RunSpec, learned_speculator
from agentspec.runtime.modes import noisy_oracle_p
from agentspec.runtime.policies.protocol import Policy
from agentspec.runtime.policies.scripted import NoisyOracleSpeculator
from agentspec.trajectories import MinedTrajectory, deduplicate, gold_trajectories, read_runs
from agentspec.types import canonical_json
from agentspec.user_files import out_dir


def _check(args: argparse.Namespace) -> FilterConfig:
    # Each number's own range is checked by the parser (agentspec.cli.flags); here only how flags combine.
    if args.min_length > args.max_length:
        raise ConfigError("need --min-length <= --max-length")
    out = Path(args.out)
    if out.is_dir():
        raise ConfigError(f"--out {args.out} is a folder: give the library's file name, e.g. {out / 'macros.json'}")
    out_dir(str(out.parent))  # a file where a parent folder should be is an error now, not a traceback later
    if not args.speculator_model and not args.speculator_base_url:
        raise ConfigError("mine needs --speculator-model (noisy-oracle:P, or a model endpoint)")
    if args.no_gold and not args.runs:
        raise ConfigError("--no-gold leaves nothing to mine: give --runs DIR")
    return FilterConfig(delta=args.delta, n_min=args.n_min, tau=args.tau, top=args.top)


def _progress(args: argparse.Namespace, text: str) -> None:
    if not args.no_progress:
        print(f"mine: {text}", file=sys.stderr, flush=True)


def _trajectories(args: argparse.Namespace, bench: Any) -> tuple[list[MinedTrajectory], dict[str, int], list[str]]:
    split_ids = {task.id for task in bench.tasks(args.split)}
    gold = [] if args.no_gold else anyio.run(gold_trajectories, bench, args.split, f"gold:{args.bench}/{args.split}")
    runs: list[MinedTrajectory] = []
    outside = 0
    sources = [] if args.no_gold else [f"gold:{args.bench}/{args.split}"]
    for folder in args.runs:
        try:
            found = read_runs(folder, bench, min_reward=args.min_reward)
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--runs {folder}: a results file is not UTF-8 text ({exc.reason})") from exc
        # A recorded run of a real agent is mined whole (its tasks are the bench's); an agentspec run's episodes
        # only where they are the split's.
        inside = [t for t in found if t.recording is not None or t.task_id in split_ids]
        outside += len(found) - len(inside)
        runs.extend(inside)
        sources.append(str(folder))
    used = deduplicate([*gold, *runs])
    counts = {"gold": len(gold), "runs": len(runs), "outside_split": outside,
              "duplicates": len(gold) + len(runs) - len(used), "used": len(used)}
    if not used:
        raise ConfigError(f"no successful trajectories to mine for split {args.split!r}")
    return used, counts, sources


async def _label(args: argparse.Namespace, bench: Any, trajectories: list[MinedTrajectory], states: list[tuple[int, int]],
                 depth: int, noisy_p: float | None) -> tuple[dict[tuple[int, int], list[Any]], int]:
    """Each state's sampled continuations, and the look-ahead calls the learned labeller ran (each in a fork of the
    replay at the sample's anchor, never on a trajectory's end state)."""
    async with AsyncExitStack() as stack:
        sandboxes = await stack.enter_async_context(ReplaySandboxes(lambda t: bench.open_backend(bench.task(t.task_id), solo=True)))
        learned = learned_speculator(args.speculator_model)
        if learned:
            model = load_speculator(learned).model

            def speculator(trajectory: MinedTrajectory, sample: int) -> Policy:
                # Deterministic: every sample is the same guess chain; it looks ahead in the sample's own fork.
                return LearnedSpeculator(model, task_text(bench, bench.task(trajectory.task_id)))
        elif noisy_p is not None:
            distractors = bench.distractors()

            def speculator(trajectory: MinedTrajectory, sample: int) -> Policy:
                # Each sample is an independent draw: the noisy oracle is seeded per (seed, sample, context).
                return NoisyOracleSpeculator(trajectory.calls, noisy_p, distractors, task_id=trajectory.task_id,
                                             seed=args.seed * 1_000_003 + sample)
        else:
            # _check made sure a model was named; a local model name is served for the run.
            roles = await stack.enter_async_context(open_roles(mine_spec(args), solo=True))
            spec, client = roles.spec, roles.clients["speculator"]

            def speculator(trajectory: MinedTrajectory, sample: int) -> Policy:
                task = bench.task(trajectory.task_id)
                return model_policy(spec, client, bench.system_prompt(task, solo=True), bench.tools(task, solo=True),
                                    solo=True, role="speculator")

        factory: SpeculatorFactory = speculator
        continuations = await sample_continuations(trajectories, states, factory, samples=args.samples, depth=depth,
                                                   sandboxes=sandboxes, concurrency=args.concurrency)
        return continuations, sandboxes.lookahead_calls


def mine_spec(args: argparse.Namespace) -> RunSpec:
    """The labelling run as a :class:`RunSpec`: the speculator's model (a speculating mode: the one role it
    opens), sampled at the mining temperature."""
    temperature = DEFAULT_TEMPERATURE if args.temperature is None else args.temperature
    return RunSpec.of(bench=args.bench, data_dir=args.data_dir, split=args.split, solo=True, agent="oracle", modes="sa",
                      speculator_model=args.speculator_model, speculator_base_url=args.speculator_base_url,
                      temperature=temperature, seed=args.seed)


def data_digest(trajectories: list[MinedTrajectory]) -> str:
    """sha256 of what was mined: each trajectory's task id, calls and observations, in a fixed order."""
    digest = hashlib.sha256()
    for trajectory in sorted(trajectories, key=lambda t: t.signature()):
        steps = [[call.canonical(), observation.content if observation else None] for call, observation in trajectory.steps]
        digest.update(canonical_json([trajectory.task_id, steps]).encode() + b"\n")
    return digest.hexdigest()


def mine_command(args: argparse.Namespace) -> dict[str, Any]:
    """Run the whole pipeline and write the library; returns the summary printed as the last JSON line."""
    config = _check(args)
    noisy_p = noisy_oracle_p(args.speculator_model)
    bench = open_bench(args.bench, args.data_dir, backend=getattr(args, "backend", None),
                       options=bench_options(getattr(args, "bench_option", [])))
    prepare_replay(bench, "agentspec mine")
    started = time.perf_counter()
    inputs = ([] if args.no_gold else [f"the {args.split} split's gold calls"]) + [str(run) for run in args.runs]
    _progress(args, f"reading trajectories from {', '.join(inputs)}...")
    trajectories, counts, sources = _trajectories(args, bench)
    _progress(args, f"{counts['used']} trajectories ({counts['gold']} gold, {counts['runs']} from runs)")

    table = bench.value_patterns()
    normalizer = Normalizer(patterns_from_table(table))
    graph = transition_graph(trajectories, normalizer)
    candidates = enumerate_candidates(trajectories, normalizer, graph, min_length=args.min_length, max_length=args.max_length)
    stats = graph_statistics(graph, candidates)
    states = training_states(trajectories, candidates, max_states=args.max_states, seed=args.seed)
    _progress(args, f"{len(candidates)} candidates; sampling {args.samples} continuations at {len(states)} states")

    continuations, lookahead_calls = anyio.run(_label, args, bench, trajectories, states, args.max_length - 1, noisy_p)
    labels = label_candidates(candidates, trajectories, continuations)
    macros, funnel = select(candidates, labels, config)

    temperature = None if noisy_p is not None or learned_speculator(args.speculator_model) else (DEFAULT_TEMPERATURE if args.temperature is None else args.temperature)
    library = MacroLibrary(
        bench=args.bench,
        provenance={
            "tool": "agentspec mine",
            "source": sources,
            "split": args.split,
            "speculator": args.speculator_model or args.speculator_base_url,
            "seed": args.seed,
            "data_sha256": data_digest(trajectories),
            "trajectories": counts,
            "states": len(states),
            "graph": stats,
            "funnel": funnel.as_dict(),
        },
        parameters=config.as_dict() | {"min_length": args.min_length, "max_length": args.max_length, "samples": args.samples,
                                        "temperature": temperature, "seed": args.seed, "max_states": args.max_states},
        macros=macros,
    )
    library.save(args.out)
    _progress(args, f"kept {len(macros)} of {len(candidates)} candidates in {time.perf_counter() - started:.1f} s, "
                    f"written to {args.out}")
    lengths: dict[str, int] = {}
    for macro in macros:
        lengths[str(len(macro.steps))] = lengths.get(str(len(macro.steps)), 0) + 1
    return {
        "bench": args.bench,
        "split": args.split,
        "speculator": args.speculator_model or args.speculator_base_url,
        "trajectories": counts,
        "states": len(states),
        "samples": len(states) * args.samples,
        "lookahead_calls": lookahead_calls,
        "graph": {k: v for k, v in stats.items() if k != "top_transitions"},
        "funnel": funnel.as_dict(),
        "kept_by_length": dict(sorted(lengths.items())),
        "out": str(Path(args.out)),
    }
