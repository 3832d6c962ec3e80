"""``agentspec run``: run a benchmark and score it (handler: :func:`run_command`)."""

from __future__ import annotations

import argparse
from typing import Any

from agentspec.cli.flags import (
    POSITIVE,
    PROBABILITY,
    TEMPERATURE,
    add_bench_options,
    add_data_dir,
    add_macro_commit,
    add_role_flags,
    add_unverified_data,
    number,
    out_file,
    out_folder,
)


def add_parser(sub: Any) -> None:
    """Register ``run`` with its speculative-execution flags."""
    run = sub.add_parser("run", help="run a benchmark and score it")
    run.add_argument("--bench", required=True, help="benchmark name, e.g. tau2-telecom")
    run.add_argument("--split", help="task split (tau2: base (default), small, train, test, full; workspace-demo: all, small)")
    run.add_argument("--task-ids", help="comma-separated task ids (overrides --split)")
    run.add_argument("--limit", type=POSITIVE, help="run at most N tasks")
    run.add_argument("--trials", type=POSITIVE, default=1, help="episodes per task, for pass^k")
    run.add_argument("--concurrency", type=POSITIVE, default=1, help="episodes in parallel")
    run.add_argument("--ray", nargs="?", const="default", default=None, metavar="ADDRESS",
                     help="run each episode as a task on a Ray cluster (pip install 'agentspec[ray]'): ADDRESS is "
                     "the head node's HOST:PORT (ray start --head --port); without it, the cluster RAY_ADDRESS or `ray start` on this machine "
                     "names, else a new local one.  The cluster's CPUs, not --concurrency, set episodes in flight")
    run.add_argument("--agent", choices=["llm", "oracle", "replay"], default=None,
                     help="llm: a model decides; oracle: the task's gold calls; replay: a recorded run of a real agent "
                     "(--runs FILE), its user's side replayed too")
    run.add_argument("--runs", metavar="FILE", help="--agent replay: the recorded run to play (tau2-bench's simulation "
                     "file, or a run folder with its results.json); its tasks and trials unless --task-ids, --split "
                     "or --limit narrow them")
    add_role_flags(run, "agent", "the agent's model")
    add_role_flags(run, "user", "the user simulator's model")
    run.add_argument("--solo", action="store_true", help="no user simulator: the agent works the ticket alone")
    run.add_argument("--temperature", type=TEMPERATURE, default=None, help="sampling temperature for every model")
    run.add_argument("--max-steps", type=POSITIVE, default=200, help="end an episode after N messages")
    run.add_argument("--max-errors", type=POSITIVE, default=10, help="end an episode after N tool errors")
    run.add_argument("--out", type=out_folder, help="folder for results.json and the run logs (created; must not be a "
                     "file); one run at a time may write into it")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.add_argument("--report", action="store_true", help="write OUT/report.html (agentspec report) at the end; needs --out")
    add_data_dir(run)
    add_unverified_data(run)
    run.add_argument("--level", help="GAIA: the levels to run, e.g. 1,2")
    run.add_argument("--search-backend", help="GAIA: web search backend (local: the data folder's corpus/; brave, "
                     "serper, tavily: hosted APIs, keys in BRAVE_API_KEY / SERPER_API_KEY / TAVILY_API_KEY)")
    add_bench_options(run)
    mcp = run.add_argument_group("--bench mcp: an MCP server's tools (pip install 'agentspec[mcp]')")
    server = mcp.add_mutually_exclusive_group()
    server.add_argument("--mcp", metavar="'COMMAND ARGS'", help="start this stdio MCP server (one shell-quoted line; "
                        "python is the interpreter running agentspec)")
    server.add_argument("--mcp-url", metavar="URL", help="talk to the streamable HTTP MCP server at URL")
    mcp.add_argument("--mcp-sandbox", choices=["overlay", "copy", "docker"], help="run the --mcp server inside a "
                     "forkable sandbox, one copy per fork over its own tree (docker: its own container), so its "
                     "state-changing tools can be speculated (only for servers whose whole state is files under "
                     "their working directory)")
    tasks = mcp.add_mutually_exclusive_group()
    tasks.add_argument("--task", metavar="TEXT", help="the one task to give the agent")
    tasks.add_argument("--tasks", metavar="FILE.jsonl", help="tasks, one JSON object a line: task, and optionally "
                       "id, answer (expected in the final answer) and gold (reference calls)")
    spec = run.add_argument_group("speculative execution (normal or --solo)")
    spec.add_argument("--mode", help="sequential, sa, smc, spork or X+spork; a comma list (sequential,sa,smc) runs each "
                      "in one go; without it, sequential")
    add_role_flags(spec, "speculator", "the speculator's model", repeatable=True,
                   also=["noisy-oracle:P (with --agent oracle or replay)", "learned:FILE (a file of `agentspec speculator fit`)",
                         "learned (fitted on the bench's train split, cached)"])
    spec.add_argument("--macros", help="macro library JSON for smc (default: the bench's shipped library, "
                                       "e.g. macros/tau2-telecom.json)")
    spec.add_argument("--latency-model", help="simulated latency: a preset name (smc-paper; recorded: a recorded "
                      "agent's own clock, with --agent replay) or a JSON file")
    spec.add_argument("--tool-latency", metavar="S", help="every tool takes S seconds (or a preset's tool times, e.g. "
                      "smc-paper) on the latency model's clock")
    spec.add_argument("--depth", type=POSITIVE, default=4, help="draft chain depth")
    spec.add_argument("--spec-width", type=POSITIVE, default=1,
                      help="guesses run per chain position, each in its own fork: the speculator's best and its next "
                      "K-1 ranked alternatives (an authority call equal to any of them commits with its result)")
    spec.add_argument("--learn-online", action="store_true",
                      help="with --speculator-model learned:FILE: update its counts from each finished task of the run")
    spec.add_argument("--save-speculator", type=out_file, metavar="FILE",
                      help="with --learn-online: write the updated speculator here at the end (same format as FILE)")
    spec.add_argument("--governor", action=argparse.BooleanOptionalAction, default=True,
                      help="measure each speculator's cost to the authority and its saving, and pause one that costs "
                      "more than it saves (the summary's governor says so per mode)")
    spec.add_argument("--l-min", type=number(int, ge=1), default=1, help="minimum decisions a macro commit must skip")
    spec.add_argument("--verify-macros", action="store_true", help="check each macro commit against the authority and update n, k")
    add_macro_commit(spec)
    spec.add_argument("--macros-out", type=out_file, help="save the macro library with its online-updated n, k, lcb here")
    spec.add_argument("--seed", type=number(int, ge=0), default=0, help="seeds noisy oracles and simulated probes")
    spec.add_argument("--resume", action="store_true", help="continue the run logged in --out without re-applying effects "
                      "(refused when the log was written with other settings)")
    spec.add_argument("--overwrite", action="store_true", help="discard the run logs an earlier run left in --out and "
                      "start afresh (without it, or --resume, they are refused)")
    spec.add_argument("--speculator-hints", action=argparse.BooleanOptionalAction, default=None,
                      help="send the speculator's next call with each authority request as a draft hint (default: "
                      "only to a local model agentspec serves; agentspec serve --decoder toolspec drafts it)")
    spec.add_argument("--draft-first", action="store_true",
                      help="the speculator guesses the next call, then the authority's decoder verifies it, in turn "
                      "(models sharing one machine's cores; with --speculator-hints; one guess ahead)")
    spec.add_argument("--record", metavar="DIR", type=out_folder, help="store every model response in DIR/responses.jsonl (the speculator "
                      "fills its chain before each authority decision, so any replay finds its answers)")
    spec.add_argument("--replay", metavar="DIR", help="answer every model request from DIR (recorded with --record): no "
                      "model runs; with --latency-model the run takes the virtual clock")
    spec.add_argument("--baseline", help="an earlier run's results.json (or its folder): report this run's ratios against it")
    spec.add_argument("--gate", type=PROBABILITY, default=0.90, help="SPORK: dispatch a probed call at confidence >= gate")
    spec.add_argument("--probe-every", type=POSITIVE, default=16, help="SPORK: probe again every N authority tokens")
    spec.add_argument("--probe-accuracy", type=PROBABILITY, default=0.9, help="SPORK with --agent oracle: simulated probe hit rate")
    spec.add_argument("--no-cost-model", action="store_true", help="SPORK: probe and dispatch regardless of the cost model")
    spec.add_argument("--answer-prefix", default="",
                      help="LLM agent: start every answer with this text, continued by the endpoint "
                           "(continue_final_message), and allow text before the call (tool_choice auto); e.g. "
                           "'Thought:' or '<think>\\n', so the agent reasons first and SPORK probes can overtake it")
    spec.add_argument("--probe-opening", choices=["fenced", "hermes"], default="fenced",
                      help="SPORK: the call opening a probe forces: fenced json (Qwen coder models) or "
                           "'</think>\\n\\n<tool_call>' (Qwen3-style hermes models)")
    spec.add_argument("--timeline", type=out_file, help="write a PNG timeline of the first task's episode (last mode) here")
    run.set_defaults(handler="agentspec.cli.run:run_command")


