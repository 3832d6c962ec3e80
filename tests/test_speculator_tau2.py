"""The learned speculator on the tau2 telecom data: scoring keeps the fit and the scored tasks apart, and runs
with ``--speculator-model learned:F`` keep sequential's rewards, with the head guess reaching the authority."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from agentspec.cli import main
from agentspec.learned_speculator.command import fit_bench
from agentspec.learned_speculator.model import SpeculatorModel
from agentspec.learned_speculator.policy import LearnedSpeculator
from agentspec.learned_speculator.score import cross_validate, folds_of, score_tasks, summarise
from agentspec.learned_speculator.trajectories import gold_calls, task_text
from agentspec.pipeline import run
from agentspec.run_spec import RunSpec
from agentspec.runtime.config import ExecutorConfig
from agentspec.runtime.executor import ExecutionLoop
from agentspec.runtime.policies.protocol import Decision, History
from agentspec.runtime.policies.scripted import OracleAuthority
from agentspec.types import ToolCall


@pytest.fixture(scope="module")
def spec_file(bench, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A speculator fitted on 16 train tasks (enough for the common fixes, fast)."""
    path = tmp_path_factory.mktemp("spec") / "spec.json"
    anyio.run(lambda: fit_bench(bench, bench.tasks("train", limit=16), split="train")).save(path)
    return path


def test_score_refuses_a_speculator_fitted_on_a_scored_task(bench, tau2_dir: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    leaky = tmp_path / "leaky.json"
    anyio.run(lambda: fit_bench(bench, bench.tasks("test", limit=2), split="test")).save(leaky)
    code = main(["speculator", "score", "--bench", "tau2-telecom", "--split", "test", "--speculator", str(leaky),
                 "--data-dir", str(tau2_dir)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "were in the speculator's fit" in err


def test_cross_validation_fits_each_fold_without_it(bench) -> None:
    tasks = bench.tasks("train", limit=6)
    fitted_on: list[set[str]] = []

    async def fitter(train: Any) -> SpeculatorModel:
        fitted_on.append({t.id for t in train})
        return (await fit_bench(bench, train)).model

    figures = anyio.run(lambda: cross_validate(bench, tasks, 3, 0, fitter, lookahead=False))
    folds = folds_of(tasks, 3, 0)
    assert [ids for ids in fitted_on] == [{t.id for t in tasks} - {t.id for t in fold} for fold in folds]
    assert figures["steps"] == sum(len(gold_calls(bench, t)) for t in tasks)


def test_scoring_with_lookahead_guesses_better_and_counts_its_calls(bench, spec_file: Path) -> None:
    from agentspec.learned_speculator.artifact import load

    model = load(spec_file).model
    tasks = bench.tasks("test", limit=8)
    plain = summarise(anyio.run(lambda: score_tasks(bench, tasks, model, lookahead=False)))
    ahead = summarise(anyio.run(lambda: score_tasks(bench, tasks, model, lookahead=True)))
    assert plain["lookahead_calls_per_step"] == 0 and ahead["lookahead_calls_per_step"] > 0
    assert ahead["exact_at_1"] >= plain["exact_at_1"]
    assert 0 < plain["exact_at_1"] <= plain["exact_at_3"] <= 1
    assert plain["predict_us_median"] < 5000


def test_a_run_with_the_learned_speculator_keeps_sequential_rewards(tau2_dir: Path, spec_file: Path) -> None:
    spec = RunSpec.of(bench="tau2-telecom", data_dir=str(tau2_dir), split="test", limit=4, solo=True, agent="oracle",
                      speculator_model=f"learned:{spec_file}", modes="sequential,sa", latency_model="smc-paper",
                      progress=False)
    assert spec.virtual_clock
    outcome = run(spec)
    rewards = {mode: [e.reward for e in result.episodes] for mode, result in outcome.modes.items()}
    assert rewards["sa"] == rewards["sequential"] == [1.0] * 4
    committed = [s for e in outcome.modes["sa"].episodes for s in e.execution["sources"]]
    assert "sa" in committed  # the learned guesses were right often enough to be kept


@dataclass
class Recording:
    """The oracle, noting the predicted calls each of its decisions was handed."""

    oracle: OracleAuthority
    predicted: list[list[ToolCall]] = field(default_factory=list)

    async def decide(self, history: History) -> Decision:
        self.predicted.append(list(getattr(history, "predicted", [])))
        await anyio.sleep(0.05)  # a model's decision takes time; the guess is in long before it ends
        return await self.oracle.decide(history)


def test_the_head_guess_reaches_the_authority_from_its_first_decision(bench, spec_file: Path) -> None:
    from agentspec.learned_speculator.artifact import load

    task = bench.tasks("test")[0]
    gold = gold_calls(bench, task)
    authority = Recording(OracleAuthority(gold))

    async def play() -> None:
        async with bench.open_backend(task, solo=True) as backend:
            speculator = LearnedSpeculator(load(spec_file).model, task_text(bench, task))
            loop = ExecutionLoop(backend, authority, speculator, config=ExecutorConfig(mode="sa", draft_first=True))
            await loop.run()

    anyio.run(play)
    assert authority.predicted[0], "the first decision got no predicted call"
    assert all(authority.predicted[: len(gold)])
