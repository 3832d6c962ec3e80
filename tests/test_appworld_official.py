"""AppWorld's own ``appworld evaluate`` (the official CLI, in AppWorld's venv) scores the experiment outputs an
agentspec run writes (:mod:`envs.appworld.official`), and gets agentspec's TGC and SGC.

Runs the real engine on our fixture tasks (``envs/appworld/fixtures.py``); skipped only where the AppWorld venv
cannot be made (see ``tests/test_appworld.py``, whose fixtures these are).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import test_appworld

from agentspec.bench.protocol import OfficialOutputs
from agentspec.errors import DataError
from envs.appworld.bench import AppWorldBench
from envs.appworld.official import experiment_name

# The shared fixtures: AppWorld's venv (made once), our fixture data folder, the bench over it.
venv, fixture_root, bench = test_appworld.venv, test_appworld.fixture_root, test_appworld.bench

Records = dict[str, list[dict[str, Any]]]


def official(venv: dict, root: Path, experiment: str, dataset: str) -> dict[str, Any]:
    """``appworld evaluate EXPERIMENT DATASET --root ROOT`` in AppWorld's venv; the JSON report it saves."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "APPWORLD_ROOT")}
    done = subprocess.run([str(Path(venv["venv"]) / "bin" / "appworld"), "evaluate", experiment, dataset,
                           "--root", str(root)], check=False, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "task_goal_completion" in done.stdout  # its printed table
    return json.loads((root / "experiments" / "outputs" / experiment / "evaluations" / f"{dataset}.json").read_text())


def assert_same_scores(bench: AppWorldBench, report: dict[str, Any], records: list[dict[str, Any]]) -> None:
    ours = bench.figures(records)
    theirs = report["aggregate"]
    assert (theirs["task_goal_completion"], theirs["scenario_goal_completion"]) == (ours["tgc"], ours["sgc"])
    assert {task: bool(tracker["success"]) for task, tracker in report["individual"].items()} == \
        {record["task_id"]: record["reward"] == 1.0 for record in records}


@pytest.fixture(scope="module")
def api_records(bench: AppWorldBench) -> Records:
    """The dev split played by a scripted endpoint (agent and speculator) that answers agspecaddr_2 wrongly,
    sequential and sa; the records as ``results.json`` keeps them (through JSON)."""
    from scripted_openai_server import ScriptedOpenAIServer

    from agentspec.pipeline import run
    from agentspec.run_spec import RunSpec

    tasks = bench.tasks("dev")
    plans = {}
    for task in tasks:
        calls = [call for _, call in bench.gold_actions(task)]
        if task.id == "agspecaddr_2":  # 'Work' is in Millbrook: this answer fails the task's test
            calls = [c.model_copy(update={"arguments": {**c.arguments, "answer": "Lakeview"}})
                     if "answer" in c.arguments else c for c in calls]
        plans[task.instruction] = calls

    def responder(request: dict[str, Any]) -> dict[str, Any]:
        system = request["messages"][0]["content"]
        plan = next(calls for instruction, calls in plans.items() if instruction in system)
        made = sum(1 for message in request["messages"] if message["role"] == "tool")
        call = plan[min(made, len(plan) - 1)]
        # The authority thinks for a moment, so the speculator's draft of the same call is ready before it answers.
        return {"tool_calls": [{"name": call.name, "arguments": call.arguments}],
                "delay_s": 0.3 if request["model"] == "agent" else 0.0}

    with ScriptedOpenAIServer(responder, models=("agent", "speculator")) as srv:
        spec = RunSpec.of(agent="llm", agent_model=f"{srv.base_url}#agent", split="dev", modes="sequential,sa",
                          speculator_model=f"{srv.base_url}#speculator")
        outcome = run(spec, bench=bench)
    sources = {source for e in outcome.modes["sa"].episodes for source in (e.execution or {}).get("sources", [])}
    assert {"sa", "reuse"} & sources  # speculation ran: live's end state came through forks and commits
    return json.loads(json.dumps({mode: [e.record() for e in r.episodes] for mode, r in outcome.modes.items()}))


def test_appworld_evaluate_scores_a_run_as_agentspec_does(bench: AppWorldBench, venv: dict,
                                                          api_records: Records, tmp_path: Path) -> None:
    assert isinstance(bench, OfficialOutputs)  # what a run's writers look for
    written = bench.write_outputs(tmp_path, api_records)
    root = tmp_path / "appworld"
    assert written == [root / "experiments" / "outputs" / experiment_name(mode) for mode in ("sequential", "sa")]
    for mode, records in api_records.items():
        assert bench.figures(records) == {"tgc": 66.7, "sgc": 50.0}  # agspecaddr_2 failed, so its scenario did
        for record in records:  # each database log is kept as what the episode added to the task's input log
            state = record["evaluation"]["end_state"]
            assert not [path for path in state["files"] if path.endswith(".jsonl") and path.startswith("dbs/")]
            if record["task_id"].startswith("agspecaddr"):  # complete_task's one change
                assert state["appended"]["dbs/supervisor.jsonl"].count("\n") == 1
        report = official(venv, root, experiment_name(mode), "dev")
        assert_same_scores(bench, report, records)
        failed = report["individual"]["agspecaddr_2"]["failures"]
        assert [f["requirement"] for f in failed] == ["the answer given is the city of the 'Work' address"]
    # The experiment is also a dataset of its own: the tasks it played, whatever split they came from.
    assert (root / "data" / "datasets" / "agentspec_sa.txt").read_text().split() == \
        ["agspecaddr_1", "agspecaddr_2", "agspecnote_1"]


def test_a_failed_episode_is_its_task_input_and_a_subset_is_its_own_dataset(
        bench: AppWorldBench, venv: dict, api_records: Records, tmp_path: Path) -> None:
    by_task = {record["task_id"]: record for record in api_records["sequential"]}
    failed = {**by_task["agspecnote_1"], "evaluation": None, "reward": 0.0, "error": "EnvError: the worker exited"}
    records = {"sequential": [by_task["agspecaddr_1"], failed]}
    [experiment] = bench.write_outputs(tmp_path, records)
    task = experiment / "tasks" / "agspecnote_1"
    inputs = bench.data.data / "tasks" / "agspecnote_1" / "dbs"
    assert (task / "dbs" / "simple_note.jsonl").read_text() == (inputs / "simple_note.jsonl").read_text()
    manifest = json.loads((experiment / "agentspec.json").read_text())["tasks"]
    assert "failed before it was scored" in manifest["agspecnote_1"]["written"]
    report = official(venv, tmp_path / "appworld", experiment.name, experiment.name)  # two tasks: not a split
    assert_same_scores(bench, report, records["sequential"])
    assert report["aggregate"]["task_goal_completion"] == 50.0


def test_records_that_cannot_be_laid_out_fail_in_one_line_and_write_nothing(
        bench: AppWorldBench, api_records: Records, tmp_path: Path) -> None:
    record = api_records["sequential"][0]
    old = {**record, "evaluation": {**record["evaluation"], "end_state": None}}
    escaping = {**record, "evaluation": {**record["evaluation"], "end_state": {"files": {"dbs/../../x": ""}}}}
    unknown = {**record, "task_id": "../agspecaddr_1"}
    cases = [([old], "keeps no AppWorld end state"), ([escaping], "outside dbs/"), ([unknown], "no such task"),
             ([record, record], "appears twice")]
    for records, message in cases:
        with pytest.raises(DataError, match=message):
            bench.write_outputs(tmp_path, {"sequential": records})
        assert not (tmp_path / "appworld").exists()


def test_code_actions_are_scored_the_same(fixture_root: Path, venv: dict, tmp_path: Path) -> None:
    from sandbox_support import require_bwrap

    from agentspec.pipeline import run
    from agentspec.run_spec import RunSpec

    require_bwrap()  # code actions run each branch's worker in a bubblewrap jail
    bench = AppWorldBench.from_data_dir(fixture_root, python=venv["python"], actions="code")
    outcome = run(RunSpec.of(agent="oracle", split="dev", modes="sequential"), bench=bench)
    records = json.loads(json.dumps([e.record() for e in outcome.modes["sequential"].episodes]))
    assert all(record["evaluation"]["end_state"] for record in records)
    [experiment] = bench.write_outputs(tmp_path, {"sequential": records})
    report = official(venv, tmp_path / "appworld", experiment.name, "dev")
    assert_same_scores(bench, report, records)
    assert report["aggregate"]["task_goal_completion"] == 100.0