def run_command(args: argparse.Namespace) -> dict[str, Any]:
    """Run the bench through the executor: ``--mode``'s modes, ``sequential`` without it (normal play with the
    user simulator where the bench has one, as every mode plays)."""
    from agentspec.errors import ConfigError

    if args.report and not args.out:
        raise ConfigError("--report needs --out DIR: the report is written to DIR/report.html")
    _mcp_options(args)
    from agentspec.cli.run_modes import speculative_run_command

    args.mode = args.mode or "sequential"
    return speculative_run_command(args)


MCP_FLAGS = {"mcp": "mcp", "mcp_url": "mcp_url", "mcp_sandbox": "sandbox", "task": "task", "tasks": "tasks"}
"""The ``--bench mcp`` flags, by argparse name, and the bench options they become."""


def _mcp_options(args: argparse.Namespace) -> None:
    """Pass the ``--mcp*``/``--task(s)`` flags to the mcp bench as its bench options; refuse them elsewhere."""
    from agentspec.errors import ConfigError

    given = {option: getattr(args, flag) for flag, option in MCP_FLAGS.items() if getattr(args, flag, None) is not None}
    if given and args.bench != "mcp":
        flags = ", ".join("--" + flag.replace("_", "-") for flag in MCP_FLAGS if getattr(args, flag, None) is not None)
        raise ConfigError(f"{flags}: only for --bench mcp")
    args.bench_option = [*getattr(args, "bench_option", []), *(f"{key}={value}" for key, value in given.items())]
