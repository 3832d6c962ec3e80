"""The executor as parts with one job each, and one validated configuration from flags to the loop.

Issue 28 items 4 and 5: :class:`ExecutionLoop` stays small (the draft chain, the commit journal, the decisions and
late hints live in their own modules), metrics change only through ``ExecutionMetrics.observe_*``, and a setting is
checked by one rule whether it comes from a flag, a :class:`RunSpec`, :class:`agentspec.Executor` or an
:class:`ExecutorConfig`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import pytest
from toy_env import KVEnvironment
from trio.testing import MockClock

import agentspec
from agentspec.assembly import executor_config
from agentspec.cli import main
from agentspec.errors import ConfigError
from agentspec.run_spec import RunSpec
from agentspec.runtime.config import ExecutorConfig, LoopSettings, SporkConfig
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.journal import Journal
from agentspec.runtime.metrics import ExecutionMetrics
from agentspec.runtime.modes import Mode
from agentspec.runtime.policies.protocol import Decision, History
from agentspec.runtime.runlog.writer import RunLog
from agentspec.snapshot import InProcessBackend
from agentspec.types import Observation, ToolCall

PACKAGE = Path(agentspec.__file__).parent
SCRIPT = [ToolCall(name="put", arguments={"key": "a", "value": 1}), ToolCall(name="incr", arguments={"key": "a"}),
          ToolCall(name="get", arguments={"key": "a"})]


# --------------------------------------------------------------------------- the loop's size and the metrics seam


def test_execution_loop_class_body_is_under_250_lines():
    tree = ast.parse((PACKAGE / "runtime" / "executor.py").read_text(encoding="utf-8"))
    (loop,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ExecutionLoop"]
    assert loop.end_lineno is not None
    assert loop.end_lineno - loop.lineno + 1 < 250


def metric_writes(source: str) -> list[int]:
    """Lines that assign to a field of something named ``metrics`` (``x.metrics.f += 1``, ``metrics.f = v``,
    ``metrics.f[i] += 1``)."""
    def names_metrics(node: ast.expr) -> bool:
        return (isinstance(node, ast.Name) and node.id == "metrics") or (
            isinstance(node, ast.Attribute) and node.attr == "metrics")

    def is_field_of_metrics(target: ast.expr) -> bool:
        while isinstance(target, ast.Subscript):
            target = target.value
        return isinstance(target, ast.Attribute) and names_metrics(target.value)

    lines = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        lines += [node.lineno for target in targets if is_field_of_metrics(target)]
    return lines


def test_the_metric_write_finder_finds_writes():
    source = "self.metrics.probes += 1\nloop.metrics.wall_s = 2.0\nmetrics.hits_by_rank[0] += 1\nmetrics = None\n"
    assert metric_writes(source) == [1, 2, 3]


def test_metrics_change_only_through_observe_methods():
    """As vLLM's spec-decode stats: every figure has one place that says what changes it."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "runtime" / "metrics.py":
            continue
        offenders += [f"{path.relative_to(PACKAGE)}:{line}" for line in metric_writes(path.read_text(encoding="utf-8"))]
    assert offenders == []


# --------------------------------------------------------------------------- one validated configuration


def test_a_run_spec_is_the_executors_settings_copied_not_translated():
    spec = RunSpec.of(modes="smc", depth=2, l_min=3, seed=7, max_errors=4, verify_macros=True, macro_commit="trusted",
                      draft_first=True, spec_width=2, max_calls=9, record="rec")
    config = executor_config(spec, spec.modes[0])
    assert isinstance(spec, LoopSettings) and isinstance(spec.spork, SporkConfig)
    assert config.loop_settings() == spec.loop_settings()
    assert (config.mode, config.max_calls, config.speculate_first) == ("smc", 9, True)


def lower_bounds() -> list[tuple[str, int]]:
    """Every executor setting with a lower bound, and that bound."""
    bounds = []
    for name, field in LoopSettings.model_fields.items():
        for rule in field.metadata:
            if getattr(rule, "ge", None) is not None:
                bounds.append((name, int(rule.ge)))
    return bounds


@pytest.mark.parametrize(("name", "least"), lower_bounds())
def test_spec_and_executor_config_agree_on_every_bound(name, least):
    RunSpec.of(**{name: least})
    ExecutorConfig(**{name: least})
    with pytest.raises(ConfigError, match=name):
        RunSpec.of(**{name: least - 1})
    with pytest.raises(ConfigError, match=name):
        ExecutorConfig(**{name: least - 1})


def test_l_min_bounds_cover_the_settings_that_disagreed():
    assert ("l_min", 1) in lower_bounds() and ("depth", 1) in lower_bounds() and ("spec_width", 1) in lower_bounds()


