"""The command line follows its neighbours' habits: ``--version``, Ctrl-C is one line and exit 130 (in a ``--mode``
run too, where it arrives inside a task group), and a closed pipe ends the command quietly (issue 39)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AGENTSPEC = [sys.executable, "-m", "agentspec.cli"]


def test_version() -> None:
    done = subprocess.run([*AGENTSPEC, "--version"], capture_output=True, text=True, check=False, cwd=REPO)
    assert done.returncode == 0 and done.stdout.startswith("agentspec ")


def test_a_closed_pipe_ends_quietly(tau2_dir: Path) -> None:
    """``agentspec tasks --split full | head -1``: the reader goes away after one of 2,285 lines."""
    shell = (f"{sys.executable} -m agentspec.cli tasks --bench tau2-telecom --split full --data-dir {tau2_dir} "
             "| head -1; exit ${PIPESTATUS[0]}")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=False, cwd=REPO)
    assert done.returncode == 141 and done.stderr == "" and done.stdout.count("\n") == 1


def test_ctrl_c_in_a_mode_run_is_one_line_and_exit_130(tau2_dir: Path, tmp_path: Path) -> None:
    """SIGINT in the middle of a ``--mode`` run (every task of the full split on the wall clock): one line, 130."""
    process = subprocess.Popen([*AGENTSPEC, "run", "--bench", "tau2-telecom", "--split", "full", "--agent", "oracle",
                                "--mode", "sequential,sa", "--speculator-model", "noisy-oracle:0.8", "--data-dir",
                                str(tau2_dir), "--no-progress", "--out", str(tmp_path / "out")],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    log = tmp_path / "out" / "run-sequential.log.jsonl"
    while not (log.is_file() and log.stat().st_size > 20_000) and time.monotonic() < deadline:
        time.sleep(0.2)  # well into the run: some tasks logged
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "agentspec: interrupted" and "Traceback" not in err


def test_a_misspelt_effect_is_refused_where_the_tool_is_defined() -> None:
    import pytest

    from agentspec import tool
    from agentspec.errors import ConfigError
    from agentspec.types import Effect

    with pytest.raises(ConfigError, match=r"@tool\('readonly'\): not an effect; give an Effect or one of read_only"):
        tool("readonly")
    assert tool("read_only")(lambda: None).__agentspec_effect__ is Effect.READ_ONLY
    assert tool(Effect.EXTERNAL)(lambda: None).__agentspec_effect__ is Effect.EXTERNAL


def test_no_silent_surprises(tau2_dir: Path, capsys) -> None:
    """A flag that would be ignored is an error that says what to do."""
    from agentspec.cli import main

    code = main(["run", "--bench", "tau2-telecom", "--agent", "oracle", "--speculator-model", "noisy-oracle:0.8",
                 "--data-dir", str(tau2_dir), "--limit", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--speculator-model is only used by a speculating mode, and --mode sequential has none" in err
    code = main(["run", "--bench", "workspace-demo", "--agent", "oracle", "--bench-option", "colour=blue",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--bench-option colour: bench workspace-demo has no such option; it takes none" in err
    code = main(["run", "--bench", "appworld", "--agent", "oracle", "--bench-option", "app=spotify", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--bench-option app: bench appworld has no such option; it takes actions, apps, python" in err


def test_a_baseline_of_other_tasks_is_refused(tau2_dir: Path, tmp_path: Path, capsys) -> None:
    from agentspec.cli import main

    common = ["run", "--bench", "tau2-telecom", "--agent", "oracle", "--data-dir", str(tau2_dir), "--no-progress"]
    assert main([*common, "--split", "small", "--out", str(tmp_path / "small")]) == 0
    capsys.readouterr()
    code = main([*common, "--split", "test", "--baseline", str(tmp_path / "small")])
    err = capsys.readouterr().err
    assert code == 2 and "it ran 20 episodes of split small, this run 40 of split test" in err
    assert main([*common, "--split", "small", "--baseline", str(tmp_path / "small")]) == 0
