"""``agentspec run``: run a benchmark and score it (handler: :func:`run_command`)."""

from __future__ import annotations

import argparse
from typing import Any

from agentspec.cli.flags import (
    POSITIVE,
    PROBABILITY,
    TEMPERATURE,
    Flags,
    add_bench,
    add_bench_options,
    add_data_dir,
    add_json,
    add_macro_commit,
    add_role_flags,
    add_unverified_data,
    number,
    out_file,
    out_folder,
)


def add_parser(sub: Any) -> None:
    """Register ``run``, its flags in groups (what to run, models, modes and speculation, benches, output)."""
    run = sub.add_parser("run", help="run a benchmark and score it", description="Run a benchmark's tasks, in one "
                         "or several modes, and score them: a table of the modes at the end (--json: one JSON line), "
                         "everything in OUT/results.json.")
    _what_to_run(run.add_argument_group("run", "what to run: the bench, its tasks and the agent"))
    _models(run.add_argument_group("models", "the models behind the agent, its user and the speculator (an endpoint "
                                   "URL, URL#MODEL, or a local model agentspec serves for the run)"))
    _speculation(run.add_argument_group("modes and speculation", "the speculative executor (normal play or --solo)"))
    _benches(run)
    _output(run.add_argument_group("output", "where the results go and what is printed"))
    run.set_defaults(handler="agentspec.cli.run:run_command", table="agentspec.cli.tables:run_table")


def _what_to_run(group: Flags) -> None:
    add_bench(group)
    group.add_argument("--split", help="task split (tau2: base (default), small, train, test, full; workspace-demo: all, "
                       "small)")
    group.add_argument("--task-ids", help="comma-separated task ids (overrides --split)")
    group.add_argument("--limit", type=POSITIVE, help="run at most N tasks")
    group.add_argument("--trials", type=POSITIVE, default=1, help="episodes per task, for pass^k")
    group.add_argument("--agent", choices=["llm", "oracle", "replay"], default=None,
                       help="llm: a model decides; oracle: the task's gold calls; replay: a recorded run of a real "
                       "agent (--runs FILE), its user's side replayed too")
    group.add_argument("--runs", metavar="FILE", help="--agent replay: the recorded run to play (tau2-bench's "
                       "simulation file, or a run folder with its results.json); its tasks and trials unless "
                       "--task-ids, --split or --limit narrow them")
    group.add_argument("--solo", action="store_true", help="no user simulator: the agent works the ticket alone")
    group.add_argument("--max-steps", type=POSITIVE, default=200, help="end an episode after N messages")
    group.add_argument("--max-errors", type=POSITIVE, default=10, help="end an episode after N tool errors")
    group.add_argument("--concurrency", type=POSITIVE, default=1, help="episodes in parallel")
    group.add_argument("--ray", nargs="?", const="default", default=None, metavar="ADDRESS",
                       help="run each episode as a task on a Ray cluster (pip install 'agentspec[ray]'): ADDRESS is "
                       "the head node's HOST:PORT (ray start --head --port); without it, the cluster RAY_ADDRESS or "
                       "`ray start` on this machine names, else a new local one.  The cluster's CPUs, not "
                       "--concurrency, set episodes in flight")
    add_data_dir(group)
    add_unverified_data(group)


def _models(group: Flags) -> None:
    add_role_flags(group, "agent", "the agent's model")
    add_role_flags(group, "user", "the user simulator's model")
    group.add_argument("--temperature", type=TEMPERATURE, default=None, help="sampling temperature for every model")
    group.add_argument("--answer-prefix", default="",
                       help="LLM agent: start every answer with this text, continued by the endpoint "
                       "(continue_final_message), and allow text before the call (tool_choice auto); e.g. "
                       "'Thought:' or '<think>\\n', so the agent reasons first and SPORK probes can overtake it")
    group.add_argument("--record", metavar="DIR", type=out_folder, help="store every model response in "
                       "DIR/responses.jsonl (the speculator fills its chain before each authority decision, so any "
                       "replay finds its answers)")
    group.add_argument("--replay", metavar="DIR", help="answer every model request from DIR (recorded with --record): "
                       "no model runs; with --latency-model the run takes the virtual clock")


