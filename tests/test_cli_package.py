"""The CLI package: light at startup, one flag-helper module shared by every command."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from agentspec.cli import build_parser, main
from agentspec.cli.flags import noisy_oracle_p, number
from agentspec.errors import ConfigError

# The model SDK and its HTTP stack, rich, scipy: the package root used to load them into every command, --help too.
HEAVY = ("torch", "transformers", "docker", "matplotlib", "openai", "httpx", "rich", "scipy")


def test_importing_the_cli_loads_no_heavy_dependency() -> None:
    # A fresh interpreter: this test process may already hold any of them.
    probe = f"import sys, agentspec.cli; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


def test_building_the_parser_loads_no_heavy_dependency() -> None:
    probe = (f"import sys; from agentspec.cli import build_parser; build_parser(); "
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == ""


def test_help_of_every_command_loads_no_heavy_dependency() -> None:
    # What a user waits for: ``agentspec --help`` and ``agentspec COMMAND --help``, each run to its exit.
    probe = (
        "import contextlib, io, sys\n"
        "from agentspec.cli import build_parser, main\n"
        "commands = sorted(build_parser()._subparsers._group_actions[0].choices)\n"
        "for argv in [['--help'], *([command, '--help'] for command in commands)]:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "        main(argv)\n"
        f"print(len(commands), ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    count, _, loaded = done.stdout.strip().partition(" ")
    assert int(count) >= 12 and loaded == ""


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "agentspec.cli", "run"], capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [("agentspec: error: agentspec run: the following arguments are required: "
                                                 "--bench (see agentspec run --help)")]


def test_every_command_has_its_handler() -> None:
    parser = build_parser()
    for argv in (["run", "--bench", "b"], ["evaluate", "--bench", "b"], ["tasks", "--bench", "b"], ["data", "path", "b"],
                 ["models", "list"], ["serve", "--model", "m"], ["sandbox", "sweep"], ["mine", "--bench", "b", "--out", "o"],
                 ["report", "r", "--out", "o"]):
        module, _, function = parser.parse_args(argv).handler.partition(":")
        assert module.startswith("agentspec.") and function.endswith("_command"), argv


@pytest.mark.parametrize(("spec", "p"), [("noisy-oracle:0.8", 0.8), ("noisy-oracle:0", 0.0), ("noisy-oracle:1", 1.0),
                                         ("http://127.0.0.1:8000/v1#m", None), (None, None), ("", None)])
def test_noisy_oracle_p(spec: str | None, p: float | None) -> None:
    assert noisy_oracle_p(spec) == p


@pytest.mark.parametrize(("spec", "message"), [("noisy-oracle:x", "P must be a number in [0, 1]"),
                                               ("noisy-oracle:1.5", "P must be in [0, 1]"),
                                               ("noisy-oracle:nan", "P must be in [0, 1]")])
def test_noisy_oracle_p_refuses_a_bad_p(spec: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"--speculator-model .*" + message.replace("[", r"\[").replace("]", r"\]")):
        noisy_oracle_p(spec)


@pytest.mark.parametrize("command", [["run", "--bench", "tau2-telecom", "--solo", "--agent", "oracle", "--mode", "sa"],
                                     ["mine", "--bench", "tau2-telecom", "--out", "x.json"]])
def test_run_and_mine_refuse_the_same_bad_noisy_oracle(command: list[str], capsys, tmp_path) -> None:
    argv = [*command, "--speculator-model", "noisy-oracle:2", "--data-dir", str(tmp_path / "missing")]
    assert main(argv) == 2
    assert "--speculator-model noisy-oracle:2: P must be in [0, 1]" in capsys.readouterr().err


def test_number_doctest_values() -> None:
    assert number(int, ge=1)("3") == 3
    with pytest.raises(argparse.ArgumentTypeError, match="must be an integer >= 1, got '-1'"):
        number(int, ge=1)("-1")
