"""Messages that tell a newcomer what to do (issue 39, item 5): each mistake a first hour met is one line, exit 2,
naming the fix that works where the user is (the command line, not only the API)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentspec.cli import build_parser, main


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _tau2(tau2_dir: Path, *more: str) -> list[str]:
    return ["run", "--bench", "tau2-telecom", "--split", "base", "--agent", "oracle", "--data-dir", str(tau2_dir),
            "--task-ids", "[mobile_data_issue]user_abroad_roaming_enabled_off[PERSONA:None]", "--no-progress", *more]


def test_a_noisy_oracle_without_its_p_says_how_to_write_it(tau2_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _error(capsys, _tau2(tau2_dir, "--mode", "sa", "--speculator-model", "noisy-oracle"))
    assert "--speculator-model noisy-oracle needs its P" in line and "noisy-oracle:0.8" in line
    assert "endpoint" not in line


def test_missing_data_names_a_pull_command_that_parses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AGENTSPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("AGENTSPEC_TAU2_DATA", raising=False)
    line = _error(capsys, ["tasks", "--bench", "tau2-telecom"])
    assert "`agentspec data pull --bench tau2-telecom`" in line
    suggested = line.split("`")[1].split()[1:]
    assert build_parser().parse_args(suggested).bench == "tau2-telecom"


def test_a_macro_file_names_the_field_that_is_wrong(tau2_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    macros = tmp_path / "macros.json"
    macros.write_text(json.dumps({"format": "agentspec-macros/1", "macros": [{"bogus": 1}]}))
    line = _error(capsys, _tau2(tau2_dir, "--mode", "smc", "--speculator-model", "noisy-oracle:0.8",
                                "--macros", str(macros)))
    assert f"{macros} is not a valid macro library: macros.0." in line


def test_out_that_is_a_file_names_it_once(tau2_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "results"
    file.write_text("")
    line = _error(capsys, _tau2(tau2_dir, "--out", str(file)))
    assert line.count(str(file)) == 1 and "is a file, not a folder" in line
    line = _error(capsys, _tau2(tau2_dir, "--out", str(file / "sub")))
    assert f"{file / 'sub'}: {file} is a file, not a folder" in line


def test_no_bubblewrap_names_what_the_command_line_can_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import agentspec.sandbox.confinement as host

    monkeypatch.setattr(host, "find_bwrap", lambda: None)
    line = _error(capsys, ["run", "--bench", "workspace-demo", "--agent", "oracle", "--task-ids", "ws-rename-config",
                           "--no-progress", "--out", str(tmp_path / "out")])
    assert "bubblewrap (bwrap) is not installed" in line and "apt-get install bubblewrap" in line
    assert "--backend docker" in line  # what the command line can do; confinement='none' is the API's