def _speculation(group: Flags) -> None:
    group.add_argument("--mode", help="sequential, sa, smc, spork or X+spork; a comma list (sequential,sa,smc) runs "
                       "each in one go; without it, sequential")
    add_role_flags(group, "speculator", "the speculator's model", repeatable=True,
                   also=["noisy-oracle:P (with --agent oracle or replay)",
                         "learned:FILE (a file of `agentspec speculator fit`)",
                         "learned (fitted on the bench's train split, cached)"])
    group.add_argument("--depth", type=POSITIVE, default=4, help="draft chain depth")
    group.add_argument("--spec-width", type=POSITIVE, default=1,
                       help="guesses run per chain position, each in its own fork: the speculator's best and its next "
                       "K-1 ranked alternatives (an authority call equal to any of them commits with its result)")
    group.add_argument("--governor", action=argparse.BooleanOptionalAction, default=True,
                       help="measure each speculator's cost to the authority and its saving, and pause one that costs "
                       "more than it saves (the summary's governor says so per mode)")
    group.add_argument("--learn-online", action="store_true",
                       help="with --speculator-model learned:FILE: update its counts from each finished task of the run")
    group.add_argument("--save-speculator", type=out_file, metavar="FILE",
                       help="with --learn-online: write the updated speculator here at the end (same format as FILE)")
    group.add_argument("--speculator-hints", action=argparse.BooleanOptionalAction, default=None,
                       help="send the speculator's next call with each authority request as a draft hint (default: "
                       "only to a local model agentspec serves; agentspec serve --decoder toolspec drafts it)")
    group.add_argument("--draft-first", action="store_true",
                       help="the speculator guesses the next call, then the authority's decoder verifies it, in turn "
                       "(models sharing one machine's cores; with --speculator-hints; one guess ahead)")
    _macro_flags(group)
    _clock_and_probe_flags(group)


def _macro_flags(group: Flags) -> None:
    group.add_argument("--macros", help="macro library JSON for smc (default: the bench's shipped library, "
                       "e.g. macros/tau2-telecom.json)")
    add_macro_commit(group)
    group.add_argument("--l-min", type=number(int, ge=1), default=1, help="minimum decisions a macro commit must skip")
    group.add_argument("--verify-macros", action="store_true",
                       help="check each macro commit against the authority and update n, k")
    group.add_argument("--macros-out", type=out_file,
                       help="save the macro library with its online-updated n, k, lcb here")


def _clock_and_probe_flags(group: Flags) -> None:
    group.add_argument("--latency-model", help="simulated latency: a preset name (smc-paper; recorded: a recorded "
                       "agent's own clock, with --agent replay) or a JSON file")
    group.add_argument("--tool-latency", metavar="S", help="every tool takes S seconds (or a preset's tool times, "
                       "e.g. smc-paper) on the latency model's clock")
    group.add_argument("--gate", type=PROBABILITY, default=0.90,
                       help="SPORK: dispatch a probed call at confidence >= gate")
    group.add_argument("--probe-every", type=POSITIVE, default=16, help="SPORK: probe again every N authority tokens")
    group.add_argument("--probe-accuracy", type=PROBABILITY, default=0.9,
                       help="SPORK with --agent oracle: simulated probe hit rate")
    group.add_argument("--no-cost-model", action="store_true",
                       help="SPORK: probe and dispatch regardless of the cost model")
    group.add_argument("--probe-opening", choices=["fenced", "hermes"], default="fenced",
                       help="SPORK: the call opening a probe forces: fenced json (Qwen coder models) or "
                       "'</think>\\n\\n<tool_call>' (Qwen3-style hermes models)")
    group.add_argument("--seed", type=number(int, ge=0), default=0, help="seeds noisy oracles and simulated probes")


def _benches(run: argparse.ArgumentParser) -> None:
    """The benches' own flags: those several take, then one section per bench that has its own."""
    add_bench_options(run.add_argument_group("benches", "settings of the bench itself"))
    gaia = run.add_argument_group("benches: GAIA (--bench gaia)")
    gaia.add_argument("--level", help="the levels to run, e.g. 1,2")
    gaia.add_argument("--search-backend", help="web search backend (local: the data folder's corpus/; brave, serper, "
                      "tavily: hosted APIs, keys in BRAVE_API_KEY / SERPER_API_KEY / TAVILY_API_KEY)")
    _mcp(run.add_argument_group("benches: MCP (--bench mcp)", "an MCP server's tools (pip install 'agentspec[mcp]')"))
    run.add_argument_group("benches: AppWorld (--bench appworld)", "set it up first with `agentspec bench setup "
                           "appworld`; its settings are --bench-option actions=api|meta|code (how the agent acts), "
                           "apps=spotify,venmo (the apps whose APIs are tools), python=PATH (its venv's python)")


