"""PinnedVenv: where a venv lives, how its version is read, and the setup steps in order, failing in one line.

These run against a fake venv (a ``bin/python`` shell script that logs its calls) so that no test needs PyPI;
the real venvs (tau2's, AppWorld's) are made and used by tests/test_tau2_official.py and tests/test_appworld.py.
"""

from __future__ import annotations

import stat
from dataclasses import replace
from pathlib import Path

import pytest

from agentspec.errors import ConfigError
from agentspec.pinned_venv import PinnedVenv

PROBE = "print('1.0')"
DEMO = PinnedVenv(name="demo", label="Demo", package="demo-pkg", version="1.0", env_var="AGENTSPEC_DEMO_VENV",
                  probe=PROBE)


def fake_venv(root: Path, python: str, scripts: dict[str, str] | None = None) -> Path:
    """A folder laid out as a venv whose ``bin/python`` (and each of ``scripts``) is the given shell script body."""
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    for name, body in {"python": python, **(scripts or {})}.items():
        path = venv / "bin" / name
        path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return venv


def test_the_venv_is_under_the_cache_unless_the_variable_says_where(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.delenv("AGENTSPEC_DEMO_VENV", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert DEMO.path() == tmp_path / ".cache" / "agentspec" / "demo" / "venv"
    monkeypatch.setenv("AGENTSPEC_DEMO_VENV", "~/elsewhere")
    assert DEMO.path() == tmp_path / "elsewhere"
    assert DEMO.python() == tmp_path / "elsewhere" / "bin" / "python"


def test_the_version_is_the_probes_last_line_and_none_when_it_fails(tmp_path: Path) -> None:
    assert DEMO.installed_version(tmp_path / "missing") is None
    ready = fake_venv(tmp_path / "a", 'echo "import noise"; echo 1.0')
    assert DEMO.installed_version(ready) == "1.0"
    broken = fake_venv(tmp_path / "b", "echo 1.0; exit 1")
    assert DEMO.installed_version(broken) is None
    silent = fake_venv(tmp_path / "c", "exit 0")
    assert DEMO.installed_version(silent) is None


def test_a_ready_venv_is_only_checked(tmp_path: Path) -> None:
    log = tmp_path / "log"
    venv = fake_venv(tmp_path, f'echo "$*" >> {log}; echo 1.0')
    info = DEMO.ensure(venv)
    assert info == {"venv": str(venv), "python": str(venv / "bin" / "python"), "demo_version": "1.0",
                    "created": False}
    assert log.read_text(encoding="utf-8").splitlines() == [f"-c {PROBE}"]


def test_setup_installs_the_pin_then_runs_the_scripts(tmp_path: Path) -> None:
    log, marker = tmp_path / "log", tmp_path / "unpacked"
    # The probe sees the version only once the script has run, as AppWorld's does after ``appworld install``.
    python = f'echo "python $*" >> {log}; [ "$1" = -c ] && {{ [ -e {marker} ] || exit 1; echo 1.0; }}; exit 0'
    venv = fake_venv(tmp_path, python, {"tool": f'echo "tool $*" >> {log}; touch {marker}'})
    info = replace(DEMO, scripts=(("tool", "install", "--all"),)).ensure(venv)
    assert info["demo_version"] == "1.0" and info["created"] is True
    assert log.read_text(encoding="utf-8").splitlines() == [
        f"python -c {PROBE}",
        "python -m pip install --quiet --disable-pip-version-check demo-pkg==1.0",
        "tool install --all",
        f"python -c {PROBE}",
    ]


def test_a_failed_step_is_one_line_naming_it(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path, '[ "$1" = -m ] && { echo "no index reachable" >&2; exit 3; }; exit 1')
    with pytest.raises(ConfigError, match=r"^Demo venv setup failed at pip install demo-pkg==1.0: no index "
                                          r"reachable \(needs PyPI access\)$"):
        DEMO.ensure(venv)


def test_a_venv_still_unusable_after_setup_says_what_it_found(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path, '[ "$1" = -c ] && echo 0.9; exit 0')
    with pytest.raises(ConfigError, match=r"Demo venv at .* is not usable after setup \(found '0.9'\)"):
        DEMO.ensure(venv)