class Nobody:
    async def decide(self, history: History) -> Decision:
        return Decision(call=None)


def test_l_min_zero_is_refused_by_the_cli_the_spec_and_the_api(tau2_dir, capsys):
    """It used to pass the flag and the spec, then fail inside the first task's executor."""
    code = main(["run", "--bench", "tau2-telecom", "--agent", "oracle", "--mode", "smc", "--speculator-model",
                 "noisy-oracle:0.8", "--l-min", "0", "--no-progress", "--data-dir", str(tau2_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "argument --l-min: must be an integer >= 1, got '0'" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="l_min"):
        RunSpec.of(bench="tau2-telecom", agent="oracle", modes="smc", speculator_model="noisy-oracle:0.8", l_min=0)
    with pytest.raises(ConfigError, match="l_min"):
        agentspec.Executor(KVEnvironment(), authority=Nobody(), speculator=Nobody(), mode="smc", l_min=0)
    with pytest.raises(ConfigError, match="macro_commit"):
        agentspec.Executor(KVEnvironment(), authority=Nobody(), speculator=Nobody(), mode="smc", macro_commit="lossy")
    executor = agentspec.Executor(KVEnvironment(), authority=Nobody(), speculator=Nobody(), mode="smc", l_min=2)
    assert executor.spec.l_min == 2


def test_bad_executor_and_spork_configs_are_one_config_error():
    with pytest.raises(ConfigError, match="mode"):
        ExecutorConfig(mode="fast")
    with pytest.raises(ConfigError, match="gate"):
        SporkConfig(gate=1.5)
    with pytest.raises(ConfigError, match="per_tool_gate"):
        SporkConfig(per_tool_gate={"put": 2.0})


def test_a_spork_logs_header_keeps_its_shape_until_the_api_only_knobs_are_set():
    """Logs written before SporkConfig's other knobs were spec fields still resume."""
    plain = RunSpec.of(modes="spork").result_settings(Mode.parse("spork"), env={})
    assert set(plain["spork"]) == {"gate", "probe_every", "cost_model", "probe_accuracy", "probe_opening", "probe_tokens"}
    tuned = RunSpec.of(modes="spork", spork={"contention": 0.5}).result_settings(Mode.parse("spork"), env={})
    assert tuned["spork"]["contention"] == 0.5


# --------------------------------------------------------------------------- the parts alone


def test_the_journal_records_steps_and_a_new_journal_resumes_them(tmp_path):
    backend = InProcessBackend(KVEnvironment())
    log = RunLog(tmp_path / "run.jsonl")
    journal = Journal(backend, log, "t1")
    for call in SCRIPT[:2]:
        (eid,) = journal.intents([call], "authority")
        observation = backend.live.execute(call)
        journal.record([(call, observation, eid)], "authority")
    bad = ToolCall(name="nope", arguments={})
    (eid,) = journal.intents([bad], "invalid")
    journal.record([(bad, Observation(call_id=bad.id, name="nope", content="no", error=True), eid)], "invalid")
    log.close()
    resumed = Journal(InProcessBackend(KVEnvironment()), None, "t1")
    resumed.resume(RunLog.read(tmp_path / "run.jsonl")["t1"])
    assert [s.call for s in resumed.steps] == [*SCRIPT[:2], bad] and resumed.errors == journal.errors == 1
    assert [s.effect_id for s in resumed.steps] == [s.effect_id for s in journal.steps]
    assert resumed.backend.live.state["data"] == {"a": 2}  # the state the steps left, not run again


class Guesser:
    """Guesses the script's next call, one call too many at the end (a mutating draft that is never confirmed)."""

    async def decide(self, history: History) -> Decision:
        await anyio.sleep(0.1)
        return Decision(call=SCRIPT[len(history)] if len(history) < len(SCRIPT) else SCRIPT[0])


class Script:
    async def decide(self, history: History) -> Decision:
        await anyio.sleep(1.0)
        return Decision(call=SCRIPT[len(history)] if len(history) < len(SCRIPT) else None)


def test_the_loop_counts_commits_and_waste_through_its_metrics():
    async def go():
        loop = ExecutionLoop(InProcessBackend(KVEnvironment()), Script(), Guesser(), config=ExecutorConfig(mode="sa"))
        return await loop.run()

    result = anyio.run(go, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)})
    metrics: ExecutionMetrics = result.metrics
    assert [s.source for s in result.steps] == ["sa", "sa", "sa"]
    assert metrics.commits_sa == 3 and metrics.hits_by_rank == [3] and metrics.authority_calls == 4
    # The chain kept drafting past the script's end: those drafts ran in forks and were thrown away.
    assert metrics.drafts_discarded >= 1 and metrics.wasted_tool_calls >= 1 and metrics.live_executions == 0
