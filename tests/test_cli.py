"""The command line as users call it: last stdout line is JSON, user errors exit 2 without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentspec.cli import main

AIRPLANE = "[service_issue]airplane_mode_on[PERSONA:None]"
TRANSFER = "[service_issue]lock_sim_card_pin[PERSONA:Hard]"


def last_json(capsys):
    out = capsys.readouterr().out.strip().splitlines()
    return json.loads(out[-1])


def test_oracle_run_writes_results(tau2_dir, tmp_path, capsys):
    argv = ["run", "--json", "--bench", "tau2-telecom", "--split", "small", "--agent", "oracle", "--data-dir", str(tau2_dir),
            "--out", str(tmp_path / "out"), "--trials", "2", "--concurrency", "4", "--no-progress"]
    assert main(argv) == 0
    figures = last_json(capsys)["modes"]["sequential"]  # without --mode, a run is sequential
    assert figures["tasks"] == 20 and figures["episodes"] == 40
    assert figures["reward_mean"] == 1.0 and figures["pass_hat_k"] == {"1": 1.0, "2": 1.0}
    assert figures["wall_s"] > 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    record = results["episodes"]["sequential"][0]
    assert {"task_id", "reward", "evaluation", "steps", "timings", "messages"} <= set(record)
    assert record["evaluation"]["env_assertions"][0]["passed"] is True


def test_task_ids_and_limit(tau2_dir, capsys):
    assert main(["run", "--json", "--bench", "tau2-telecom", "--task-ids", f"{AIRPLANE},{TRANSFER}", "--agent", "oracle",
                 "--data-dir", str(tau2_dir), "--no-progress"]) == 0
    assert last_json(capsys)["tasks"] == 2
    assert main(["run", "--json", "--bench", "tau2-telecom", "--split", "train", "--limit", "5", "--agent", "oracle",
                 "--data-dir", str(tau2_dir), "--no-progress"]) == 0
    assert last_json(capsys)["tasks"] == 5


def test_evaluate_actions_file(tau2_dir, tmp_path, capsys):
    actions = tmp_path / "a.json"
    actions.write_text(json.dumps([{"requestor": "user", "name": "toggle_airplane_mode", "arguments": {}}]))
    assert main(["evaluate", "--bench", "tau2-telecom", "--task-id", AIRPLANE, "--actions", str(actions),
                 "--data-dir", str(tau2_dir)]) == 0
    result = last_json(capsys)
    assert result["reward"] == 1.0 and result["termination"] == "agent_stop"
    assert [c["passed"] for c in result["env_assertions"]] == [True, True]
    assert main(["evaluate", "--bench", "tau2-telecom", "--task-id", AIRPLANE, "--actions", str(actions),
                 "--end", "user", "--data-dir", str(tau2_dir)]) == 0
    assert last_json(capsys)["termination"] == "user_stop"


def test_evaluate_wrong_caller_and_error_limit(tau2_dir, tmp_path, capsys):
    wrong = [{"requestor": "assistant", "name": "toggle_airplane_mode", "arguments": {}}]
    (tmp_path / "w.json").write_text(json.dumps(wrong))
    assert main(["evaluate", "--bench", "tau2-telecom", "--task-id", AIRPLANE, "--actions", str(tmp_path / "w.json"),
                 "--data-dir", str(tau2_dir)]) == 0
    result = last_json(capsys)
    assert result["reward"] == 0.0 and result["num_errors"] == 1 and result["termination"] == "agent_stop"
    many = [{"requestor": "user", "name": "no_such_tool", "arguments": {}}] * 10 + [
        {"requestor": "user", "name": "toggle_airplane_mode", "arguments": {}}]
    (tmp_path / "m.json").write_text(json.dumps(many))
    assert main(["evaluate", "--bench", "tau2-telecom", "--task-id", AIRPLANE, "--actions", str(tmp_path / "m.json"),
                 "--data-dir", str(tau2_dir)]) == 0
    result = last_json(capsys)
    assert result["termination"] == "too_many_errors" and result["reward"] == 0.0


def test_evaluate_batch_keeps_input_order(tau2_dir, tmp_path, capsys):
    fix = [{"requestor": "user", "name": "toggle_airplane_mode", "arguments": {}}]
    transfer = [{"requestor": "assistant", "name": "transfer_to_human_agents", "arguments": {"summary": "x"}}]
    lines = [
        {"task_id": AIRPLANE, "actions": fix, "end": "user"},
        {"task_id": TRANSFER, "actions": [], "end": "agent"},
        {"task_id": TRANSFER, "actions": transfer},
    ]
    batch = tmp_path / "b.jsonl"
    batch.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert main(["evaluate", "--bench", "tau2-telecom", "--batch", str(batch), "--data-dir", str(tau2_dir)]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.strip().splitlines()]
    assert [(r["task_id"], r["reward"]) for r in out] == [(AIRPLANE, 1.0), (TRANSFER, 0.0), (TRANSFER, 1.0)]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not a valid actions file"),
        ('[{"requestor": "robot", "name": "x"}]', "requestor"),
        ('[{"requestor": "user"}]', "name"),
        ('{"requestor": "user", "name": "x"}', "not a valid actions file"),
        ('[{"requestor": "user", "name": "x", "arguments": [1]}]', "arguments"),
    ],
)
def test_malformed_actions_exit_2(tau2_dir, tmp_path, capsys, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code = main(["evaluate", "--bench", "tau2-telecom", "--task-id", AIRPLANE, "--actions", str(bad), "--data-dir", str(tau2_dir)])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err


def test_unknown_task_and_missing_inputs_exit_2(tau2_dir, tmp_path, capsys):
    ok = tmp_path / "ok.json"
    ok.write_text("[]")
    assert main(["evaluate", "--bench", "tau2-telecom", "--task-id", "nope", "--actions", str(ok), "--data-dir", str(tau2_dir)]) == 2
    assert "unknown task id" in capsys.readouterr().err
    assert main(["evaluate", "--bench", "tau2-telecom", "--task-id", AIRPLANE, "--actions", str(tmp_path / "none.json"), "--data-dir", str(tau2_dir)]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main(["evaluate", "--bench", "nope", "--task-id", AIRPLANE, "--actions", str(ok)]) == 2
    assert "unknown bench" in capsys.readouterr().err
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"task_id": "nope", "actions": []}\n')
    assert main(["evaluate", "--bench", "tau2-telecom", "--batch", str(batch), "--data-dir", str(tau2_dir)]) == 2
    assert capsys.readouterr().out == ""


def test_run_needs_an_agent_and_valid_split(tau2_dir, capsys):
    assert main(["run", "--bench", "tau2-telecom", "--data-dir", str(tau2_dir)]) == 2
    assert "--agent oracle" in capsys.readouterr().err
    assert main(["run", "--bench", "tau2-telecom", "--split", "nope", "--agent", "oracle", "--data-dir", str(tau2_dir)]) == 2
    assert "unknown split" in capsys.readouterr().err


def test_console_script_prints_json_last_and_progress_on_stderr(tau2_dir, tmp_path):
    exe = [sys.executable, "-m", "agentspec.cli"]
    done = subprocess.run(exe + ["run", "--json", "--bench", "tau2-telecom", "--split", "base", "--agent", "oracle", "--data-dir",
                                 str(tau2_dir), "--out", str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["tasks"] == 114 and summary["modes"]["sequential"]["reward_mean"] == 1.0
    assert "114/114" in done.stderr
