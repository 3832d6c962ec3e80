"""AppWorld's own venv: made and filled by agentspec (``agentspec bench setup appworld``), idempotently.

AppWorld pins pydantic<2, fastapi<0.111, SQLAlchemy 1.4 and more, so it cannot share agentspec's venv.  Its venv
lives at ``$AGENTSPEC_APPWORLD_VENV`` or ``~/.cache/agentspec/appworld/venv``; setting it up pip-installs
``appworld==APPWORLD_VERSION`` from PyPI and runs ``appworld install`` (which unpacks the app sources; offline).

    >>> info = ensure_venv()          # creates it the first time (minutes), then only checks it (seconds)
    >>> info["appworld_version"]
    '0.1.3.post1'
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentspec.errors import ConfigError

APPWORLD_VERSION = "0.1.3.post1"
VENV_ENV = "AGENTSPEC_APPWORLD_VENV"
_CHECK = (
    "import appworld, os; from appworld.apps import get_all_apps; "
    "ok = all(os.path.exists(os.path.join(os.path.dirname(appworld.__file__), 'apps', a, 'apis.py')) "
    "for a in get_all_apps()); print(appworld.__version__ if ok else 'not-installed')"
)


def venv_path() -> Path:
    """Where the AppWorld venv is (``$AGENTSPEC_APPWORLD_VENV`` or ``~/.cache/agentspec/appworld/venv``)."""
    given = os.environ.get(VENV_ENV)
    return Path(given).expanduser() if given else Path.home() / ".cache" / "agentspec" / "appworld" / "venv"


def venv_python(venv: Path | None = None) -> Path:
    return (venv or venv_path()) / "bin" / "python"


def installed_version(venv: Path | None = None) -> str | None:
    """The appworld version ready in the venv (installed and its apps unpacked), else None."""
    python = venv_python(venv)
    if not python.exists():
        return None
    done = subprocess.run([str(python), "-c", _CHECK], check=False, capture_output=True, text=True, timeout=300)
    version = done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else None
    return version if version and version != "not-installed" else None


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ConfigError(f"AppWorld venv setup failed at {what}: {' | '.join(tail)} (needs PyPI access)")


def ensure_venv(venv: Path | None = None, *, python: str | None = None) -> dict[str, Any]:
    """Create and fill the venv unless it is ready; returns ``{"venv", "python", "appworld_version", "created"}``.

    ConfigError (one line) when it cannot be made, e.g. without PyPI.
    """
    venv = venv or venv_path()
    version = installed_version(venv)
    created = False
    if version != APPWORLD_VERSION:
        if not venv_python(venv).exists():
            venv.parent.mkdir(parents=True, exist_ok=True)
            _run([python or sys.executable, "-m", "venv", str(venv)], "creating the venv")
        pip = [str(venv_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run([*pip, f"appworld=={APPWORLD_VERSION}"], f"pip install appworld=={APPWORLD_VERSION}")
        _run([str(venv / "bin" / "appworld"), "install"], "appworld install")
        version = installed_version(venv)
        created = True
        if version != APPWORLD_VERSION:
            raise ConfigError(f"AppWorld venv at {venv} is not usable after setup (found {version!r})")
    return {"venv": str(venv), "python": str(venv_python(venv)), "appworld_version": version, "created": created}


def setup_command(args: argparse.Namespace) -> dict[str, Any]:
    """``agentspec bench setup appworld``: make the venv (``args.venv`` overrides where); its JSON summary."""
    given = getattr(args, "venv", None)
    return ensure_venv(Path(given).expanduser() if given else None)