def _mcp(mcp: Flags) -> None:
    server = mcp.add_mutually_exclusive_group()
    server.add_argument("--mcp", metavar="'COMMAND ARGS'", help="start this stdio MCP server (one shell-quoted line; "
                        "python is the interpreter running agentspec)")
    server.add_argument("--mcp-url", metavar="URL", help="talk to the streamable HTTP MCP server at URL")
    mcp.add_argument("--mcp-sandbox", choices=["overlay", "copy", "docker"], help="run the --mcp server inside a "
                     "forkable sandbox, one copy per fork over its own tree (docker: its own container), so its "
                     "state-changing tools can be speculated (only for servers whose whole state is files under "
                     "their working directory)")
    mcp.add_argument("--mcp-trust-annotations", action="store_const", const="true", default=None,
                     help="believe the server's readOnlyHint annotations and speculate those tools on the live "
                     "server, unsandboxed (off by default: a server's annotations are its own word; every result says "
                     "when they were trusted)")
    tasks = mcp.add_mutually_exclusive_group()
    tasks.add_argument("--task", metavar="TEXT", help="the one task to give the agent")
    tasks.add_argument("--tasks", metavar="FILE.jsonl", help="tasks, one JSON object a line: task, and optionally "
                       "id, answer (expected in the final answer) and gold (reference calls)")


def _output(group: Flags) -> None:
    group.add_argument("--out", type=out_folder, help="folder for results.json and the run logs (created; must not be "
                       "a file); one run at a time may write into it (default: a new folder BENCH-UTCTIME in "
                       "$AGENTSPEC_RUNS, or in ./runs without it)")
    group.add_argument("--resume", action="store_true", help="continue the run logged in --out without re-applying "
                       "effects (refused when the log was written with other settings)")
    group.add_argument("--overwrite", action="store_true", help="discard the run logs an earlier run left in --out and "
                       "start afresh (without it, or --resume, they are refused)")
    uncertain = group.add_mutually_exclusive_group()
    uncertain.add_argument("--resume-retry-uncertain", dest="resume_uncertain", action="store_const", const="retry",
                           default="stop", help="with --resume, where the environment keeps its effects (an MCP "
                           "server): run again a call the stopped run started and never confirmed")
    uncertain.add_argument("--resume-skip-uncertain", dest="resume_uncertain", action="store_const", const="skip",
                           help="with --resume: record such a call as not done (the agent is told so) instead")
    group.add_argument("--report", action="store_true", help="write OUT/report.html (agentspec report) at the end")
    group.add_argument("--baseline", help="an earlier run's results.json (or its folder): report this run's ratios "
                       "against it")
    group.add_argument("--timeline", type=out_file, help="write a PNG timeline of the first task's episode (last mode) "
                       "here")
    group.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_json(group, help="print the summary as one JSON line (what scripts read) instead of the table")


def run_command(args: argparse.Namespace) -> dict[str, Any]:
    """Run the bench through the executor: ``--mode``'s modes, ``sequential`` without it (normal play with the
    user simulator where the bench has one, as every mode plays)."""
    _mcp_options(args)
    from agentspec.cli.run_modes import speculative_run_command

    args.mode = args.mode or "sequential"
    return speculative_run_command(args)


MCP_FLAGS = {"mcp": "mcp", "mcp_url": "mcp_url", "mcp_sandbox": "sandbox", "mcp_trust_annotations": "trust_annotations",
             "task": "task", "tasks": "tasks"}
"""The ``--bench mcp`` flags, by argparse name, and the bench options they become."""


def _mcp_options(args: argparse.Namespace) -> None:
    """Pass the ``--mcp*``/``--task(s)`` flags to the mcp bench as its bench options; refuse them elsewhere."""
    from agentspec.errors import ConfigError

    given = {option: getattr(args, flag) for flag, option in MCP_FLAGS.items() if getattr(args, flag, None) is not None}
    if given and args.bench != "mcp":
        flags = ", ".join("--" + flag.replace("_", "-") for flag in MCP_FLAGS if getattr(args, flag, None) is not None)
        raise ConfigError(f"{flags}: only for --bench mcp")
    args.bench_option = [*getattr(args, "bench_option", []), *(f"{key}={value}" for key, value in given.items())]
