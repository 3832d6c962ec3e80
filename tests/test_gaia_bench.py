"""`agentspec run --bench gaia` and `agentspec score` on our own GAIA-format fixtures (tests/data/gaia-format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sandbox_support import needs_bwrap  # noqa: F401 - a fixture the sandboxed runs take

from agentspec import Bench
from agentspec.bench.protocol import has_user
from agentspec.cli import main

FIXTURES = Path(__file__).resolve().parent / "data" / "gaia-format"


def run(capsys, *argv):
    code = main(["run", "--json", "--bench", "gaia", "--data-dir", str(FIXTURES), "--no-progress", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


@pytest.mark.usefixtures("needs_bwrap")
def test_the_oracle_scores_every_question_in_every_mode(capsys, tmp_path):
    summary = run(capsys, "--agent", "oracle", "--mode", "sequential,sa,spork", "--speculator-model", "noisy-oracle:0.8",
                  "--latency-model", "smc-paper", "--out", str(tmp_path), "--backend", "overlay")
    # The Python tool's sandbox runs in real time while the simulated models keep the virtual clock.
    assert summary["play"] == "solo" and summary["clock"].startswith("virtual") and summary["tasks"] == 12
    for mode, figures in summary["modes"].items():
        assert figures["accuracy"] == 1.0 and figures["accuracy_by_level"] == {"1": 1.0, "2": 1.0, "3": 1.0}, mode
        assert figures["mean_task_wall_s"] > 0
    records = json.loads((tmp_path / "results.json").read_text())["episodes"]["sa"]
    evaluation = {r["task_id"]: r["evaluation"] for r in records}
    assert evaluation["ours-0006"]["answer"] == "123" and "kettles" in json.dumps(records)  # the xlsx was read
    observed = {r["task_id"]: json.dumps(r["messages"]) for r in records}
    for task_id, seen in {"ours-0007": "Lantern Room", "ours-0008": "17 volunteers", "ours-0009": "KV-2291",
                          "ours-0010": "LIGHTHOUSE", "ours-0011": "tides/tuesday.csv", "ours-0012": "28506"}.items():
        assert seen in observed[task_id], task_id  # docx, pptx, pdf, OCR of a png, zip, and Python in the sandbox
    assert evaluation["ours-0004"]["answer"] == "1987" and evaluation["ours-0004"]["correct"] is True
    searched = next(r for r in records if r["task_id"] == "ours-0004")["messages"]
    assert "Harbour Tide Museum" in json.dumps(searched)  # the local corpus answered the search
    # Each mode's answers in the leaderboard's format, which `agentspec score` reads back.
    assert summary["official_outputs"] == [str(tmp_path / f"submission-{mode}.jsonl") for mode in ("sequential", "sa", "spork")]
    lines = [json.loads(line) for line in (tmp_path / "submission-sa.jsonl").read_text().splitlines()]
    assert {line["task_id"]: line["model_answer"] for line in lines}["ours-0004"] == "1987" and len(lines) == 12
    code = main(["score", "--bench", "gaia", "--answers", str(tmp_path / "submission-sa.jsonl"), "--data-dir", str(FIXTURES)])
    assert code == 0 and json.loads(capsys.readouterr().out.strip().splitlines()[-1])["accuracy"] == 1.0
    # The run folder itself: each answer file its results.json lists, scored on its own.
    code = main(["score", "--bench", "gaia", "--answers", str(tmp_path), "--data-dir", str(FIXTURES)])
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["scores"]
    assert code == 0 and {Path(f).name: s["accuracy"] for f, s in scores.items()} == {
        f"submission-{mode}.jsonl": 1.0 for mode in ("sequential", "sa", "spork")}


def test_levels_filter_the_questions(capsys):
    summary = run(capsys, "--agent", "oracle", "--mode", "sequential", "--level", "3", "--backend", "none")
    assert summary["tasks"] == 2 and summary["modes"]["sequential"]["accuracy_by_level"] == {"3": 1.0}


def test_without_a_sandbox_there_is_no_python_tool(capsys, tmp_path):
    """--backend none: everything in this process; a call of run_python answers an error (the oracle still
    gives its recorded answer)."""
    run(capsys, "--agent", "oracle", "--mode", "sequential", "--backend", "none", "--task-ids", "ours-0012",
        "--out", str(tmp_path))
    record = json.loads((tmp_path / "results.json").read_text())["episodes"]["sequential"][0]
    tool_answers = [m["content"] for m in record["messages"] if m["role"] == "tool"]
    assert tool_answers == ["Error: Tool 'run_python' not found."]


@pytest.mark.parametrize(("argv", "message"), [
    (["--level", "4"], "levels are 1, 2 and 3"),
    (["--split", "nope"], "nope"),
    (["--search-backend", "altavista"], "altavista"),
])
def test_bad_options_exit_2(capsys, argv, message):
    code = main(["run", "--bench", "gaia", "--data-dir", str(FIXTURES), "--agent", "oracle", "--no-progress", *argv])
    assert code == 2 and message in capsys.readouterr().err


def test_a_missing_data_folder_says_where_the_data_comes_from(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("AGENTSPEC_GAIA_DATA", raising=False)
    code = main(["run", "--bench", "gaia", "--data-dir", str(tmp_path / "nothing"), "--agent", "oracle", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "AGENTSPEC_GAIA_DATA" in err


def test_score_a_submission_file(capsys, tmp_path):
    answers = tmp_path / "submission.jsonl"
    answers.write_text("\n".join(json.dumps(line) for line in [
        {"task_id": "ours-0001", "model_answer": "$42"},          # numeric: $ stripped
        {"task_id": "ours-0002", "model_answer": "marta oyelaran"},  # case and whitespace
        {"task_id": "ours-0003", "model_answer": "Osk"},          # wrong
        {"task_id": "ours-0005", "model_answer": "red,green,blue"},  # a list
    ]) + "\n")  # the other eight are missing: wrong
    code = main(["score", "--bench", "gaia", "--answers", str(answers), "--data-dir", str(FIXTURES)])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["scored"] == 12 and summary["accuracy"] == 0.25
    assert summary["accuracy_by_level"] == {"1": 0.4, "2": 0.0, "3": 0.5}


def test_the_gaia_bench_is_a_bench():
    from envs.gaia.bench import GaiaBench

    bench = GaiaBench.from_data_dir(FIXTURES)
    assert isinstance(bench, Bench) and not bench.in_process and not has_user(bench)
    tools = {spec.name: spec.effect.value for spec in bench.tools(bench.tasks()[0], solo=True)}
    assert tools == {"read_attachment": "read_only", "web_search": "read_only", "fetch_page": "read_only",
                     "run_python": "mutating", "done": "read_only"}
    unsandboxed = GaiaBench.from_data_dir(FIXTURES, backend="none")
    assert unsandboxed.in_process and "run_python" not in {s.name for s in unsandboxed.tools(bench.tasks()[0], solo=True)}
