"""`agentspec speculator fit|score` and `agentspec mine` open the bench as `agentspec run` does: `--backend` and
`--bench-option KEY=VALUE` reach it (our own GAIA-format fixtures, tests/data/gaia-format)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentspec.cli import main

FIXTURES = Path(__file__).resolve().parent / "data" / "gaia-format"


def _argv(command: str, out: Path) -> list[str]:
    """``command`` on GAIA's validation split, writing under ``out`` where it writes."""
    head = ["--bench", "gaia", "--split", "validation", "--data-dir", str(FIXTURES)]
    return {
        "fit": ["speculator", "fit", *head, "--out", str(out / "spec.json")],
        "score": ["speculator", "score", *head, "--folds", "2"],
        "mine": ["mine", *head, "--speculator-model", "noisy-oracle:0.8", "--no-progress", "--out", str(out / "macros.json")],
    }[command]


def _summary(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("command", ["fit", "score", "mine"])
def test_the_backend_reaches_the_bench(command, capsys, tmp_path, monkeypatch):
    """GAIA's Python tool runs in Docker by default: with no engine that is a one-line error naming --backend,
    and --backend none (no Python tool, everything in process) replays the gold calls without one."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-engine.sock'}")
    assert "--backend" in _usage_error(capsys, _argv(command, tmp_path))
    summary = _summary(capsys, [*_argv(command, tmp_path), "--backend", "none"])
    assert summary["bench"] == "gaia"


def test_bench_options_pick_the_tasks_fitted_and_scored(capsys, tmp_path):
    """levels=1,2 fits on the ten questions of levels 1 and 2; levels=3 scores the other two, held out."""
    spec = tmp_path / "spec.json"
    fitted = _summary(capsys, [*_argv("fit", tmp_path), "--backend", "none", "--bench-option", "levels=1,2",
                               "--bench-option", "search=local"])
    assert fitted["trajectories"] == 10 and len(json.loads(spec.read_text())["fitted_on"]["task_ids"]) == 10
    scored = _summary(capsys, ["speculator", "score", "--bench", "gaia", "--split", "validation", "--data-dir",
                               str(FIXTURES), "--speculator", str(spec), "--backend", "none", "--bench-option", "levels=3"])
    assert scored["tasks"] == 2 and scored["steps"] > 0
    # Without the option the split's every task is scored, and those the file was fitted on are refused.
    err = _usage_error(capsys, ["speculator", "score", "--bench", "gaia", "--split", "validation", "--data-dir",
                                str(FIXTURES), "--speculator", str(spec), "--backend", "none"])
    assert "10 of the 12 scored tasks were in the speculator's fit" in err


@pytest.mark.parametrize("command", ["fit", "score", "mine"])
@pytest.mark.parametrize(("option", "message"), [
    ("levels", "write KEY=VALUE"),               # not KEY=VALUE
    ("=3", "write KEY=VALUE"),                   # no key
    ("levels=4", "levels are 1, 2 and 3"),       # the bench's own check of its setting
])
def test_a_bad_bench_option_is_a_usage_error(command, option, message, capsys, tmp_path):
    err = _usage_error(capsys, [*_argv(command, tmp_path), "--backend", "none", "--bench-option", option])
    assert message in err


def test_an_unknown_backend_is_refused_by_the_parser(capsys, tmp_path):
    assert "invalid choice" in _usage_error(capsys, [*_argv("fit", tmp_path), "--backend", "bwrap"])
