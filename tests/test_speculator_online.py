"""Learning online: a run's finished tasks update the speculator's counts, so a workflow the fit never saw is
guessed on the run's later tasks; the updated file is byte-stable and loads."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from test_speculator_core import PATTERNS, episode, fitted, obs

from agentspec.cli import main
from agentspec.learned_speculator.artifact import Artifact, FittedOn, load
from agentspec.learned_speculator.command import fit_bench
from agentspec.learned_speculator.online import OnlineLearner
from agentspec.learned_speculator.score import score_tasks
from agentspec.learned_speculator.trajectories import Trajectory
from agentspec.types import ToolCall


def claim(number: int) -> Trajectory:
    """A workflow absent from the fit: open a claim for the account in the text, attach the claim id the answer
    gave, then escalate it."""
    account, claim_id = f"A{7000 + number}", f"A{9000 + number}"
    text = f"Account {account} reports a damaged parcel."
    steps = (
        (ToolCall(name="open_claim", arguments={"account": account}), obs("open_claim", json.dumps({"claim": claim_id}))),
        (ToolCall(name="attach_photo", arguments={"claim": claim_id, "kind": "parcel"}), obs("attach_photo", "Attached.")),
        (ToolCall(name="escalate", arguments={"claim": claim_id}), obs("escalate", "Escalated.")),
    )
    return Trajectory(f"claim{number}", text, steps, "run")


def exact_hits(model, trajectory: Trajectory) -> int:
    hits = 0
    for position, (call, _) in enumerate(trajectory.steps):
        guesses = model.predict(trajectory.text, trajectory.steps[:position], None)
        hits += bool(guesses) and guesses[0].call == call
    return hits


def base_artifact() -> Artifact:
    trajectories = [episode(i, vip=i % 2 == 0) for i in range(6)]
    return Artifact(fitted_on=FittedOn(task_ids=[t.task_id for t in trajectories]), model=fitted(trajectories))


def test_tasks_learned_online_teach_a_workflow_the_fit_never_saw() -> None:
    base = base_artifact()
    later = [claim(n) for n in range(10, 14)]
    without = sum(exact_hits(base.model, t) for t in later)
    learner = OnlineLearner(base)
    for n in range(3):
        done = claim(n)
        learner.learn(done.task_id, done.text, done.steps)
    with_learning = sum(exact_hits(learner.model, t) for t in later)
    # The fit knows nothing of claims (its tables guess a lookup or a refund); after three finished claims the
    # second and third calls, arguments from the answer included, are right on every later claim.
    assert without == 0
    assert with_learning >= 2 * len(later)
    # What the fit already knew is still guessed as well as before.
    old = episode(42, vip=True)
    assert exact_hits(learner.model, old) >= exact_hits(base.model, old)
    assert base.model.online == {}  # the loaded file's model is left alone: a run learns on its own copy


def test_the_updated_speculator_is_byte_stable_loads_and_names_the_learned_tasks(tmp_path: Path) -> None:
    files = []
    for attempt in range(2):
        learner = OnlineLearner(base_artifact())
        for n in range(3):
            done = claim(n)
            learner.learn(done.task_id, done.text, done.steps)
        path = tmp_path / f"learned-{attempt}.json"
        learner.artifact().save(path)
        files.append(path.read_bytes())
    assert files[0] == files[1]
    loaded = load(tmp_path / "learned-0.json")
    assert loaded.fitted_on.online_tasks == 3
    assert {"claim0", "claim1", "claim2"} <= set(loaded.fitted_on.task_ids)
    assert exact_hits(loaded.model, claim(20)) >= 2
    assert PATTERNS == [tuple(p) for p in loaded.model.value_patterns]


def test_a_run_with_learn_online_saves_a_speculator_that_learned_its_solved_tasks(bench, tau2_dir: Path,
                                                                                  tmp_path: Path) -> None:
    spec_file, saved = tmp_path / "spec.json", tmp_path / "spec-online.json"
    anyio.run(lambda: fit_bench(bench, bench.tasks("train", limit=4), split="train")).save(spec_file)
    tasks = [t.id for t in bench.tasks("test", limit=3)]
    code = main(["run", "--bench", "tau2-telecom", "--split", "test", "--limit", "3", "--solo", "--agent", "oracle",
                 "--speculator-model", f"learned:{spec_file}", "--mode", "sa", "--latency-model", "smc-paper",
                 "--learn-online", "--save-speculator", str(saved), "--data-dir", str(tau2_dir), "--no-progress"])
    assert code == 0
    learned = load(saved)
    before = load(spec_file)
    assert learned.fitted_on.online_tasks == 3 and set(tasks) <= set(learned.fitted_on.task_ids)
    assert learned.model.online and not before.model.online
    assert learned.model.rules == before.model.rules  # counts learned, the fitted rules kept


def test_learn_online_without_a_learned_speculator_is_refused_in_one_line(tau2_dir: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--bench", "tau2-telecom", "--split", "test", "--limit", "1", "--solo", "--agent", "oracle",
                 "--speculator-model", "noisy-oracle:0.8", "--mode", "sa", "--learn-online",
                 "--data-dir", str(tau2_dir), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "need a learned speculator" in err and err.count("\n") == 1


def test_prequential_scoring_learns_each_task_only_after_scoring_it(bench) -> None:
    artifact = anyio.run(lambda: fit_bench(bench, bench.tasks("train", limit=4), split="train"))
    tasks = bench.tasks("test", limit=3)
    learner = OnlineLearner(artifact)
    learning = anyio.run(lambda: score_tasks(bench, tasks, artifact.model, lookahead=False, learner=learner))
    plain = anyio.run(lambda: score_tasks(bench, tasks, artifact.model, lookahead=False))
    assert learner.learned == [t.id for t in tasks]
    first = [s.exact1 for s in learning if s.task_id == tasks[0].id]
    assert first == [s.exact1 for s in plain if s.task_id == tasks[0].id]  # nothing of a task before it is scored
    assert sum(s.exact1 for s in learning) >= sum(s.exact1 for s in plain)
