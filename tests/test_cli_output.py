"""The command line for a person (issue 39): ``run`` ends with a table of its modes and where its results are
(``--json``: the one JSON line scripts read), a run without ``--out`` still keeps its results, the long commands
say what they are doing on stderr, and every help shows its defaults, its benches and (``run``) its flags in groups."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from agentspec.cli import build_parser, main
from agentspec.cli.tables import mode_rows

SMALL_RUN = ["run", "--bench", "tau2-telecom", "--split", "test", "--limit", "2", "--solo", "--agent", "oracle",
             "--mode", "sequential,sa,smc", "--speculator-model", "noisy-oracle:0.8", "--latency-model", "smc-paper",
             "--no-progress"]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- the table, and --json


def test_run_prints_a_table_of_its_modes_and_json_with_the_flag(tau2_dir: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, *SMALL_RUN, "--data-dir", str(tau2_dir), "--out", str(tmp_path / "table"))
    assert code == 0, err
    assert not out.lstrip().startswith("{")
    # Rows of cells, whatever box the terminal's encoding gets (rich draws ASCII where it cannot draw lines).
    cells = [[cell.strip() for cell in re.split(r"[│┃|]", line)[1:-1]] for line in out.splitlines()]
    rows = {row[0]: row for row in cells if row}
    assert set(rows) == {"mode", "sequential", "sa", "smc"}
    reward = rows["mode"].index("reward")
    assert {"vs sequential", "hit rate", "committed ahead", "governor"} <= set(rows["mode"])
    assert all(rows[mode][reward] == "1.000" for mode in ("sequential", "sa", "smc"))  # each mode's reward
    assert "macro" in rows["smc"][rows["mode"].index("committed ahead")]  # smc's commits by kind
    assert out.strip().splitlines()[-1] == f"results: {tmp_path / 'table' / 'results.json'}"

    for argv in ([*SMALL_RUN, "--json"], ["--json", *SMALL_RUN]):  # after the subcommand or before it
        code, out, err = cli(capsys, *argv, "--data-dir", str(tau2_dir), "--out", str(tmp_path / argv[0]))
        assert code == 0, err
        [line] = out.splitlines()
        summary = json.loads(line)
        assert list(summary["modes"]) == ["sequential", "sa", "smc"] and summary["modes"]["smc"]["reward_mean"] == 1.0
        assert summary["results"] == str(tmp_path / argv[0] / "results.json")


def _figures(**more: Any) -> dict[str, Any]:
    return {"tasks": 3, "episodes": 6, "reward_mean": 0.5, "pass_hat_k": {"1": 0.5, "2": 0.25},
            "mean_task_wall_s": 10.0, **more}


def test_the_table_shows_the_figures_a_summary_has() -> None:
    summary = {
        "bench": "gaia", "trials": 2, "speedup_vs_sequential": {"sequential": 1.0, "sa": 2.0},
        "vs_baseline": {"speedup": {"sequential": 0.5, "sa": 1.0}},
        "modes": {"sequential": _figures(accuracy=0.5, live_executions=4),
                  "sa": _figures(accuracy=0.5, speculator_calls=9, speculator_hit_rate=0.75, commits_sa=3,
                                 live_executions=1, failed_episodes=1,
                                 governor={"m": {"paused": True, "saving_s": 1.0}})},
    }
    titles, rows = mode_rows(summary)
    assert titles == ["mode", "tasks", "reward", "accuracy", "pass^2", "mean task", "vs sequential", "vs baseline",
                      "hit rate", "committed ahead", "governor", "failed"]
    assert rows[1] == ["sa", "3", "0.500", "0.500", "0.250", "10.00 s", "2.00x", "1.00x", "75%", "3/4 (sa 3)",
                       "paused m", "1"]
    assert rows[0][titles.index("hit rate")] == "-" and rows[0][titles.index("committed ahead")] == "0/4"
    plain = {"bench": "tau2-telecom", "modes": {"sequential": _figures()}}
    assert mode_rows(plain)[0] == ["mode", "tasks", "reward", "mean task"]  # one trial, one mode: nothing more


# --------------------------------------------------------------------------- a run without --out


def test_a_run_without_out_keeps_its_results_in_a_new_folder(tau2_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AGENTSPEC_RUNS", str(tmp_path / "runs"))
    plain = ["run", "--bench", "tau2-telecom", "--split", "test", "--limit", "1", "--agent", "oracle", "--data-dir",
             str(tau2_dir), "--no-progress"]
    for _ in range(2):  # within the same second, most likely: each its own folder all the same
        code, out, err = cli(capsys, *plain)
        assert code == 0, err
        assert out.strip().splitlines()[-1].startswith(f"results: {tmp_path / 'runs' / 'tau2-telecom-'}")
    folders = sorted((tmp_path / "runs").iterdir())
    assert len(folders) == 2 and all((folder / "results.json").is_file() for folder in folders)
    assert all((folder / "run-sequential.log.jsonl").is_file() for folder in folders)  # resumable with --out

    code, _, err = cli(capsys, *plain, "--resume")  # a default folder is always new: nothing there to resume
    assert code == 2 and err.strip().splitlines() == ["agentspec: error: --resume needs --out DIR (the run log lives "
                                                      "there)"]
    code, _, err = cli(capsys, *plain, "--split", "nope")  # refused once the run starts: its folder goes too
    assert code == 2 and "unknown split" in err and len(err.strip().splitlines()) == 1
    assert sorted((tmp_path / "runs").iterdir()) == folders


def test_a_file_where_the_runs_folder_goes_is_one_line(tau2_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "runs").write_text("not a folder")
    monkeypatch.setenv("AGENTSPEC_RUNS", str(tmp_path / "runs"))
    code, _, err = cli(capsys, "run", "--bench", "tau2-telecom", "--limit", "1", "--agent", "oracle", "--data-dir",
                       str(tau2_dir), "--no-progress")
    assert code == 2 and err.count("\n") == 1 and "cannot make" in err and "set AGENTSPEC_RUNS" in err, err


def test_the_tests_never_write_runs_into_the_checkout(default_runs_folder: Path) -> None:
    assert os.environ["AGENTSPEC_RUNS"] == str(default_runs_folder)
    assert Path(__file__).resolve().parents[1] not in default_runs_folder.resolve().parents


def test_report_without_out_refuses_to_write_beside_a_recorded_run(traces_dir: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    trace = traces_dir / "sierra_gpt-4.1_telecom_solo.json"
    code, _, err = cli(capsys, "report", str(trace), "--bench", "tau2-telecom", "--data-dir",
                       str(traces_dir.parent / "tau2"))
    assert code == 2 and err.count("\n") == 1 and "give --out FILE.html" in err


# --------------------------------------------------------------------------- progress on stderr


def test_speculator_fit_says_what_it_is_doing(tau2_dir: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    fit = ["speculator", "fit", "--bench", "tau2-telecom", "--split", "small", "--data-dir", str(tau2_dir), "--out",
           str(tmp_path / "spec.json")]
    code, out, err = cli(capsys, *fit)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert lines[0] == "speculator fit: replaying 20 tasks' gold calls and 0 run episodes..."
    assert lines[1] == f"speculator fit: fitting on {json.loads(out)['trajectories']} trajectories..."
    assert lines[2].startswith("speculator fit: fitted in ") and lines[2].endswith(f"written to {tmp_path / 'spec.json'}")
    code, out, err = cli(capsys, *fit, "--no-progress")
    assert code == 0 and err == "" and json.loads(out)["trajectories"] > 0


def test_mine_says_what_it_is_doing(tau2_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mine = ["mine", "--bench", "tau2-telecom", "--split", "small", "--speculator-model", "noisy-oracle:0.8",
            "--max-states", "4", "--data-dir", str(tau2_dir), "--out", str(tmp_path / "macros.json")]
    code, out, err = cli(capsys, *mine)
    assert code == 0, err
    lines = err.strip().splitlines()
    assert lines[0] == "mine: reading trajectories from the small split's gold calls..."
    assert lines[-1].startswith("mine: kept ") and lines[-1].endswith(f"written to {tmp_path / 'macros.json'}")
    assert json.loads(out)["out"] == str(tmp_path / "macros.json")
    code, out, err = cli(capsys, *mine, "--no-progress")
    assert code == 0 and err == ""


def test_bench_setup_says_what_it_is_doing(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from agentspec.cli.commands import bench as command

    monkeypatch.setattr(command, "setup_bench", lambda name, venv: {"bench": name, "created": False})
    code, out, err = cli(capsys, "bench", "setup", "--bench", "appworld")
    assert code == 0 and json.loads(out) == {"bench": "appworld", "created": False}
    first, second = err.strip().splitlines()
    assert first.startswith("bench setup: setting up appworld (") and first.endswith("...")
    assert second.startswith("bench setup: appworld ready in ") and second.endswith(" s")
    assert cli(capsys, "bench", "setup", "appworld", "--no-progress")[1:] == (out, "")  # the positional, as before


# --------------------------------------------------------------------------- the bench as --bench everywhere


@pytest.mark.parametrize("argv", [["data", "path"], ["bench", "setup"]])
def test_the_bench_is_named_once(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    name = "tau2-telecom" if argv[0] == "data" else "appworld"
    code, _, err = cli(capsys, *argv, name, "--bench", name)
    assert code == 2 and err.strip().splitlines() == [
        f"agentspec: error: name the bench once: agentspec {' '.join(argv)} --bench NAME (or agentspec "
        f"{' '.join(argv)} NAME)"]
    code, _, err = cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "name the bench:" in err


def test_data_path_takes_the_bench_either_way(tau2_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flag = cli(capsys, "data", "path", "--bench", "tau2-telecom", "--data-dir", str(tau2_dir))
    positional = cli(capsys, "data", "path", "tau2-telecom", "--data-dir", str(tau2_dir))
    assert flag == positional and flag[0] == 0 and json.loads(flag[1])["data_dir"] == str(tau2_dir)


# --------------------------------------------------------------------------- help


def _parsers(parser: argparse.ArgumentParser, name: str = "agentspec") -> dict[str, argparse.ArgumentParser]:
    found = {name: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child, sub in action.choices.items():
                found |= _parsers(sub, f"{name} {child}")
    return found


def test_every_help_shows_its_defaults_and_takes_json() -> None:
    parsers = _parsers(build_parser())
    assert len(parsers) >= 20
    for name, parser in parsers.items():
        text = parser.format_help()
        assert "(default: None)" not in text and "(default: False)" not in text, name
        assert "--json" in text, name
    run = parsers["agentspec run"].format_help()
    assert "draft chain depth (default: 4)" in run and "(default: 200)" in run
    assert "verified (default) commits" in run
    assert "(default: verified)" not in run  # its help says so already
    assert "appworld, gaia, mcp, tau2-telecom, workspace-demo" in " ".join(run.split())
    assert "the bench to set up: appworld" in parsers["agentspec bench setup"].format_help()
    assert "(default: dev)" in " ".join(parsers["agentspec sandbox build"].format_help().split())


def test_run_help_is_in_groups() -> None:
    run = _parsers(build_parser())["agentspec run"].format_help()
    sections = ["run:", "models:", "modes and speculation:", "benches:", "benches: GAIA (--bench gaia):",
                "benches: MCP (--bench mcp):", "benches: AppWorld (--bench appworld):", "output:"]
    at = [run.index(f"\n{section}\n") for section in sections]
    assert at == sorted(at)
    flags = {line.split()[0]: at for at, line in enumerate(run.splitlines()) if line.startswith("  --")}
    lines = [run[:index].count("\n") for index in at]
    assert lines[2] < flags["--depth"] < lines[3] and lines[4] < flags["--level"] < lines[5] < flags["--mcp-url"]
    assert lines[1] < flags["--agent-model"] < lines[2] and lines[-1] < flags["--out"] and lines[-1] < flags["--json"]
